#!/usr/bin/env bash
# srv-sim's published error against a real vLLM (its CPU build, the tiny random-weights Llama of
# scripts/setup): calibrate on two measured points (C=1 and C=8), predict the rest of a sweep
# (C=1..16, two input and two output lengths), measure it, and print the absolute percentage
# error of output tok/s, TTFT p50, TTFT p99 and TPOT p50 per point and their means (MAPE), and
# the worst point. Kept short (16 requests a point, short lengths) to run in a few minutes.
#
# Usage: scripts/predict-error-vllm.sh [OUT_DIR]   (the records and the card stay in OUT_DIR)
# Exit 3: the calibration was refused (a figure it could not fit within 50%, named on stderr).
# Env: SERVBENCH_TINY_HF (the model dir) and SERVBENCH_VLLM_BIN (the `vllm` wrapper's dir), as
# /tmp/setup/all.env sets them; BIN (default target/release, built here) holds the tools.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
model=${SERVBENCH_TINY_HF:?set SERVBENCH_TINY_HF (eval "$(cat /tmp/setup/all.env)")}
vllm_bin=${SERVBENCH_VLLM_BIN:?set SERVBENCH_VLLM_BIN (eval "$(cat /tmp/setup/all.env)")}
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p srv-sim -p srv-launch -p srv-kill -p loadgen -p summarize
  BIN=target/release
fi
export PATH="$BIN:$vllm_bin:$PATH"

# The tiny model's card, from its config.json; the CPU as a one-"GPU" card whose peaks the
# calibration scales (its own figures are placeholders: the fit finds what vLLM achieves).
python3 - "$model/config.json" >"$out/model.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
h, i, L, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
heads, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c.get("head_dim", h // c["num_attention_heads"])
per_layer = h * heads * hd * 2 + h * kv * hd * 2 + 3 * h * i
params = L * per_layer + v * h * (1 if c.get("tie_word_embeddings") else 2)
print(json.dumps({"name": "tiny-llama", "layers": L, "hidden": h, "heads": heads, "kv_heads": kv,
  "head_dim": hd, "params": float(params), "weight_format": "bf16", "kv_bytes": 2.0,
  "act_bytes": 2.0, "intermediate": i, "source": sys.argv[1]}))
EOF
srv-sim --print-card l40s | python3 -c '
import json, sys
c = json.load(sys.stdin)
c.update(name="cpu", mem_bw_gbps=20.0, bf16_tflops=1.0, fp8_tflops=None, mem_bytes=8 << 30, gpus=1,
         source="placeholder peaks of a 2-core CPU, scaled by --calibrate")
c["interconnect"]["levels"] = c["interconnect"]["levels"][:1]
c["interconnect"]["levels"][0]["gpus"] = 1
print(json.dumps(c))' >"$out/cpu.json"
card=(--model-card "$out/model.json" --hardware-file "$out/cpu.json" --kv-cache-tokens 100000 --max-model-len 1024)

# One launch, every point measured (calibration points first), one kill.
echo "predict-error-vllm: measuring on vLLM (about 80 s to start, then the sweep)" >&2
{
  srv-launch vllm --model "$model" --timeout 5m -- --max-model-len 1024 \
    | loadgen -c 1,8 -n 16 --input-len 64 --max-tokens 64 --label set=calibration \
    | loadgen -c 1,2,4,8,16 -n 16 --input-len 64,256 --max-tokens 16,64 --label set=sweep \
    | srv-kill
} >"$out/measured.jsonl"
grep '"set":"calibration"' "$out/measured.jsonl" >"$out/calibration.jsonl"
grep -v '"set":"calibration"' "$out/measured.jsonl" >"$out/sweep.jsonl"

# The calibration's goal: every fitted figure within 50% of the measured one. A fit past it is
# refused by srv-sim, naming the figure and point (measurements taken on a busy box are noise the
# cost model cannot fit): said here, exit 3, no prediction made from a card that was not written.
if ! srv-sim "${card[@]}" --calibrate "$out/calibration.jsonl" --max-residual 0.5 \
  >"$out/card.json" 2>"$out/calibrate.err"; then
  cat "$out/calibrate.err" >&2
  echo "predict-error-vllm: the calibration was refused (above); no prediction, no table (records in $out)" >&2
  exit 3
fi
cat "$out/calibrate.err" >&2
srv-sim "${card[@]}" --calibration "$out/card.json" --predict -c 1,2,4,8,16 -n 16 \
  --input-len 64,256 --max-tokens 16,64 --no-requests >"$out/predicted.jsonl"

python3 - "$out/predicted.jsonl" "$out/sweep.jsonl" <<'EOF'
import json, sys

def points(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "summary" and r["ok"] > 0:
            p = r["point"]
            out[(p["input_len"], p["max_tokens"], p["concurrency"])] = (
                r["output_tok_s"], r["ttft_ms"]["p50"], r["ttft_ms"]["p99"], r["tpot_ms"]["p50"])
    return out

pred, meas = points(sys.argv[1]), points(sys.argv[2])
names = ["tok/s", "TTFT p50", "TTFT p99", "TPOT p50"]
print("| in | out | C | " + " | ".join(f"{n} meas | {n} pred | err" for n in names) + " |")
print("|---:|---:|---:|" + "---:|---:|---:|" * 4)
errs = [[] for _ in names]
worst = (0.0, None, None)
for key in sorted(meas):
    if key not in pred:
        continue
    m, p = meas[key], pred[key]
    cells = []
    for i in range(4):
        e = abs(p[i] / m[i] - 1)
        errs[i].append(e)
        if e > worst[0]:
            worst = (e, key, names[i])
        cells.append(f"{m[i]:.4g} | {p[i]:.4g} | {e:.0%}")
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
print()
print("MAPE over " + str(len(errs[0])) + " points: "
      + ", ".join(f"{n} {sum(e) / len(e):.1%}" for n, e in zip(names, errs) if e))
# One burst of tokens (a TPOT p50 of 0.01 ms) makes a mean of percentages meaningless: the median too.
print("median APE: " + ", ".join(f"{n} {sorted(e)[len(e) // 2]:.1%}" for n, e in zip(names, errs) if e))
if worst[1]:
    k = worst[1]
    print(f"worst: {worst[2]} at in={k[0]} out={k[1]} C={k[2]}, {worst[0]:.0%} off")
EOF
echo "predict-error-vllm: records, card and predictions in $out" >&2
