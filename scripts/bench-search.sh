#!/usr/bin/env bash
# srv-sim --search: which layout to launch, in how long (issue 35's goal: under 10 s each).
# The two cases: llama-3.1-70b on 8 x h200 and the original campaign's qwen3-32b on
# 8 x rtx-pro-6000, at the default SLO (ttft_ms=2000,tpot_ms=50 at p90), in=1024 out=256.
#
# Usage: scripts/bench-search.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p srv-sim
for case in "llama-3.1-70b h200" "qwen3-32b rtx-pro-6000"; do
  read -r model hardware <<<"$case"
  start=$(date +%s.%N)
  target/release/srv-sim --search --model "$model" --hardware "$hardware" --gpus 8
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" -v m="$model" -v h="$hardware" \
    'BEGIN { printf "%s on 8 x %s searched in %.2f s (goal: under 10 s)\n\n", m, h, b - a }'
done
