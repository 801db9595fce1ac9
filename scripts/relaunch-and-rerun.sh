#!/usr/bin/env bash
# Relaunch the same server RUNS times and rerun the same load each time (default: concurrency 1),
# to see how much a result moves between launches (warmup, allocation, compilation caches).
#
# Usage:  RUNS=3 scripts/relaunch-and-rerun.sh ENGINE [srv-launch flags...] | summarize
#   e.g.  RUNS=5 LOADGEN_ARGS='-c 1 -n 100 --max-tokens 256' \
#           scripts/relaunch-and-rerun.sh vllm --model meta-llama/Llama-3.1-8B-Instruct --tp 2
# Every record goes to stdout, labelled run=1..RUNS; srv-kill ends each server before the next.
set -euo pipefail
RUNS=${RUNS:-3}
LOADGEN_ARGS=${LOADGEN_ARGS:--c 1 -n 50}
[ $# -ge 1 ] || { echo "usage: RUNS=N $0 ENGINE [srv-launch flags...]" >&2; exit 2; }

engine=$1
shift
for run in $(seq 1 "$RUNS"); do
  echo "relaunch-and-rerun: run $run of $RUNS" >&2
  # Our flags before the caller's: anything after a `--` in them goes to the engine.
  # shellcheck disable=SC2086  # LOADGEN_ARGS is a list of flags
  srv-launch "$engine" --label run="$run" "$@" | loadgen $LOADGEN_ARGS | srv-kill
done
