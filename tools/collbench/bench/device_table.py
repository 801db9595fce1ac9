"""The table of scripts/device-gpu.sh from what its steps wrote (stdlib only: it runs where the
GPU steps could not). One subcommand per step; each prints table lines on stdout.

  gemm MODEL DTYPE COLLBENCH.jsonl TORCH.txt      per shape: cuBLAS vs torch's graph (goal within 5%),
                                                  per step: graph vs graph (goal within 3%)
  limits COLLBENCH.jsonl TORCH.json               copy/read GB/s, launch us, beside PyTorch's
  nccl COLLBENCH.jsonl                            the one-rank allreduce: sizes, wrong, exact or not
  decode COLLBENCH.jsonl                          the decode and gemm_step records, one line per batch
  telemetry LOADGEN.jsonl NVML.jsonl DMON.txt T0 T1   loadgen's GPU figures beside NVML and dmon
  kill KILL.jsonl                                 srv-kill's record: signals, GPU memory before/after
  pipeline RECORDS.jsonl                          the loop's points, the kill, each GPU's energy source
"""
import json
import sys


def records(path, kind):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("kind") == kind:
                    out.append(r)
    return out


GEMM_GOAL, STEP_GOAL = 0.05, 0.03


def gemm(model, dtype, rec, torch_txt):
    """Every GEMM: collbench's back-to-back mean against torch's graph-timed one (goal within
    5%); every step: collbench's graph replay against torch's (goal within 3%), and both back to
    back beside. Off-goal rows are marked; the last line says how many."""
    ours = records(rec, "gemm")
    lines = [line.split() for line in open(torch_txt) if line.strip()]
    theirs = [t[1:] for t in lines if t[0] == "gemm"]
    steps = {int(t[1]): t[2:] for t in lines if t[0] == "step"}
    print(f"# {model} TP1 {dtype}: batch gemm m n k  collbench_us (timing) TFLOP/s  torch_graph_us TFLOP/s  "
          f"ratio (goal {1 - GEMM_GOAL:.2f}-{1 + GEMM_GOAL:.2f})")
    off = 0
    for g, t in zip(ours, theirs):
        cu, tu = g["time_us"]["mean"], float(t[5])
        ratio = cu / tu if tu > 0 else float("nan")
        note = " " + " ".join(t[7:]) if len(t) > 7 else ""
        bad = not abs(ratio - 1) <= GEMM_GOAL
        off += bad
        timing = f"{g.get('timing', 'per_call')}x{g.get('calls_per_sample', 1)}"
        print(f"{g['batch']:>5} {g['name']:>15} {g['m']:>5} {g['n']:>6} {g['k']:>6} {cu:>10.2f} {timing:>15} "
              f"{g['tflops']:>8.2f} {tu:>9.2f} {float(t[6]):>8.2f} {ratio:>6.3f}{'  <- off goal' if bad else ''}{note}")
    if len(ours) != len(theirs):
        print(f"# {len(ours)} collbench shapes but {len(theirs)} torch lines")
        off += 1
    for s in records(rec, "gemm_step"):
        graph = (s.get("graph_us") or {}).get("mean")
        t = steps.get(s["batch"])
        line = (f"# step at batch {s['batch']}: GEMMs {s['gemm_us_per_step']:.0f} us (roofline "
                f"{s['roofline_us_per_step']:.0f}); collbench graph {graph if graph is None else round(graph)} us, "
                f"back to back {s['sequence_us']['mean']:.0f} us")
        if t is None or graph is None:
            print(line + "; no torch step or no collbench graph to compare  <- off goal")
            off += 1
            continue
        ratio = graph / float(t[0])
        bad = not abs(ratio - 1) <= STEP_GOAL
        off += bad
        print(f"{line}; torch graph {float(t[0]):.0f} us, back to back {float(t[1]):.0f} us; "
              f"graph ratio {ratio:.3f} (goal {1 - STEP_GOAL:.2f}-{1 + STEP_GOAL:.2f}){'  <- off goal' if bad else ''}")
    print(f"# {off} row(s) off goal")


def limits(rec, torch_json):
    ours = records(rec, "device_limits")[0]
    t = json.loads(open(torch_json).read())
    rows = [
        ("copy GB/s (2 x bytes)", ours["copy_gbps"], t["copy_gbps"]),
        ("read GB/s", ours["read_gbps"], t["read_gbps"]),
        ("launch us (back to back)", ours["launch_us"]["mean"], t["launch_us"]),
        ("launch + sync us", (ours.get("launch_sync_us") or {}).get("mean", float("nan")), t["launch_sync_us"]),
    ]
    print(f"# limits on {ours['device']} ({ours['bytes']} B): collbench  torch  ratio")
    for name, a, b in rows:
        print(f"{name:>26} {a:>10.2f} {b:>10.2f} {a / b if b else float('nan'):>6.3f}")


