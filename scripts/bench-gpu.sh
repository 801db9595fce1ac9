#!/usr/bin/env bash
# Both halves of a decode step on NVIDIA GPUs, each beside PyTorch in the same run (issue 13):
#   1. collbench --backend nccl allreduce vs torch.distributed.all_reduce, 1K..256M
#      (target: busbw within 3% at 64 MB);
#   2. collbench gemm --compute-backend cublas vs torch.matmul at one decode step's shapes
#      (llama-3.1-8b TP1, batch 1, 8, 64, bf16; target: each within 5%);
#   3. collbench limits (copy, read, launch) and collbench decode --compute (both halves of
#      the same step), an FP8 sweep where the GPU has FP8.
# One command, well inside 10 minutes (minutes on one GPU with a prebuilt binary; the build
# adds a few on 16 cores). Prints a table; writes every record and
# the table under OUT (default bench-gpu-<time>).
# Env: COLLBENCH (a prebuilt release binary; else cargo builds one), GPUS (default: all),
#      HARDWARE (card for the peaks, default h100), MODEL (default llama-3.1-8b),
#      DECODE_MODEL (default llama-3.1-70b), BATCH=1,8,64, ITERS=20, OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every check the run needs comes first: a missing GPU or PyTorch is one line and exit 2, before
# any build or measurement (the figures are only worth having beside PyTorch's).
fail() {
  echo "bench-gpu.sh: $*" >&2
  exit 2
}
command -v nvidia-smi >/dev/null ||
  fail "no NVIDIA GPU here (nvidia-smi not found): run scripts/bench-compute.sh for the CPU figures"
found=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$found" -ge 1 ] || fail "nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -1)): check the driver"
py=${PYTHON:-python3}
"$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
  fail "no PyTorch with CUDA in $py (the reference every figure is set beside): pip install torch, or PYTHON=/path/to/python"
gpus=${GPUS:-$found}
out=${OUT:-bench-gpu-$(date +%Y%m%dT%H%M%S)}
mkdir -p "$out"
cb=${COLLBENCH:-target/release/collbench}
if [ ! -x "$cb" ]; then
  cargo build --release -q -p collbench >&2
  cb=target/release/collbench
fi
# Runs collbench with its records to $1 and its stderr to $1's .log; a failure is one line
# naming the step and collbench's own last line, exit 2.
cbrun() {
  local rec=$1 log=${1%.jsonl}.log
  shift
  "$cb" "$@" </dev/null >"$rec" 2>"$log" || fail "collbench $* failed: $(tail -1 "$log") (all of it in $log)"
}
hw=${HARDWARE:-h100}
model=${MODEL:-llama-3.1-8b}
decode_model=${DECODE_MODEL:-llama-3.1-70b}
batch=${BATCH:-1,8,64}
iters=${ITERS:-20}

# NCCL and cuBLAS from PyTorch's wheels when the system has none: cudarc looks for libnccl.so,
# the wheel ships libnccl.so.2 (tools/collbench/README.md).
libs="$out/lib"
mkdir -p "$libs"
nv=$("$py" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null || true)
if [ -e "$nv/nccl/lib/libnccl.so.2" ]; then ln -sf "$nv/nccl/lib/libnccl.so.2" "$libs/libnccl.so"; fi
for dir in "$nv"/cublas/lib "$nv"/cuda_runtime/lib; do
  if [ -d "$dir" ]; then libs="$libs:$dir"; fi
done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
table="$out/table.txt"
: >"$table"
say() { echo "$*" | tee -a "$table"; }
ratio() { echo "$1 / $2" | bc -l; }
say "# $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus; collbench $("$cb" --version)"

