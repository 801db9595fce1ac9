#!/usr/bin/env bash
# servbench's GPU code on one GPU, each figure beside PyTorch's or NVML's in the same run
# (issues 25, 33), in about two minutes with carried binaries (scripts/carry-bins.sh):
#   libraries  which libcuda/libcublas/libcublasLt/libnccl collbench loads (file, version)
#   gemm       cuBLAS GEMMs of one decode step (llama-3.1-8b, llama-3.1-70b; TP1; batch
#              1,8,64; bf16, fp8; 20 calls back to back between two events) beside torch.matmul /
#              torch._scaled_mm timed as a CUDA graph of 20 calls (tools/collbench/bench/
#              torch_gemm.py): every GEMM within 5% of torch's, and each step as one CUDA-graph
#              replay within 3% of torch's graph of the same step
#   limits     copy, read, launch, launch+sync beside PyTorch's (bench/gpu_probe.py limits)
#   nccl       a one-rank allreduce through collbench's NCCL path: loads, forms, exact
#   p2p        collbench p2p --backend nccl over every GPU pair, copy engine then NCCL
#              send/recv (64M messages), and summarize's matrices of them (needs 2+ GPUs)
#   decode     collbench decode --compute, llama-3.1-70b TP1 (no allreduce: the compute half
#              alone), and summarize over it
#   telemetry  loadgen's nvidia-smi sampling during a torch matmul loop beside NVML and dmon
#   kill       srv-kill --pid on a PyTorch process holding 10 GiB: GPU memory before, after
#   pipeline   the whole loop: srv-launch sim | loadgen --gpu-host localhost | srv-kill |
#              summarize, and where each point's GPU energy came from (NVML's counter or
#              sampled power)
# Where a step cannot run (no GPU, no PyTorch with CUDA) it says why in one line; the rest run.
# Env: BIN (collbench, loadgen, srv-kill, srv-launch, srv-sim, summarize; default .carry/bin, else
#      target/release), OUT (default device-gpu-<time>), PYTHON (python3), ITERS (20), WARMUP (5),
#      HARDWARE (h200: the peaks set beside).
# OUT gets at most 8 files (the device tool brings back no more): table.txt, records.jsonl,
# log.txt, torch.txt, telemetry.txt, summarize.txt.
# Exit: 0 every step ran and passed; 1 a step failed (its line says FAILED); 2 the binaries are
# missing; 3 no GPU here: each GPU step said why, the rest ran and passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-device-gpu-$(date +%Y%m%dT%H%M%S)}
py=${PYTHON:-python3}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
hw=${HARDWARE:-h200}
bench=tools/collbench/bench
bin=${BIN:-.carry/bin}
[ -x "$bin/collbench" ] || bin=target/release
for b in collbench loadgen srv-kill srv-launch srv-sim summarize; do
  if [ ! -x "$bin/$b" ]; then
    echo "device-gpu.sh: $bin/$b not found: run scripts/carry-bins.sh here first (or BIN=DIR)" >&2
    exit 2
  fi
