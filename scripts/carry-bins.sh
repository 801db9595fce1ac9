#!/usr/bin/env bash
# Builds the binaries the device script needs in release, strips them into DIR (default
# .carry/bin, which .git/info/exclude should ignore) and checks their total against the device
# tool's 64 MiB carry limit (the whole working tree counts too: keep a margin). Prints each size.
# Usage: scripts/carry-bins.sh [DIR]    Exit: 0 fits, 1 too large or a build failed.
# The device has no Rust toolchain: build here (x86-64, as the device), carry DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.carry/bin}
bins=(collbench loadgen srv-kill srv-launch srv-sim summarize)
limit=$((64 << 20))
# The working tree travels beside the binaries: leave room for it.
budget=$((48 << 20))
args=()
for b in "${bins[@]}"; do args+=(-p "$b"); done
cargo build --release -q "${args[@]}"
mkdir -p "$dir"
total=0
for b in "${bins[@]}"; do
  cp "target/release/$b" "$dir/$b"
  strip "$dir/$b"
  size=$(stat -c %s "$dir/$b")
  total=$((total + size))
  printf '%-10s %9d bytes (%s MiB)\n' "$b" "$size" "$(echo "scale=1; $size / 1048576" | bc)"
done
printf '%-10s %9d bytes (%s MiB) of a %d MiB budget (the carry limit is %d MiB with the tree)\n' \
  total "$total" "$(echo "scale=1; $total / 1048576" | bc)" $((budget >> 20)) $((limit >> 20))
if [ "$total" -gt "$budget" ]; then
  echo "carry-bins.sh: $total bytes of binaries leave too little of the $((limit >> 20)) MiB carry limit" >&2
  exit 1
fi