def nccl(rec):
    colls = records(rec, "coll")
    run = records(rec, "coll_run")
    wrong = sum(c["wrong"] for c in colls)
    checked = all(c["checked"] for c in colls)
    print(f"# NCCL one-rank allreduce: {len(colls)} sizes {colls[0]['bytes'] if colls else '-'}.."
          f"{colls[-1]['bytes'] if colls else '-'} B, wrong {wrong}, "
          f"{'exact' if wrong == 0 and checked and colls else 'NOT exact'}; "
          f"the communicator formed (multi-rank figures need two or more GPUs)")
    for c in colls:
        print(f"{c['bytes']:>12} B {c['time_us']['mean']:>10.2f} us")
    if run and run[0].get("error"):
        print(f"# error: {run[0]['error']}")


def decode(rec):
    for d in records(rec, "decode"):
        print(f"# decode {d['model']} tp={d['tp']} batch {d['batch']}: {d['allreduces_per_step']} allreduces per step, "
              f"{d['comm_us_per_token']:.1f} us/token ({d['backend']}, {d['algo']}), roofline "
              f"{d['step_roofline_us']:.0f} us, comm {100 * d['comm_fraction']:.1f}%")
    for s in records(rec, "gemm_step"):
        graph = (s.get("graph_us") or {}).get("mean")
        print(f"# decode GEMMs batch {s['batch']}: {s['gemm_us_per_step']:.0f} us per step, back to back "
              f"{s['sequence_us']['mean']:.0f} us, one CUDA graph {'-' if graph is None else f'{graph:.0f}'} us, "
              f"launch overhead {s['launch_overhead_us_per_step']:.0f} us, roofline {s['roofline_us_per_step']:.0f} us")


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def telemetry(loadgen, nvml, dmon, t0, t1):
    t0, t1 = float(t0), float(t1)
    summaries = records(loadgen, "summary")
    gpus = summaries[-1].get("gpus") if summaries else None
    ours = gpus[0] if gpus else {}
    samples = [json.loads(l) for l in open(nvml) if l.startswith("{")]
    samples = [s for s in samples if t0 <= s["t"] <= t1]
    header, rows = None, []
    for line in open(dmon):
        parts = line.split()
        if line.startswith("#") and header is None and len(parts) > 2:
            header = parts[1:]
        elif not line.startswith("#") and header and len(parts) == len(header):
            rows.append(dict(zip(header, parts)))

    def dmon_mean(col):
        vals = [float(r[col]) for r in rows if col in r and r[col] not in ("-", "N/A")]
        return mean(vals)

    print(f"# GPU telemetry over {t1 - t0:.0f} s of a torch matmul loop: loadgen (nvidia-smi, "
          f"{ours.get('samples', 0)} samples)  NVML ({len(samples)})  dmon ({len(rows)})")
    for name, ncol, dcol in [("util_pct", "util_pct", "sm"), ("mem_used_mib", "mem_used_mib", "fb"),
                             ("power_w", "power_w", "pwr"), ("sm_clock_mhz", "sm_clock_mhz", "pclk"),
                             ("temp_c", "temp_c", "gtemp")]:
        lg = (ours.get(name) or {}).get("mean", float("nan"))
        nv = mean([s[ncol] for s in samples if ncol in s])
        print(f"{name:>14} {lg:>10.1f} {nv:>10.1f} {dmon_mean(dcol):>10.1f}")
    tx = mean([s["pcie_tx_kb_s"] for s in samples if "pcie_tx_kb_s" in s])
    rx = mean([s["pcie_rx_kb_s"] for s in samples if "pcie_rx_kb_s" in s])
    print(f"# PCIe (NVML only; nvidia-smi --query-gpu has none): tx {tx:.0f} KB/s, rx {rx:.0f} KB/s")


def kill(rec):
    for k in records(rec, "kill"):
        def mib(per_gpu):
            return "-" if per_gpu is None else "+".join(f"{b / 2**20:.0f}" for b in per_gpu) + " MiB"

        print(f"# srv-kill {k['target']}: signals {','.join(k['signals'])}, survivors {k['survivors']}, ok {k['ok']}, "
              f"GPU used before {mib(k.get('gpu_used_before_bytes'))}, after {mib(k.get('gpu_used_after_bytes'))}, "
              f"released {k.get('gpu_released', '-')}")


def pipeline(rec):
    """One line: the points the loop measured, the kill, and each point's GPU energy source."""
    summaries = records(rec, "summary")
    kills = records(rec, "kill")
    sources = sorted({f"GPU {g['index']} {g.get('energy_source', 'none')}" for s in summaries
                      for g in s.get("gpus") or []})
    ok = kills and all(k["ok"] for k in kills)
    print(f"{len(summaries)} point(s) (C={','.join(str(s['point'].get('concurrency', '?')) for s in summaries)}), "
          f"srv-kill {'ok' if ok else 'NOT ok'}; GPU energy: "
          f"{', '.join(sources) if sources else 'no GPU samples (see log.txt)'}")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"gemm": gemm, "limits": limits, "nccl": nccl, "decode": decode, "telemetry": telemetry,
     "kill": kill, "pipeline": pipeline}[cmd](*args)
