#!/usr/bin/env bash
# Benchmark of loadgen as 3 ranks of one job: is the client's overhead with 3 ranks the sum of
# its parts? Against srv-sim at fixed latency (the load is set by the concurrency, not by the
# server's speed), it measures client CPU-seconds per million output tokens for one loadgen at
# the whole load, one loadgen at a third of it (one rank's part), and 3 ranks at the whole load
# (each rank's CPU, their sum), with and without request records (which travel to rank 0 and
# out of its stdout). Also the ranks' start spread per point, and the latency percentiles of
# one loadgen and of 3 ranks at the same load side by side.
#
#   scripts/bench-ranks.sh              # full run (about a minute), prints a table on stdout
#   QUICK=1 scripts/bench-ranks.sh      # shorter points, for a smoke check
#   SERVER_CPU=0 CLIENT_CPU=1           # which cores (defaults 0 and 1; the 3 ranks share one)
#   C=48                                # the whole load's concurrency (default 48)
#
# Run it on a quiet machine: figures taken while other work competes for the cores are noise.
set -euo pipefail
cd "$(dirname "$0")/.."

SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
QUICK=${QUICK:-0}
C=${C:-48}
SECS=10
[ "$QUICK" = 1 ] && SECS=3

echo "== cargo build --release -p loadgen -p srv-sim" >&2
cargo build --release -q -p loadgen -p srv-sim
BIN=target/release

work=$(mktemp -d)
server_pid=""
rank_pids=()
cleanup() {
  for p in "${rank_pids[@]}" $server_pid; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

taskset -c "$SERVER_CPU" "$BIN/srv-sim" --port 0 --threads 1 --ttft 2ms --itl 1ms 2>"$work/sim.err" &
server_pid=$!
url=""
for _ in $(seq 1 200); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/sim.err" 2>/dev/null | head -1 || true)
  [ -n "$url" ] && break
  sleep 0.05
done
[ -n "$url" ] || { echo "srv-sim did not start: $(cat "$work/sim.err")" >&2; exit 1; }

load=(--duration "${SECS}s" --warmup 1s --max-tokens 256 --input-len 32 --threads 1)

# one OUT ARGS...: a single loadgen, pinned, records to OUT.
one() {
  local out=$1
  shift
  taskset -c "$CLIENT_CPU" "$BIN/loadgen" --url "$url" "${load[@]}" "$@" </dev/null >"$out" 2>"$work/lg.err" || {
    echo "loadgen $* failed: $(tail -3 "$work/lg.err")" >&2
    exit 1
  }
}

# ranks OUT ARGS...: 3 ranks by hand on the client core; rank 0's stdout (every rank's records) to OUT.
ranks() {
  local out=$1
  shift
  local coordinator
  coordinator=127.0.0.1:$((20000 + RANDOM % 20000))
  rank_pids=()
  for r in 1 2; do
    taskset -c "$CLIENT_CPU" "$BIN/loadgen" --url "$url" "${load[@]}" --rank "$r" --world 3 \
      --coordinator "$coordinator" "$@" </dev/null >/dev/null 2>"$work/rank$r.err" &
    rank_pids+=($!)
  done
  taskset -c "$CLIENT_CPU" "$BIN/loadgen" --url "$url" "${load[@]}" --rank 0 --world 3 \
    --coordinator "$coordinator" "$@" </dev/null >"$out" 2>"$work/rank0.err" || {
    echo "rank 0 failed: $(tail -3 "$work/rank0.err")" >&2
    exit 1
  }
  for p in "${rank_pids[@]}"; do wait "$p"; done
  rank_pids=()
}

# per_m FILE FILTER: CPU-s per 1M output tokens of the summaries FILTER selects.
per_m() {
  jq -rs "[.[] | select(.kind==\"summary\") | $2] | \"\\(map(.client_cpu_s) | add) \\(map(.output_tokens) | add)\"" "$1" |
    awk '{ if ($2 > 0) printf "%.3f CPU-s (%.2f per 1M tokens, %d tokens)", $1, $1 / $2 * 1e6, $2; else print "n/a" }'
}

printf '%-52s %s\n' "figure" "value"
printf '%-52s %s\n' "------" "-----"
third=$(( (C + 2) / 3 ))
for mode in no-requests requests; do
  extra=()
  [ "$mode" = no-requests ] && extra=(--no-requests)
  one "$work/whole.jsonl" -c "$C" "${extra[@]}"
  one "$work/part.jsonl" -c "$third" "${extra[@]}"
  ranks "$work/ranks.jsonl" -c "$C" "${extra[@]}"
  printf '%-52s %s\n' "[$mode] 1 loadgen, c=$C" "$(per_m "$work/whole.jsonl" 'select(.ranks == null)')"
  printf '%-52s %s\n' "[$mode] 1 loadgen, c=$third (one rank's part)" "$(per_m "$work/part.jsonl" 'select(.ranks == null)')"
  for r in 0 1 2; do
    printf '%-52s %s\n' "[$mode] 3 ranks, c=$C: rank $r" \
      "$(per_m "$work/ranks.jsonl" "select(.labels.rank == \"$r\")")"
  done
  printf '%-52s %s\n' "[$mode] 3 ranks, c=$C: sum of the ranks" \
    "$(per_m "$work/ranks.jsonl" 'select(.ranks.merged == true)')"
  printf '%-52s %s\n' "[$mode] 3 ranks: start spread per point (ms)" \
    "$(jq -r 'select(.kind=="summary" and .ranks.merged == true) | .ranks.start_spread_ms * 1000 | round / 1000' "$work/ranks.jsonl" | paste -sd' ')"
done

# Same load, same figures: one loadgen and 3 ranks at c=6 against the same srv-sim, latency
# percentiles side by side (tests/ranks.rs held them to 1 ms or 5% before it had to hold on a
# busy box; that goal is printed here).
one "$work/lat-one.jsonl" -c 6 --no-requests
ranks "$work/lat-ranks.jsonl" -c 6 --no-requests
for f in ttft_ms.p50 ttft_ms.p90 tpot_ms.p50; do
  set -- "${f%.*}" "${f#*.}"
  a=$(jq -r "select(.kind==\"summary\" and .ranks == null) | .$1.$2" "$work/lat-one.jsonl" | tail -1)
  b=$(jq -r "select(.kind==\"summary\" and .ranks.merged == true) | .$1.$2" "$work/lat-ranks.jsonl" | tail -1)
  printf '%-52s %s\n' "c=6 $1 $2: 1 loadgen vs 3 ranks" "$(awk -v a="$a" -v b="$b" 'BEGIN {
    d = b - a; n = a * 0.05 > 1 ? a * 0.05 : 1
    printf "%.3f vs %.3f (%+.3f; goal within %.3f: %s)", a, b, d, n, (d <= n && -d <= n) ? "met" : "missed" }')"
done