done
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
table=$work/table.txt log=$work/log.txt
: >"$table"
: >"$log"
failed=0
say() { echo "$*" | tee -a "$table"; }
fail() {
  say "$1: FAILED: $2"
  failed=$((failed + 1))
}
skip() { say "$1: cannot run: $2"; }
# run STEP RECORDS CMD...: stdout to RECORDS, stderr to the log; a failure is one line.
run() {
  local step=$1 rec=$2 rc
  shift 2
  echo "## $step: $*" >>"$log"
  "$@" </dev/null >"$rec" 2>"$work/err"
  rc=$?
  cat "$work/err" >>"$log"
  if [ "$rc" -ne 0 ]; then
    fail "$step" "${1##*/} exited $rc: $(tail -1 "$work/err")"
    return 1
  fi
}
# Waits (at most 60 s) for FILE to hold a line "ready".
ready() {
  local _
  for _ in $(seq 600); do
    grep -q '^ready' "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

gpu_why=""
if ! command -v nvidia-smi >/dev/null; then
  gpu_why="no NVIDIA GPU here (nvidia-smi not found)"
elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  gpu_why="nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -1))"
fi
torch_why=""
"$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
  torch_why="no PyTorch with CUDA in $py"
say "# device-gpu.sh $(date -u +%FT%TZ) on $(uname -n): collbench $("$bin/collbench" --version | cut -d' ' -f2)"
if [ -z "$gpu_why" ]; then
  say "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
fi
if [ -z "$torch_why" ]; then
  say "# $("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"
fi

# CUDA 13's libraries from the Python wheels (nvidia/cu13/lib, nvidia/cublas/lib, nvidia/nccl/lib
# or torch/lib): their directories on LD_LIBRARY_PATH, and libnccl.so -> libnccl.so.2 (cudarc
# does not try the .2 name).
libdir=$work/lib
mkdir -p "$libdir"
dirs=""
for s in $("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  while IFS= read -r f; do
    d=${f%/*}
    case ":$dirs:" in *":$d:"*) ;; *) dirs="$dirs:$d" ;; esac
    if [ "${f##*/}" = libnccl.so.2 ]; then ln -sf "$f" "$libdir/libnccl.so"; fi
  done < <(find "$s/nvidia" "$s/torch/lib" -maxdepth 4 \( -name 'libcublas.so.1[0-9]' -o \
    -name 'libcublasLt.so.1[0-9]' -o -name 'libnccl.so.2' -o -name 'libcudart.so.1[0-9]' \) 2>/dev/null)
done
export LD_LIBRARY_PATH="$libdir$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "# LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$log"

# libraries: a tiny GEMM loads them and says which; without them, the names looked for (the
# line it fails with is then the answer).
echo "## libraries" >>"$log"
if "$bin/collbench" gemm --compute-backend cublas --shape 64x64x64 -n 1 -w 0 </dev/null \
  >"$work/libs.jsonl" 2>"$work/err"; then
  say "libraries: $(grep -h 'collbench: loaded' "$work/err" | head -1)"
elif [ -n "$gpu_why" ]; then
  say "libraries: not loadable here ($gpu_why): $(tail -1 "$work/err")"
else
  fail libraries "$(tail -1 "$work/err")"
fi
cat "$work/err" >>"$log"

# gemm: both models, both dtypes, beside PyTorch.
if [ -n "$gpu_why$torch_why" ]; then
  skip gemm "${gpu_why:-$torch_why}"
else
  for model in llama-3.1-8b llama-3.1-70b; do
    for dt in bf16 fp8; do
      rec=$work/gemm-$model-$dt.jsonl
      run "gemm $model $dt" "$rec" "$bin/collbench" gemm --compute-backend cublas --gemm-dtype "$dt" \
        --model "$model" --hardware "$hw" --tp 1 --batch 1,8,64 -n "$iters" -w "$warmup" \
        --label step=gemm --label "model=$model" || continue
      "$py" -c 'import json,sys; [print(r["batch"], r["name"], r["m"], r["n"], r["k"], r["per_step"]) for r in map(json.loads, sys.stdin) if r.get("kind") == "gemm"]' \
        <"$rec" | "$py" "$bench/torch_gemm.py" --dtype "$dt" --iters "$iters" --warmup "$warmup" \
        >"$work/torch-gemm-$model-$dt.txt" 2>>"$log" || {
        fail "gemm $model $dt" "torch_gemm.py: $(tail -1 "$log")"
        continue
      }
      sed "s/^/torch gemm $model $dt: /" "$work/torch-gemm-$model-$dt.txt" >>"$work/torch.txt"
      "$py" "$bench/device_table.py" gemm "$model" "$dt" "$rec" "$work/torch-gemm-$model-$dt.txt" | tee -a "$table"
    done
  done
fi

# limits: bandwidth and launches beside PyTorch's.
if [ -n "$gpu_why$torch_why" ]; then
  skip limits "${gpu_why:-$torch_why}"
elif run limits "$work/limits.jsonl" "$bin/collbench" limits --compute-backend cublas --hardware "$hw" \
  --bytes 1G -n 10 -w 2 --label step=limits; then
  if "$py" "$bench/gpu_probe.py" limits --bytes $((1 << 30)) --iters 10 --warmup 2 >"$work/torch-limits.json" 2>>"$log"; then
    cat "$work/torch-limits.json" >>"$work/torch.txt"
    "$py" "$bench/device_table.py" limits "$work/limits.jsonl" "$work/torch-limits.json" | tee -a "$table"
  else
    fail limits "gpu_probe.py limits: $(tail -1 "$log")"
  fi
fi

# nccl: one rank (two cannot share one GPU).
if [ -n "$gpu_why" ]; then
  skip nccl "$gpu_why"
elif run nccl "$work/nccl.jsonl" "$bin/collbench" --backend nccl -g 1 -b 8 -e 64M -f 8 -n "$iters" -w "$warmup" \
  --label step=nccl; then
  say "nccl: $(grep -h 'collbench: loaded' "$work/err" | head -1)"
  "$py" "$bench/device_table.py" nccl "$work/nccl.jsonl" | tee -a "$table"
fi

# p2p: every ordered pair of GPUs, the copy engine and NCCL as two steps (one failing leaves the
# other's figures), and the matrices as summarize prints them.
ngpus=0
[ -z "$gpu_why" ] && ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ -n "$gpu_why" ]; then
  skip p2p "$gpu_why"
elif [ "$ngpus" -lt 2 ]; then
  skip p2p "$ngpus GPU here: a pair needs two (run on a multi-GPU box)"
else
  for method in copy-engine nccl; do
    if run "p2p $method" "$work/p2p-$method.jsonl" "$bin/collbench" p2p --backend nccl -g "$ngpus" \
      --method "$method" --bytes 64M -n "$iters" -w "$warmup" --label step=p2p; then
      say "p2p $method: $(grep -c '"kind":"p2p"' "$work/p2p-$method.jsonl") pairs of $ngpus GPUs"
    fi
  done
  cat "$work"/p2p-*.jsonl >"$work/p2p.txt" 2>/dev/null
  if [ -s "$work/p2p.txt" ]; then
    run "p2p matrices" "$work/p2p-matrices.txt" "$bin/summarize" "$work/p2p.txt" &&
      tee -a "$table" <"$work/p2p-matrices.txt"
  fi
fi

# decode: both halves of a 70B step at TP1, and the budget as summarize prints it.
if [ -n "$gpu_why" ]; then
  skip decode "$gpu_why"
elif run decode "$work/decode.jsonl" "$bin/collbench" decode --backend nccl --model llama-3.1-70b --hardware "$hw" \
  --tp 1 --batch 1,8,64 --compute -n "$iters" -w "$warmup" --label step=decode; then
  "$py" "$bench/device_table.py" decode "$work/decode.jsonl" | tee -a "$table"
  run summarize "$work/summarize.txt" "$bin/summarize" "$work/decode.jsonl" &&
    say "summarize: $(wc -l <"$work/summarize.txt") lines in summarize.txt"
fi

# telemetry: loadgen against srv-sim while a matmul loop loads the GPU; NVML and dmon beside.
: >"$work/telemetry.txt"
"$bin/srv-sim" --port 0 --ttft 1ms --itl 1ms 2>"$work/sim.err" >/dev/null &
pids+=($!)
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|^srv-sim: listening on http://127.0.0.1:||p' "$work/sim.err")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  fail telemetry "srv-sim did not start: $(tail -1 "$work/sim.err")"
elif [ -n "$gpu_why$torch_why" ]; then
  if run telemetry "$work/loadgen.jsonl" "$bin/loadgen" --url "http://127.0.0.1:$port" -c 2 --duration 2s \
    --max-tokens 8 --input-len 16 --gpu-host localhost --label step=telemetry; then
    say "telemetry: loadgen ran ($(grep -c '"kind":"request"' "$work/loadgen.jsonl") requests); the GPU comparison cannot run: ${gpu_why:-$torch_why}"
  fi
else
  secs=20
  "$py" "$bench/gpu_probe.py" matmul --seconds $((secs + 15)) >"$work/matmul.out" 2>>"$log" &
  pids+=($!)
  if ! ready "$work/matmul.out"; then
    fail telemetry "the torch matmul loop did not start: $(tail -1 "$log")"
  else
    "$py" "$bench/gpu_probe.py" nvml --seconds $((secs + 3)) >"$work/nvml.jsonl" 2>>"$log" &
    pids+=($!)
    nvidia-smi dmon -s pucm -d 1 -c $((secs + 3)) >"$work/dmon.txt" 2>>"$log" &
    pids+=($!)
    t0=$(date +%s.%N)
    run telemetry "$work/loadgen.jsonl" "$bin/loadgen" --url "http://127.0.0.1:$port" -c 2 --duration "${secs}s" \
      --max-tokens 8 --input-len 16 --gpu-host localhost --scrape-interval 1s --label step=telemetry
    t1=$(date +%s.%N)
    sleep 3
    { echo "# nvml"; cat "$work/nvml.jsonl"; echo "# nvidia-smi dmon -s pucm -d 1"; cat "$work/dmon.txt"; } >>"$work/telemetry.txt"
    "$py" "$bench/device_table.py" telemetry "$work/loadgen.jsonl" "$work/nvml.jsonl" "$work/dmon.txt" "$t0" "$t1" |
      tee -a "$table"
  fi
fi

# kill: srv-kill --pid on a process holding GPU memory (here, without a GPU: a plain one).
if [ -n "$gpu_why$torch_why" ]; then
  sleep 300 &
  victim=$!
  pids+=("$victim")
  if run kill "$work/kill.jsonl" "$bin/srv-kill" --pid "$victim" --gpu-wait 5s --label step=kill; then
    "$py" "$bench/device_table.py" kill "$work/kill.jsonl" | tee -a "$table"
    say "kill: the GPU memory check cannot run: ${gpu_why:-$torch_why}"
  fi
else
  "$py" "$bench/gpu_probe.py" hold --gib 10 >"$work/hold.out" 2>>"$log" &
  victim=$!
  pids+=("$victim")
  if ! ready "$work/hold.out"; then
    fail kill "the torch process did not allocate 10 GiB: $(tail -1 "$log")"
  else
    say "kill: nvidia-smi before: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1)"
    run kill "$work/kill.jsonl" "$bin/srv-kill" --pid "$victim" --gpu-wait 30s --label step=kill &&
      "$py" "$bench/device_table.py" kill "$work/kill.jsonl" | tee -a "$table"
    say "kill: nvidia-smi after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1)"
  fi
fi

# pipeline: the loop people run, on this box: srv-launch sim | loadgen (this host's GPUs sampled:
# NVML where libnvidia-ml.so.1 loads, else nvidia-smi) | srv-kill | summarize; the line says
# each point's GPU energy source.
echo "## pipeline" >>"$log"
if PATH="$bin:$PATH" bash -c "set -o pipefail; srv-launch sim -- --ttft 1ms --itl 1ms |
    loadgen -c 1,8 --duration 3s --max-tokens 16 --input-len 16 --no-requests --gpu-host localhost \
      --label step=pipeline |
    srv-kill" </dev/null >"$work/pipeline.jsonl" 2>"$work/err"; then
  cat "$work/err" >>"$log"
  "$bin/summarize" "$work/pipeline.jsonl" >"$work/pipeline-summarize.txt" 2>>"$log" &&
    { echo "## summarize pipeline.jsonl"; cat "$work/pipeline-summarize.txt"; } >>"$work/summarize.txt"
  say "pipeline: $("$py" "$bench/device_table.py" pipeline "$work/pipeline.jsonl")"
  if [ -z "$gpu_why" ] && ! grep -q '"energy_source":"counter"' "$work/pipeline.jsonl"; then
    fail pipeline "no point's GPU energy came from a counter: $(grep -h 'GPU energy\|NVML' "$work/err" | head -1)"
  fi
else
  cat "$work/err" >>"$log"
  fail pipeline "srv-launch sim | loadgen | srv-kill exited non-zero: $(tail -1 "$work/err")"
fi

# What comes back: at most 8 files.
cat "$work"/*.jsonl >"$out/records.jsonl" 2>/dev/null
for f in log.txt torch.txt telemetry.txt summarize.txt; do
  if [ -s "$work/$f" ]; then cp "$work/$f" "$out/$f"; fi
done
if [ "$failed" -gt 0 ]; then
  say "# $failed step(s) FAILED; records, logs and this table in $out/"
  cp "$table" "$out/table.txt"
  exit 1
fi
if [ -n "$gpu_why" ]; then
  say "# no GPU here: each GPU step said why above, the rest ran; records, logs and this table in $out/"
  cp "$table" "$out/table.txt"
  exit 3
fi
say "# every step ran; records, logs and this table in $out/"
cp "$table" "$out/table.txt"
