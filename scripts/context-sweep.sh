#!/usr/bin/env bash
# Context sweep: one server, the same load at growing prompt lengths (prefill cost, KV pressure),
# then the server is killed. The lengths must fit the server's context window.
#
# Usage:  LENS=1000,4000,16000,32000 scripts/context-sweep.sh ENGINE --model MODEL [flags...] | summarize
#   e.g.  LENS=1000,8000,32000 CONC=1,8 scripts/context-sweep.sh vllm --model Qwen/Qwen3-32B --tp 4
#         LENS=100000 CONC=1 LOADGEN_ARGS='-n 4 --timeout 10m' scripts/context-sweep.sh sglang ...
# LOADGEN_ARGS: more loadgen flags (requests per point, timeouts, labels); LENS, CONC and
# MAX_TOKENS set --input-len, -c and --max-tokens.
set -euo pipefail
LENS=${LENS:-1000,4000,16000}
CONC=${CONC:-1,8}
MAX_TOKENS=${MAX_TOKENS:-256}
LOADGEN_ARGS=${LOADGEN_ARGS:-}
[ $# -ge 1 ] || { echo "usage: LENS=a,b,c $0 ENGINE --model MODEL [srv-launch flags...]" >&2; exit 2; }

echo "context-sweep: prompt lengths $LENS at concurrency $CONC" >&2
engine=$1
shift
# Our flags before the caller's: anything after a `--` in them goes to the engine.
# shellcheck disable=SC2086  # LOADGEN_ARGS is a list of flags
srv-launch "$engine" --label sweep=context "$@" \
  | loadgen -c "$CONC" --input-len "$LENS" --max-tokens "$MAX_TOKENS" $LOADGEN_ARGS \
  | srv-kill