# 1. Allreduce: NCCL through collbench and through torch.distributed, same sizes.
if [ "$gpus" -ge 2 ]; then
  cbrun "$out/nccl.jsonl" --backend nccl -g "$gpus" -b 1K -e 256M -f 2 -n "$iters" -w 5
  jq -r 'select(.kind=="coll") | "\(.bytes) \(.time_us.mean) \(.busbw_gbps)"' "$out/nccl.jsonl" | sort -k1,1 >"$out/nccl.txt"
  "$py" tools/collbench/bench/torch_allreduce.py --gpus "$gpus" --min 1024 --max $((256 << 20)) --factor 2 \
    --iters "$iters" | awk '{print $1, $2, $4}' | sort -k1,1 >"$out/torch_allreduce.txt"
  say ""
  say "# allreduce f32, $gpus GPUs   bytes  collbench_us  busbw   torch_us  busbw   busbw ratio"
  join "$out/nccl.txt" "$out/torch_allreduce.txt" | sort -n | while read -r b cu cb_bw tu t_bw; do
    mark=""; [ "$b" = $((64 << 20)) ] && mark="  <- target within 3%"
    say "$(printf '%38s %13.2f %7.2f %10.2f %7.2f %9.3f%s' "$b" "$cu" "$cb_bw" "$tu" "$t_bw" "$(ratio "$cb_bw" "$t_bw")" "$mark")"
  done
else
  say "# allreduce: $gpus GPU here; NCCL's allreduce needs two or more (GPUS=N on a bigger box)"
fi

# 2. The step's GEMMs: cuBLAS through collbench and torch.matmul, same shapes.
cbrun "$out/gemm.jsonl" gemm --compute-backend cublas --gemm-dtype bf16 --model "$model" --hardware "$hw" --tp 1 \
  --batch "$batch" -n "$iters" -w 5
jq -r 'select(.kind=="gemm") | "\(.name) \(.m) \(.n) \(.k) \(.time_us.mean) \(.tflops)"' "$out/gemm.jsonl" >"$out/gemm.txt"
cut -d' ' -f1-4 "$out/gemm.txt" | "$py" tools/collbench/bench/torch_gemm.py --dtype bf16 --iters "$iters" --warmup 5 \
  >"$out/torch_gemm.txt"
say ""
say "# $model TP1 bf16 GEMMs        m      n      k  cublas_us  TFLOP/s   torch_us  TFLOP/s  time ratio (target 0.95-1.05)"
paste -d' ' "$out/gemm.txt" "$out/torch_gemm.txt" | while read -r name m n k cu ctf _ _ _ _ tu ttf; do
  say "$(printf '%-24s %6s %6s %6s %10.2f %8.2f %10.2f %8.2f %9.3f' "$name" "$m" "$n" "$k" "$cu" "$ctf" "$tu" "$ttf" "$(ratio "$cu" "$tu")")"
done
jq -r 'select(.kind=="gemm_step") | "# step at batch \(.batch): GEMMs \(.gemm_us_per_step) us (roofline \(.roofline_us_per_step)), back to back \(.sequence_us.mean) us, launch overhead \(.launch_overhead_us_per_step) us"' \
  "$out/gemm.jsonl" | tee -a "$table"

# 3. Limits, FP8, and both halves of one step.
cbrun "$out/limits.jsonl" limits --compute-backend cublas --hardware "$hw"
say ""
jq -r '"# limits on \(.device): copy \(.copy_gbps) GB/s, read \(.read_gbps) GB/s (datasheet \(.datasheet_mem_gbps)), launch \(.launch_us.mean) us, launch+sync \(.launch_sync_us.mean) us"' \
  "$out/limits.jsonl" | tee -a "$table"
# FP8 needs a GPU that has it (Hopper, Ada, Blackwell): elsewhere one line says why.
if "$cb" gemm --compute-backend cublas --gemm-dtype fp8 --model "$model" --hardware "$hw" --batch "$batch" \
  -n "$iters" -w 5 </dev/null >"$out/gemm_fp8.jsonl" 2>"$out/gemm_fp8.log"; then
  jq -r 'select(.kind=="gemm_step") | "# fp8 step at batch \(.batch): GEMMs \(.gemm_us_per_step) us"' "$out/gemm_fp8.jsonl" | tee -a "$table"
else
  say "# fp8: $(tail -1 "$out/gemm_fp8.log")"
fi
if [ "$gpus" -ge 2 ]; then
  cbrun "$out/decode.jsonl" decode --backend nccl --model "$decode_model" --hardware "$hw" --tp "$gpus" --batch "$batch" \
    --compute -n "$iters" -w 5
fi
say ""
say "# records and logs in $out/"
