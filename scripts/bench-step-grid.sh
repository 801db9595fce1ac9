#!/usr/bin/env bash
# loadgen --step-grid into srv-sim --calibrate-from, against srv-sim serving a card the fit never
# sees (a hidden step overhead and attention cost), then the prediction from the grid against
# the same server's measured sweep (issue 35's goal: within 1%). Prints the fitted figures
# beside the hidden ones, and per point output tok/s, TTFT mean and TPOT mean, measured and
# predicted, with the error of each.
#
# Usage: scripts/bench-step-grid.sh [INPUT_LEN=256] [MAX_TOKENS=128]
# Env: BIN (default: a release build made here) holds the binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
input_len=${1:-256}
max_tokens=${2:-128}
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p srv-sim -p loadgen -p srv-launch -p srv-kill
  BIN=target/release
fi
export PATH="$PWD/$BIN:$PATH"
dir=$(mktemp -d)
trap 'srv-kill --from "$dir/server.jsonl" --missing-ok >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
overhead_us=1500
attention_us=80
cat >"$dir/hidden.json" <<JSON
{"hardware":"h100","model":"llama-3.1-8b","step_overhead_us":$overhead_us,"bandwidth_fraction":1,
 "flops_fraction":1,"prefill_efficiency":1,"attention_us_per_kv_ktok":$attention_us,"fitted_on":"hidden"}
JSON
srv-launch sim --self-report -- --realtime --calibration "$dir/hidden.json" >"$dir/server.jsonl"
start=$(date +%s.%N)
loadgen --step-grid -c 1,8,32 --input-len 64,512,2048 --max-tokens 32 --duration 1s --no-requests \
  <"$dir/server.jsonl" >"$dir/grid.jsonl" 2>"$dir/grid.log"
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "step grid measured in %.1f s\n", b - a }'
srv-sim --calibrate-from "$dir/grid.jsonl" >"$dir/card.json" 2>"$dir/fit.log"
grep -v '^srv-sim: cell' "$dir/fit.log" || true
python3 - "$dir/card.json" "$overhead_us" "$attention_us" <<'PY'
import json, sys
card = json.load(open(sys.argv[1]))
for key, hidden in (("step_overhead_us", float(sys.argv[2])), ("attention_us_per_kv_ktok", float(sys.argv[3]))):
    print(f"{key}: fitted {card[key]:.2f}, hidden {hidden:.2f} ({card[key] / hidden - 1:+.2%})")
PY
load=(-c "1,4,16" -n 48 --input-len "$input_len" --max-tokens "$max_tokens" --seed 11)
loadgen "${load[@]}" --no-requests <"$dir/server.jsonl" >"$dir/measured.jsonl" 2>>"$dir/grid.log"
srv-sim --predict --calibration "$dir/card.json" "${load[@]}" --no-requests >"$dir/predicted.jsonl"
python3 - "$dir/measured.jsonl" "$dir/predicted.jsonl" <<'PY'
import json, sys
def points(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "summary":
            out[r["point"]["concurrency"]] = (r["output_tok_s"], r["ttft_ms"]["mean"], r["tpot_ms"]["mean"])
    return out
meas, pred = points(sys.argv[1]), points(sys.argv[2])
print(f"{'C':>3} {'tok/s meas':>11} {'pred':>9} {'err':>7} {'TTFT mean':>10} {'pred':>9} {'err':>7} {'TPOT mean':>10} {'pred':>9} {'err':>7}")
worst = [0.0, 0.0, 0.0]
for c in sorted(meas):
    row = f"{c:>3}"
    for i in range(3):
        m, p = meas[c][i], pred[c][i]
        worst[i] = max(worst[i], abs(p / m - 1))
        row += f" {m:>10.2f} {p:>9.2f} {p / m - 1:>+7.2%}"
    print(row)
print(f"worst: tok/s {worst[0]:.2%}, TTFT mean {worst[1]:.2%}, TPOT mean {worst[2]:.2%} (goal: within 1%)")
PY
