#!/usr/bin/env bash
# srv-sim's published error against a real vLLM (its CPU build, the tiny random-weights Llama of
# scripts/setup), the way LLMServingSim publishes it: calibrate on a step grid measured from the
# live engine (`loadgen --step-grid`, at shapes the sweep does not contain), `srv-sim
# --calibrate-from` it, predict the sweep C = 1, 2, 4, 8, 16, 32 x input 64, 512, 2048 x output
# 128, measure the same sweep on vLLM, and print every point predicted against measured: output
# tok/s, TPOT mean and TTFT mean, each with its error, a miss in bold against the goal (5 %,
# 5 %, 10 %), and how many points meet it. Bounded for 2 cores: few requests a point (PER_C x C,
# at least 8) and a grid of 3 s cells, a few minutes after vLLM's ~70 s start.
#
# Usage: scripts/predict-error-vllm.sh [OUT_DIR]   (the records, grid and card stay in OUT_DIR)
# Exit 3: the calibration was refused (more than a quarter of the grid's cells stay off the
# fitted step cost by more than --max-residual: a busy box; named on stderr); the sweep is
# measured either way.
# Env: SERVBENCH_TINY_HF (the model dir) and SERVBENCH_VLLM_BIN (the `vllm` wrapper's dir), as
# /tmp/setup-vllm.sh.exports sets them; BIN (default target/release, built here) holds the
# tools; PER_C (default 2) requests a point per unit of concurrency; NICE (default 0) the
# engine's and loadgen's niceness (-10 as root keeps builds at nice 19 out of the figures);
# MAX_RESIDUAL (default 0.5) the calibration's --max-residual; REUSE=1 takes OUT_DIR's
# measured.jsonl from an earlier run instead of measuring (calibrate and predict only).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
model=${SERVBENCH_TINY_HF:?set SERVBENCH_TINY_HF (eval "\$(cat /tmp/setup-vllm.sh.exports)")}
vllm_bin=${SERVBENCH_VLLM_BIN:?set SERVBENCH_VLLM_BIN (eval "\$(cat /tmp/setup-vllm.sh.exports)")}
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p srv-sim -p srv-launch -p srv-kill -p loadgen
  BIN=target/release
fi
export PATH="$BIN:$vllm_bin:$PATH"
per_c=${PER_C:-2}
nice=${NICE:-0}
max_residual=${MAX_RESIDUAL:-0.5}

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
         source="placeholder peaks of a 2-core CPU, scaled by --calibrate-from")
c["interconnect"]["levels"] = c["interconnect"]["levels"][:1]
c["interconnect"]["levels"][0]["gpus"] = 1
print(json.dumps(c))' >"$out/cpu.json"
card=(--model-card "$out/model.json" --hardware-file "$out/cpu.json" --kv-cache-tokens 500000 --max-model-len 2304)

# The sweep: PER_C x C requests a point (at least 8), one loadgen (and one prediction) per C.
sweep=()
for c in 1 2 4 8 16 32; do
  sweep+=("$c:$((c * per_c > 8 ? c * per_c : 8))")
done
shape=(--input-len "64,512,2048" --max-tokens 128)

# One launch with its step log: the grid first (batches 3, 12, 40; prompts of 128, 1024 and
# 1536 tokens; 96 out: none of the sweep's shapes), then the sweep, one kill.
echo "predict-error-vllm: measuring on vLLM (about 70 s to start, then the grid and the sweep)" >&2
n=(nice -n "$nice")
pipeline="${n[*]} srv-launch vllm --model '$model' --self-report --timeout 5m -- --max-model-len 2304"
pipeline+=" | ${n[*]} loadgen --step-grid -c 3,12,40 --input-len 128,1024,1536 --max-tokens 96 --duration 3s --warmup 1s --label set=grid"
for cn in "${sweep[@]}"; do
  pipeline+=" | ${n[*]} loadgen -c ${cn%%:*} -n ${cn##*:} --warmup ${cn%%:*} ${shape[*]} --no-requests --label set=sweep"
done
if [ "${REUSE:-0}" = 1 ] && [ -s "$out/measured.jsonl" ]; then
  echo "predict-error-vllm: REUSE=1: the measurements of $out/measured.jsonl" >&2
else
  eval "$pipeline | srv-kill" >"$out/measured.jsonl"
fi
grep '"set":"grid"' "$out/measured.jsonl" >"$out/grid.jsonl" || true
grep '"set":"sweep"' "$out/measured.jsonl" >"$out/sweep.jsonl" || true

# The fit: cells the step cost cannot explain within --max-residual are named and left out;
# more than a quarter of them refuse it (then exit 3: nothing predicted from a card not written).
if ! srv-sim "${card[@]}" --calibrate-from "$out/grid.jsonl" --max-residual "$max_residual" \
  >"$out/card.json" 2>"$out/calibrate.err"; then
  cat "$out/calibrate.err" >&2
  echo "predict-error-vllm: the calibration was refused (above); no prediction, no table (records in $out)" >&2
  exit 3
fi
cat "$out/calibrate.err" >&2
# Prefill scheduled in the chunks vLLM used, where the grid saw it split a prompt; the client's
# gap measured on the grid's requests (vLLM's per-request `metrics`), its request latency the
# card's front end (fitted by --calibrate-from to the same requests, by streams and prompt).
chunk=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("prefill_chunk_tokens") or "")' "$out/card.json")
: >"$out/predicted.jsonl"
for cn in "${sweep[@]}"; do
  srv-sim "${card[@]}" ${chunk:+--max-prefill-tokens "$chunk"} --calibration "$out/card.json" \
    --client-gap-from "$out/grid.jsonl" --predict -c "${cn%%:*}" -n "${cn##*:}" "${shape[@]}" \
    --no-requests >>"$out/predicted.jsonl"
done

python3 - "$out/predicted.jsonl" "$out/sweep.jsonl" <<'EOF'
import json, sys

def points(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "summary" and r["ok"] > 0 and r.get("tpot_ms") and r.get("ttft_ms"):
            p = r["point"]
            out[(p["input_len"], p["max_tokens"], p["concurrency"])] = (
                r["output_tok_s"], r["tpot_ms"]["mean"], r["ttft_ms"]["mean"])
    return out

pred, meas = points(sys.argv[1]), points(sys.argv[2])
names = ["tok/s", "TPOT mean ms", "TTFT mean ms"]
goals = [0.05, 0.05, 0.10]
print("| in | out | C | " + " | ".join(f"{n} meas | pred | err" for n in names) + " |")
print("|---:|---:|---:|" + "---:|---:|---:|" * 3)
errs = [[] for _ in names]
met = 0
for key in sorted(meas):
    if key not in pred:
        continue
    m, p = meas[key], pred[key]
    cells, ok = [], True
    for i in range(3):
        e = p[i] / m[i] - 1
        errs[i].append(abs(e))
        miss = abs(e) > goals[i]
        ok = ok and not miss
        mark = "**" if miss else ""
        cells.append(f"{m[i]:.4g} | {p[i]:.4g} | {mark}{e:+.1%}{mark}")
    met += ok
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
print()
n = len(errs[0])
print(f"within the goal (tok/s and TPOT mean 5 %, TTFT mean 10 %): {met} of {n} points")
print("per figure: " + ", ".join(
    f"{k} {sum(x <= g for x in e)}/{len(e)} within, MAPE {sum(e) / len(e):.1%}"
    for k, e, g in zip(names, errs, goals) if e))
EOF
echo "predict-error-vllm: records, grid, card and predictions in $out" >&2
