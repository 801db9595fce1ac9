#!/usr/bin/env bash
# Tensor-parallel sweep: for each TP degree, launch the server on that many GPUs, sweep
# concurrency, kill it. Compare the summaries per tp label.
#
# Usage:  TPS='1 4 8' scripts/tp-sweep.sh ENGINE --model MODEL [srv-launch flags...] | summarize
#   e.g.  TPS='1 2 4 8' LOADGEN_ARGS='-c 1..256 --input-len 1000 --max-tokens 256' \
#           scripts/tp-sweep.sh sglang --model Qwen/Qwen3-32B --timeout 20m
# GPUs 0..tp-1 are used for each degree (CUDA_VISIBLE_DEVICES via --gpus).
set -euo pipefail
TPS=${TPS:-1 4 8}
LOADGEN_ARGS=${LOADGEN_ARGS:--c 1..64 --max-tokens 256}
[ $# -ge 1 ] || { echo "usage: TPS='1 4 8' $0 ENGINE --model MODEL [srv-launch flags...]" >&2; exit 2; }

engine=$1
shift
for tp in $TPS; do
  gpus=$(seq -s, 0 $((tp - 1)))
  echo "tp-sweep: tp=$tp on GPUs $gpus" >&2
  # Our flags before the caller's: anything after a `--` in them goes to the engine.
  # shellcheck disable=SC2086  # LOADGEN_ARGS is a list of flags
  srv-launch "$engine" --tp "$tp" --gpus "$gpus" "$@" | loadgen $LOADGEN_ARGS | srv-kill
done
