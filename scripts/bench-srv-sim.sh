#!/usr/bin/env bash
# srv-sim's own ceiling: streamed tokens/s and requests/s on ONE core in `--itl 0` mode (one
# token per SSE event, 256 tokens per request), with a minimal client on another core.
# srv-sim must reach >= 500k tokens/s here so it is never the bottleneck of a load generator.
#
# Usage: scripts/bench-srv-sim.sh [SECONDS=10] [CONNECTIONS=32]
# Env: SERVER_CPU (default 0) and CLIENT_CPU (default 1) pick the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
connections=${2:-32}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}

cargo build --release -q -p srv-sim --bin srv-sim --example sse_drain
sim=target/release/srv-sim
client=target/release/examples/sse_drain

log=$(mktemp)
taskset -c "$server_cpu" "$sim" --port 0 --itl 0 --max-model-len 100000 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|^srv-sim: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "bench-srv-sim: srv-sim did not start: $(cat "$log")" >&2; exit 1; }

result=$(taskset -c "$client_cpu" "$client" "$port" "$connections" "$seconds" 256)
echo "$result"
tok_s=$(echo "$result" | sed -n 's/.*"tokens_per_s":\([0-9.]*\).*/\1/p')
req_s=$(echo "$result" | sed -n 's/.*"requests_per_s":\([0-9.]*\).*/\1/p')
echo "srv-sim on cpu $server_cpu, client on cpu $client_cpu, $connections connections, ${seconds}s:" \
  "$tok_s streamed tokens/s, $req_s requests/s (256 tokens/request, one token per SSE event)" >&2
echo "$tok_s" | awk '{ if ($1 < 500000) { print "bench-srv-sim: below the 500k tokens/s goal (on a busy machine this proves nothing)" > "/dev/stderr" } }'
