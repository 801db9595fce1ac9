#!/usr/bin/env bash
# srv-sim --predict: how fast, and how close to the engine it models.
#  1. The notes' PP8 sweep (Kimi-K2 NVFP4 on 8 x RTX PRO 6000, PP8: C=8,16,32,48 at 4096 output
#     tokens, C=32..256 at 2048) predicted in virtual time: wall seconds (the goal: under a minute).
#  2. srv-sim's prediction against srv-sim itself, served in real time and measured by loadgen
#     (same card, same seed), over C=1..64: output tok/s, TPOT p50 and TTFT p50 per point, and the
#     error of each (the goal: throughput and TPOT within 2%, TTFT within 5%). Both engines log
#     their steps (--enable-logging-iteration-details): per point, the served and the predicted
#     step count and summed step time, and the served engine's mean lateness against its own
#     schedule (srv_sim:schedule_lateness_seconds), say whether a difference is the engine's
#     (other steps) or the client's (the same steps, requests joining them differently).
#     Each point is predicted with the client gap measured from its own served run
#     (--client-gap-from: the server answers with --enable-per-request-metrics), and with the
#     default gap beside it; TTFT is judged by p50 and by mean, with the measured p45..p55 band
#     (at C=64 the p50 sits between two prefill steps' modes).
#
# Usage: scripts/bench-predict.sh [INPUT_LEN=256] [MAX_TOKENS=128]
# Env: SIM_ARGS (default: llama-3.1-8b on one H100) sets the card and layout of part 2.
set -euo pipefail
cd "$(dirname "$0")/.."
input_len=${1:-256}
max_tokens=${2:-128}
read -r -a sim_args <<<"${SIM_ARGS:---model llama-3.1-8b --hardware h100}"

cargo build --release -q -p srv-sim -p loadgen -p summarize
bin=target/release
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

echo "# 1. the notes' PP8 sweep, predicted"
pp8=(--model kimi-k2-nvfp4 --hardware rtx-pro-6000 --pp 8)
start=$(date +%s.%N)
"$bin/srv-sim" --predict "${pp8[@]}" -c 8,16,32,48 --max-tokens 4096 >"$dir/pp8.jsonl"
"$bin/srv-sim" --predict "${pp8[@]}" -c 32..256 --max-tokens 2048 >>"$dir/pp8.jsonl"
end=$(date +%s.%N)
"$bin/summarize" --cols conc,req_s,tok_s,ttft_p50,ttft_p99,tpot_p50 "$dir/pp8.jsonl"
awk -v a="$start" -v b="$end" 'BEGIN { printf "PP8 sweep (8 points at 4096 and 2048 output tokens) predicted in %.1f s\n\n", b - a }'

echo "# 2. srv-sim predicted against srv-sim measured (${sim_args[*]}, in=$input_len out=$max_tokens)"
log="$dir/sim.log"
: >"$log"
"$bin/srv-sim" --port 0 --realtime --seed 7 "${sim_args[@]}" --enable-logging-iteration-details \
  --enable-per-request-metrics 2>"$log" &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|^srv-sim: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "bench-predict: srv-sim did not start: $(cat "$log")" >&2; exit 1; }
# The served engine's lateness so far: "sum count" of its histogram.
lateness() {
  curl -fsS "http://127.0.0.1:$port/metrics" |
    awk '/^srv_sim:schedule_lateness_seconds_sum/ { s = $2 } /^srv_sim:schedule_lateness_seconds_count/ { n = $2 } END { print s + 0, n + 0 }'
}
for c in 1 2 4 8 16 32 64; do
  n=$((4 * c < 24 ? 24 : 4 * c))
  # A seed of its own per point: the same seed would resend earlier points' prompts, and the
  # server's prefix cache would serve them.
  load=(-c "$c" -n "$n" --input-len "$input_len" --max-tokens "$max_tokens" --seed "$((7 + c))")
  before=$(grep -c 'Iteration(' "$log" || true)
  late_before=$(lateness)
  "$bin/loadgen" --url "http://127.0.0.1:$port" --no-metrics "${load[@]}" \
    >"$dir/measured-$c.jsonl" 2>>"$dir/loadgen.log"
  cat "$dir/measured-$c.jsonl" >>"$dir/measured.jsonl"
  echo "$c $late_before $(lateness)" >>"$dir/lateness.txt"
  grep 'Iteration(' "$log" | tail -n "+$((before + 1))" >"$dir/served-$c.steps"
  "$bin/srv-sim" --predict "${sim_args[@]}" "${load[@]}" --enable-logging-iteration-details \
    --client-gap-from "$dir/measured-$c.jsonl" >>"$dir/predicted.jsonl" 2>"$dir/predicted-$c.steps"
  gap=$(sed -n 's/.*: client gap \([0-9]*\) us.*/\1/p' "$dir/predicted-$c.steps")
  echo "$c $gap" >>"$dir/gaps.txt"
  "$bin/srv-sim" --predict "${sim_args[@]}" "${load[@]}" >>"$dir/predicted-default.jsonl"
done
kill "$pid"
pid=""
"$bin/summarize" --compare "$dir/predicted.jsonl" "$dir/measured.jsonl" --metrics tok_s,ttft_p50,tpot_p50 --wide
python3 - "$dir/predicted.jsonl" "$dir/measured.jsonl" "$dir" "$dir/predicted-default.jsonl" <<'EOF'
import json, re, sys

