#!/usr/bin/env bash
# Context sweep: one server, the same load at growing prompt lengths (prefill cost, KV pressure),
# then the server is killed. The lengths must fit the server's context window.
#
# Usage:  LENS=1000,4000,16000,32000 scripts/context-sweep.sh ENGINE --model MODEL [flags...] | summarize
#   e.g.  LENS=1000,8000,32000 CONC=1,8 scripts/context-sweep.sh vllm --model Qwen/Qwen3-32B --tp 4
set -euo pipefail
LENS=${LENS:-1000,4000,16000}
CONC=${CONC:-1,8}
MAX_TOKENS=${MAX_TOKENS:-256}
[ $# -ge 1 ] || { echo "usage: LENS=a,b,c $0 ENGINE --model MODEL [srv-launch flags...]" >&2; exit 2; }

echo "context-sweep: prompt lengths $LENS at concurrency $CONC" >&2
engine=$1
shift
# Our flags before the caller's: anything after a `--` in them goes to the engine.
srv-launch "$engine" --label sweep=context "$@" \
  | loadgen -c "$CONC" --input-len "$LENS" --max-tokens "$MAX_TOKENS" \
  | srv-kill
