#!/usr/bin/env bash
# What each of vLLM's self-report flags costs the engine: the real vLLM CPU build (the tiny
# random-weights Llama of scripts/setup) launched with none of them, with each alone and with
# all of them, under one fixed bounded load, in ROUNDS interleaved rounds (none f1 f2 ... all,
# then the reverse order, ...: a box whose load drifts shifts every configuration alike).
# Prints two tables:
#  1. per configuration and concurrency, the output tok/s of every run (mean, stddev, min-max)
#     and its difference from the runs without flags with the noise band (twice the standard
#     error of the difference): outside the band "measurable", else "within noise";
#  2. per configuration, the engine's CPU time per 1000 output tokens (its process group's
#     user + system time over the launch's load, warmup included), the same way: on a box
#     shared with other work this is the steadier figure (what the flag adds to every step).
#
# The flags are the vLLM preset's, as `srv-launch vllm --self-report --dry-run` adds them (the
# ones on by default and the ones --self-report adds); each configuration is launched through
# `srv-launch --cmd` with exactly its flags, so the run without any has none of them.
#
# Usage: scripts/bench-self-report-cost.sh [ROUNDS=2] [OUT_DIR]   (records stay in OUT_DIR)
# Env: SERVBENCH_TINY_HF, SERVBENCH_VLLM_BIN (eval "$(cat /tmp/setup-vllm.sh.exports)");
#      BIN (default: a release build made here) holds the tools; LOAD (default below) is
#      loadgen's load per launch; NICE (default 0) the engine's and loadgen's niceness (on a
#      shared box, -10 as root keeps builds at nice 19 out of the figures' way).
# About 2 min a launch on 2 cores (70-120 s of startup): ROUNDS=2 is 10 launches, ~20 min.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
model=${SERVBENCH_TINY_HF:?set SERVBENCH_TINY_HF (eval "\$(cat /tmp/setup-vllm.sh.exports)")}
vllm_bin=${SERVBENCH_VLLM_BIN:?set SERVBENCH_VLLM_BIN (eval "\$(cat /tmp/setup-vllm.sh.exports)")}
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p srv-launch -p srv-kill -p loadgen
  BIN=target/release
fi
export PATH="$PWD/$BIN:$vllm_bin:$PATH"
read -r -a load <<<"${LOAD:--c 1,16 --duration 5s --warmup 1s --repeat 2 --input-len 128 --max-tokens 128}"
nice=${NICE:-0}

# The preset's self-report flags: what --self-report's argv holds past `vllm serve M --host H --port P`.
mapfile -t flags < <(srv-launch vllm --model "$model" --port 1 --self-report --dry-run |
  python3 -c 'import json, sys; [print(a) for a in json.load(sys.stdin)[7:]]')
[ "${#flags[@]}" -gt 0 ] || {
  echo "bench-self-report-cost: the vllm preset adds no flag" >&2
  exit 1
}
configs=(none "${flags[@]}" all)
echo "bench-self-report-cost: ${#configs[@]} configurations x $rounds rounds, load: ${load[*]}" >&2

# CPU seconds the processes of process group $1 (the engine's: srv-launch starts it in its own)
# have used so far, their reaped children's included.
engine_cpu_s() {
  python3 -c '
import os, sys
pgid, total = int(sys.argv[1]), 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if int(f[2]) == pgid:
        total += sum(int(x) for x in f[11:15])
print(total / os.sysconf("SC_CLK_TCK"))' "$1"
}

live=""
trap '[ -n "$live" ] && srv-kill <"$live" >/dev/null 2>&1' EXIT
measure() { # CONFIG ROUND
  local config=$1 round=$2 add=() server pid cpu0 cpu1
  server=$out/server-$round-${config#--}.jsonl
  case $config in
    none) ;;
    all) add=("${flags[@]}") ;;
    *) add=("$config") ;;
  esac
  echo "bench-self-report-cost: round $round, $config" >&2
  nice -n "$nice" srv-launch --cmd "vllm serve $model --host 127.0.0.1 --port {port} --max-model-len 1024 ${add[*]}" \
    --ready-url 'http://127.0.0.1:{port}/health' --timeout 5m \
    --label "config=$config" --label "round=$round" >"$server"
  live=$server
  pid=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' "$server")
  cpu0=$(engine_cpu_s "$pid")
  nice -n "$nice" loadgen "${load[@]}" --no-requests <"$server" >"$out/points.jsonl"
  cpu1=$(engine_cpu_s "$pid")
  srv-kill <"$server" >/dev/null
  live=""
  python3 -c '
import json, sys
points = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "summary"]
tokens = sum(p["output_tokens"] for p in points)
for p in points:
    p["engine_cpu_ms_per_ktok"] = (float(sys.argv[3]) - float(sys.argv[2])) * 1e6 / max(tokens, 1)
    print(json.dumps(p))' "$out/points.jsonl" "$cpu0" "$cpu1" >>"$out/runs.jsonl"
}

: >"$out/runs.jsonl"
for ((r = 1; r <= rounds; r++)); do
  order=("${configs[@]}")
  if ((r % 2 == 0)); then
    order=()
    for c in "${configs[@]}"; do order=("$c" "${order[@]}"); done
  fi
  for c in "${order[@]}"; do measure "$c" "$r"; done
done

python3 - "$out/runs.jsonl" "${configs[@]}" <<'EOF'
import json, math, statistics as st, sys
path, configs = sys.argv[1], sys.argv[2:]
runs, cpu = {}, {}
for line in open(path):
    r = json.loads(line)
    if r["ok"] > 0:
        config = r["labels"]["config"]
        runs.setdefault((config, r["point"]["concurrency"]), []).append(r["output_tok_s"])
        cpu.setdefault(config, {})[r["labels"]["round"]] = r["engine_cpu_ms_per_ktok"]

def sd(v):
    return st.stdev(v) if len(v) > 1 else 0.0

def versus(v, base, higher_is_worse):
    """The difference of the means, its noise band and the verdict."""
    b, m = st.mean(base), st.mean(v)
    diff = m / b - 1
    band = 2 * math.sqrt(sd(v) ** 2 / len(v) + sd(base) ** 2 / len(base)) / b
    if abs(diff) <= band:
        return f" {diff:+.1%} | ±{band:.1%} | within noise |"
    costs = diff > 0 if higher_is_worse else diff < 0
    return f" {diff:+.1%} | ±{band:.1%} | measurable{' (costs)' if costs else ' (gains: noise?)'} |"

print("| flag | C | runs | output tok/s mean | stddev | min-max | vs none | noise band | verdict |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for c in sorted({k[1] for k in runs}):
    base = runs.get(("none", c), [])
    for config in configs:
        v = runs.get((config, c), [])
        if not v:
            print(f"| {config} | {c} | 0 | - | - | - | - | - | no run |")
            continue
        row = f"| {config} | {c} | {len(v)} | {st.mean(v):.0f} | {sd(v):.0f} | {min(v):.0f}-{max(v):.0f} |"
        print(row + (" | | |" if config == "none" or not base else versus(v, base, False)))
print()
print("| flag | launches | engine CPU ms per 1000 output tokens, mean | stddev | min-max | vs none | noise band | verdict |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
base = list(cpu.get("none", {}).values())
for config in configs:
    v = list(cpu.get(config, {}).values())
    if not v:
        continue
    row = f"| {config} | {len(v)} | {st.mean(v):.0f} | {sd(v):.0f} | {min(v):.0f}-{max(v):.0f} |"
    print(row + (" | | |" if config == "none" or not base else versus(v, base, True)))
EOF
echo "bench-self-report-cost: records in $out" >&2
