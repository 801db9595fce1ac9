#!/usr/bin/env bash
# collbench's tcp allreduce beside Open MPI's MPI_Allreduce over its TCP transport, same machine,
# same run, loopback: bus bandwidth at 64 MB and time per op at 8 bytes, 2 and 4 ranks.
# Targets (issue 7): collbench busbw >= Open MPI's at 64 MB; collbench 8-byte time <= 1.5x Open MPI's.
# Both sides are timed the same way: pipelined (back-to-back ops, mean per op, as nccl-tests) and
# latency (a barrier before each op, mean of single ops). Run it on a quiet machine.
# Then the same 8-byte allreduce beside busy processes (issue 39: 926-1747 us beside a build
# where Open MPI took 22-30 us): collbench's mean and median, the times its ranks lost their
# core while waiting (lost_core_waits), Open MPI's mean. Goal: collbench's mean <= 2x Open MPI's.
# Env: RANKS="2 4", ITERS_BW=20, ITERS_LAT=2000, REPEATS=3 (best of), BUSY=1 (busy processes),
# QUIET=1 (0: only the busy table).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/setup/openmpi.sh start)"
cargo build --release -q -p collbench >&2
cb=target/release/collbench
# Open MPI refuses root without these; the run stays on this host.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2054  # tcp,self is one MCA value
mpi=("$SERVBENCH_MPIRUN" --oversubscribe --bind-to none --mca btl tcp,self --mca pml ob1 --mca btl_tcp_if_include lo)
ranks=${RANKS:-"2 4"}
iters_bw=${ITERS_BW:-20}
iters_lat=${ITERS_LAT:-2000}
repeats=${REPEATS:-3}
big=$((64 << 20))

best() { if [ "$1" = max ]; then sort -g | tail -1; else sort -g | head -1; fi; }

# collbench: one figure from its coll record. Args: np bytes iters mode field
cb_run() {
  "$cb" -np "$1" -b "$2" -e "$2" -n "$3" -w 5 --mode "$4" 2>/dev/null | jq -r "select(.kind==\"coll\") | $5"
}
# Open MPI: columns "bytes ranks mean_us busbw_gbps". Args: np bytes iters mode column
mpi_run() {
  "${mpi[@]}" -np "$1" "$SERVBENCH_MPI_ALLREDUCE" "$2" "$3" 5 "$4" 2>/dev/null | awk -v c="$5" '{print $c}'
}
repeat() { for _ in $(seq "$repeats"); do "$@"; done; }

quiet=${QUIET:-1}
[ "$quiet" = 1 ] && printf '%-5s %-28s %12s %12s %8s  %s\n' ranks metric collbench open_mpi ratio target
for n in $ranks; do
  [ "$quiet" = 1 ] || continue
  cb_bw=$(repeat cb_run "$n" "$big" "$iters_bw" pipelined .busbw_gbps | best max)
  mpi_bw=$(repeat mpi_run "$n" "$big" "$iters_bw" pipelined 4 | best max)
  cb_pipe=$(repeat cb_run "$n" 8 "$iters_lat" pipelined .time_us.mean | best min)
  mpi_pipe=$(repeat mpi_run "$n" 8 "$iters_lat" pipelined 3 | best min)
  cb_lat=$(repeat cb_run "$n" 8 "$iters_lat" latency .time_us.mean | best min)
  mpi_lat=$(repeat mpi_run "$n" 8 "$iters_lat" latency 3 | best min)
  row() { printf '%-5s %-28s %12.3f %12.3f %8.2f  %s\n' "$n" "$1" "$2" "$3" "$(echo "$2 / $3" | bc -l)" "$4"; }
  row "busbw 64MB GB/s" "$cb_bw" "$mpi_bw" ">= 1.00"
  row "time 8B us (pipelined)" "$cb_pipe" "$mpi_pipe" "<= 1.50"
  row "time 8B us (latency mode)" "$cb_lat" "$mpi_lat" "<= 1.50"
done

# Beside busy processes: each a shell loop this script starts and ends by its pid.
busy_pids=()
stop_busy() { for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done; busy_pids=(); }
trap stop_busy EXIT
for _ in $(seq "${BUSY:-1}"); do
  sh -c 'while :; do :; done' &
  busy_pids+=("$!")
done
echo
echo "# 8-byte allreduce beside ${BUSY:-1} busy process(es) on $(nproc) cores (best of $repeats)"
printf '%-5s %-10s %10s %10s %10s %10s %8s  %s\n' ranks mode cb_mean cb_p50 cb_lost mpi_mean ratio target
for n in $ranks; do
  for mode in latency pipelined; do
    cb_fig=$(for _ in $(seq "$repeats"); do cb_run "$n" 8 "$iters_lat" "$mode" \
      '"\(.time_us.mean) \(.time_us.p50) \(.lost_core_waits // 0)"'; done | sort -g | head -1)
    mpi_mean=$(repeat mpi_run "$n" 8 "$iters_lat" "$mode" 3 | best min)
    read -r mean p50 lost <<< "$cb_fig"
    printf '%-5s %-10s %10.2f %10.2f %10s %10.2f %8.2f  %s\n' "$n" "$mode" "$mean" "$p50" "$lost" "$mpi_mean" \
      "$(echo "$mean / $mpi_mean" | bc -l)" "<= 2.00"
  done
done
stop_busy

# On a machine with NVIDIA GPUs and PyTorch: collbench --backend nccl beside
# torch.distributed.all_reduce (NCCL) at the same sizes, same run. Needs libnccl.so (see
# tools/collbench/README.md for pip's libnccl.so.2).
if command -v nvidia-smi >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
  echo
  echo "# nccl, $gpus GPUs: bytes  collbench_us collbench_busbw  torch_us torch_busbw"
  join <("$cb" --backend nccl -g "$gpus" -b 8 -e 256M -f 4 -n 20 -w 5 2>/dev/null |
           jq -r 'select(.kind=="coll") | "\(.bytes) \(.time_us.mean) \(.busbw_gbps)"' | sort -k1,1) \
       <(python3 tools/collbench/bench/torch_allreduce.py --gpus "$gpus" --min 8 --max $((256 << 20)) --factor 4 |
           awk '{print $1, $2, $4}' | sort -k1,1) | sort -n
fi
