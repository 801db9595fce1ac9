#!/usr/bin/env bash
# The test command. On a fresh Debian 12 machine with Rust it prepares everything the tests need
# (scripts/setup/*.sh: each is idempotent, caches what it builds under ~/.cache/servbench, and
# prints `export VAR=...` lines for the tests), builds every binary, and runs the whole suite.
# No test is skipped for want of something installed: a missing piece fails loudly here.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

cleanup=()
# shellcheck disable=SC2154  # c is the loop variable inside the trap
trap 'for c in "${cleanup[@]}"; do eval "$c" || true; done' EXIT

for setup in scripts/setup/*.sh; do
  [ -e "$setup" ] || continue
  echo "== setup: $setup" >&2
  exports=$(bash "$setup" start)
  eval "$exports"
  cleanup+=("bash $setup stop")
done

echo "== cargo build" >&2
cargo build --workspace --bins --tests
echo "== cargo test" >&2
cargo test --workspace --no-fail-fast "$@"
