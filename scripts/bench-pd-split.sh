#!/usr/bin/env bash
# The disaggregated TTFT split against the client's TTFT (issue 36): a srv-sim prefill server, a
# decode server and the proxy on loopback (release builds), loadgen through the proxy, and per
# point the client TTFT beyond the six parts (prefill queue, prefill, KV transfer, decode queue,
# first decode step, and the proxy with its hops to the members, from the TTFT the proxy
# measures): what the client's own hop to the proxy costs, and the proxy's part beside it.
# Target: under 1 ms per request at C=1 on a quiet machine (the suite's
# tools/loadgen/tests/pd_split.rs holds the mean under 1 ms and the worst under 2 ms on a busy
# one). Env: CONC="1,4,16", N=32, INPUT=1500, HW=rtx-pro-6000.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p srv-sim -p loadgen >&2
sim=target/release/srv-sim
pids=()
stop() { local p; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
start() { # port role [args]
  "$sim" --port "$1" --pd-role "$2" "${@:3}" 2>/dev/null &
  pids+=($!)
}
base=$((20000 + RANDOM % 20000))
start "$base" prefill --hardware "${HW:-rtx-pro-6000}" --enable-per-request-metrics
start $((base + 1)) decode --hardware "${HW:-rtx-pro-6000}" --enable-per-request-metrics
start $((base + 2)) proxy --prefill-url "http://127.0.0.1:$base" --decode-url "http://127.0.0.1:$((base + 1))"
sleep 1
target/release/loadgen --url "http://127.0.0.1:$((base + 2))" -c "${CONC:-1,4,16}" -n "${N:-32}" \
  --input-len "${INPUT:-1500}" --max-tokens 16 --no-metrics 2>/dev/null | python3 -c '
import json, sys
by = {}
for line in sys.stdin:
    r = json.loads(line)
    t = r.get("server_timing")
    if r["kind"] == "request" and t and r.get("ttft_ms") is not None:
        by.setdefault(r["point"]["concurrency"], []).append(
            (r["ttft_ms"] - t["ttft_ms"], t.get("proxy_ms", float("nan"))))
print("C     requests  beyond-parts mean ms  p50 ms  max ms  proxy part mean ms")
for c, rows in sorted(by.items()):
    v = sorted(b for b, _ in rows)
    proxy = sum(p for _, p in rows) / len(rows)
    print(f"{c:<5} {len(v):<9} {sum(v)/len(v):<21.3f} {v[len(v)//2]:<7.3f} {v[-1]:<7.3f} {proxy:.3f}")
'