def points(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "summary":
            out[r["point"]["concurrency"]] = (
                r["output_tok_s"], r["tpot_ms"]["p50"], r["ttft_ms"]["p50"], r["ttft_ms"]["mean"])
    return out

def steps(path):
    """(step count, summed step ms, prefill steps) of an Iteration log."""
    n, total, prefill = 0, 0.0, 0
    for line in open(path):
        m = re.search(r"Iteration\(\d+\): (\d+) context requests.*elapsed time: ([\d.]+) ms", line)
        if m:
            n += 1
            total += float(m.group(2))
            prefill += int(m.group(1)) > 0
    return n, total, prefill

def ttft_spread(path):
    """Per point: measured TTFT p45 and p55: far apart, the p50 sits between two modes."""
    by = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "request" and r.get("ttft_ms") is not None:
            by.setdefault(r["point"]["concurrency"], []).append(r["ttft_ms"])
    out = {}
    for c, v in by.items():
        v.sort()
        out[c] = (v[int(0.45 * (len(v) - 1))], v[int(0.55 * (len(v) - 1))])
    return out

late = {}
for line in open(sys.argv[3] + "/lateness.txt"):
    c, s0, n0, s1, n1 = line.split()
    dn = float(n1) - float(n0)
    late[int(c)] = (float(s1) - float(s0)) / dn * 1e3 if dn > 0 else 0.0
pred, meas = points(sys.argv[1]), points(sys.argv[2])
spread = ttft_spread(sys.argv[2])
engine_worst = [0.0, 0.0, 0.0]
print(f"{'C':>3} {'steps served':>13} {'predicted':>10} {'step ms served':>15} {'predicted':>10} {'prefill steps':>14} {'lateness ms':>12} {'TTFT p45..p55 ms':>17}")
for c in sorted(pred):
    s, p = steps(f"{sys.argv[3]}/served-{c}.steps"), steps(f"{sys.argv[3]}/predicted-{c}.steps")
    lo, hi = spread[c]
    engine_worst = [max(engine_worst[0], abs(s[0] / p[0] - 1)),
                    max(engine_worst[1], abs(s[1] / p[1] - 1)), max(engine_worst[2], late[c])]
    print(f"{c:>3} {s[0]:>13} {p[0]:>10} {s[1]:>15.1f} {p[1]:>10.1f} {f'{s[2]}/{p[2]}':>14} {late[c]:>12.3f} {f'{lo:.0f}..{hi:.0f}':>17}")
print(f"engine: steps within {engine_worst[0]:.2%}, summed step time within {engine_worst[1]:.2%}, "
      f"mean lateness at most {engine_worst[2]:.3f} ms: "
      + ("the served engine ran the predicted steps on time; a difference below is which requests "
         "joined which step (the client's and HTTP side's turnaround on this machine), and a TTFT "
         "p50 whose p45..p55 spans two steps' worth sits between two modes"
         if engine_worst[0] <= 0.01 and engine_worst[1] <= 0.01 and engine_worst[2] <= 1.0
         else "the served engine's steps differ from the model's, or it ran late: look at them"))
gaps = {int(c): int(g) for c, g in (l.split() for l in open(sys.argv[3] + "/gaps.txt"))}
default = points(sys.argv[4])
print()
print("errors of the prediction with each point's measured client gap (default 100 us: TTFT in brackets)")
print(f"{'C':>3} {'gap us':>7} {'tok/s err':>10} {'TPOT p50 err':>13} {'TTFT p50 err':>20} {'TTFT mean err':>21} {'TTFT p45..p55 ms':>17}")
worst = [0.0, 0.0, 0.0, 0.0]
worst_default = [0.0, 0.0]
for c in sorted(pred):
    p, m, d = pred[c], meas[c], default[c]
    e = [m[i] / p[i] - 1 for i in range(4)]
    ed = [m[2] / d[2] - 1, m[3] / d[3] - 1]
    worst = [max(w, abs(x)) for w, x in zip(worst, e)]
    worst_default = [max(w, abs(x)) for w, x in zip(worst_default, ed)]
    lo, hi = spread[c]
    print(f"{c:>3} {gaps[c]:>7} {e[0]:>+10.2%} {e[1]:>+13.2%} {f'{e[2]:+.2%} [{ed[0]:+.2%}]':>20} "
          f"{f'{e[3]:+.2%} [{ed[1]:+.2%}]':>21} {f'{lo:.0f}..{hi:.0f}':>17}")
ok = worst[0] <= 0.02 and worst[1] <= 0.02 and worst[2] <= 0.05
ok_mean = worst[0] <= 0.02 and worst[1] <= 0.02 and worst[3] <= 0.05
print(f"worst with the measured gap: tok/s {worst[0]:.2%}, TPOT p50 {worst[1]:.2%}, TTFT p50 {worst[2]:.2%}, "
      f"TTFT mean {worst[3]:.2%} (default gap: TTFT p50 {worst_default[0]:.2%}, mean {worst_default[1]:.2%})")
print("by TTFT p50: " + ("within the goal (2%, 2%, 5%)" if ok else "outside the goal (2%, 2%, 5%)")
      + "; by TTFT mean: " + ("within the goal" if ok_mean else "outside the goal")
      + "; a point whose p45..p55 spans two prefill steps has its p50 between two modes")
EOF
