#!/usr/bin/env bash
# The compute half on the CPU, beside references from the same run (issue 13):
#   collbench gemm (the `gemm` crate, f32) TFLOP/s at one shape beside numpy's BLAS at the same
#   shape (target: within 2x), and collbench limits' copy bandwidth beside a plain memcpy loop
#   (numpy.copyto, one thread; both count 2 x bytes per copy; collbench keeps the fastest of
#   1, 2, 4 .. all threads).
# Env: SHAPE=MxNxK (default 512x4096x4096), ITERS=10, BYTES=256M, REPEATS=3 (best of),
#      THREADS (collbench --threads; default all cores; numpy uses its BLAS's default).
# numpy comes from a venv under ~/.cache/servbench (made once) when python3 has none.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p collbench >&2
cb=target/release/collbench
shape=${SHAPE:-512x4096x4096}
iters=${ITERS:-10}
bytes=${BYTES:-256M}
repeats=${REPEATS:-3}
threads=()
[ -n "${THREADS:-}" ] && threads=(--threads "$THREADS")

py=python3
if ! "$py" -c 'import numpy' 2>/dev/null; then
  venv="$HOME/.cache/servbench/venv-numpy"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/python" -c 'import numpy' 2>/dev/null || "$venv/bin/pip" install -q numpy >&2
  py="$venv/bin/python"
fi
ref=tools/collbench/bench/numpy_reference.py
IFS=x read -r m n k <<<"$shape"
size=$(numfmt --from=iec "$bytes")

best() { sort -g | tail -1; }
repeat() { for _ in $(seq "$repeats"); do "$@"; done; }
cb_gemm() { "$cb" gemm --shape "$shape" -n "$iters" -w 2 "${threads[@]}" </dev/null 2>/dev/null | jq -r 'select(.kind=="gemm") | .tflops'; }
np_gemm() { "$py" "$ref" gemm "$m" "$n" "$k" "$iters" 2 | awk '{print $2}'; }
cb_copy() { "$cb" limits --bytes "$bytes" -n "$iters" -w 2 "${threads[@]}" </dev/null 2>/dev/null | jq -r '.copy_gbps'; }
cb_read() { "$cb" limits --bytes "$bytes" -n "$iters" -w 2 "${threads[@]}" </dev/null 2>/dev/null | jq -r '.read_gbps'; }
np_copy() { "$py" "$ref" copy "$size" "$iters" 2 | awk '{print $2}'; }

cb_tf=$(repeat cb_gemm | best)
np_tf=$(repeat np_gemm | best)
cb_bw=$(repeat cb_copy | best)
cb_rd=$(repeat cb_read | best)
np_bw=$(repeat np_copy | best)
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; best of $repeats runs of $iters"
printf '%-34s %12s %12s %8s  %s\n' metric collbench reference ratio target
row() { printf '%-34s %12.4f %12.4f %8.2f  %s\n' "$1" "$2" "$3" "$(echo "$2 / $3" | bc -l)" "$4"; }
row "GEMM $shape f32 TFLOP/s (numpy)" "$cb_tf" "$np_tf" ">= 0.50"
row "copy $bytes GB/s (memcpy loop)" "$cb_bw" "$np_bw" "~1 (the same memcpy)"
row "read $bytes GB/s (memcpy loop)" "$cb_rd" "$np_bw" "(read counts 1x bytes)"
