"""The table of scripts/device-gpu.sh from what its steps wrote (stdlib only: it runs where the
GPU steps could not). One subcommand per step; each prints table lines on stdout.

  gemm MODEL DTYPE COLLBENCH.jsonl TORCH.txt      per shape: cuBLAS vs torch, ratio (goal 0.95-1.05)
  limits COLLBENCH.jsonl TORCH.json               copy/read GB/s, launch us, beside PyTorch's
  nccl COLLBENCH.jsonl                            the one-rank allreduce: sizes, wrong, exact or not
  decode COLLBENCH.jsonl                          the decode and gemm_step records, one line per batch
  telemetry LOADGEN.jsonl NVML.jsonl DMON.txt T0 T1   loadgen's GPU figures beside NVML and dmon
  kill KILL.jsonl                                 srv-kill's record: signals, GPU memory before/after
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


def gemm(model, dtype, rec, torch_txt):
    ours = records(rec, "gemm")
    theirs = [line.split() for line in open(torch_txt) if line.strip()]
    print(f"# {model} TP1 {dtype}: batch gemm m n k  cublas_us TFLOP/s  torch_us TFLOP/s  ratio (goal 0.95-1.05)")
    worst = None
    for g, t in zip(ours, theirs):
        cu, tu = g["time_us"]["mean"], float(t[4])
        ratio = cu / tu if tu > 0 else float("nan")
        note = " " + " ".join(t[6:]) if len(t) > 6 else ""
        flag = "" if 0.95 <= ratio <= 1.05 else "  <- off goal"
        print(f"{g['batch']:>5} {g['name']:>15} {g['m']:>5} {g['n']:>6} {g['k']:>6} {cu:>10.2f} {g['tflops']:>8.2f} "
              f"{tu:>9.2f} {float(t[5]):>8.2f} {ratio:>6.3f}{flag}{note}")
        worst = ratio if worst is None or abs(ratio - 1) > abs(worst - 1) else worst
    if len(ours) != len(theirs):
        print(f"# {len(ours)} collbench shapes but {len(theirs)} torch lines")
    for s in records(rec, "gemm_step"):
        print(f"# step at batch {s['batch']}: GEMMs {s['gemm_us_per_step']:.0f} us (roofline "
              f"{s['roofline_us_per_step']:.0f}), back to back {s['sequence_us']['mean']:.0f} us")
    if worst is not None:
        print(f"# worst ratio {worst:.3f}")


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
        print(f"# decode {d['model']} tp={d['tp']} batch {d['batch']}: allreduce {d['comm_us_per_token']:.1f} us/token "
              f"({d['backend']}), roofline {d['step_roofline_us']:.0f} us, comm {100 * d['comm_fraction']:.1f}%")
    for s in records(rec, "gemm_step"):
        print(f"# decode GEMMs batch {s['batch']}: {s['gemm_us_per_step']:.0f} us per step, launch overhead "
              f"{s['launch_overhead_us_per_step']:.0f} us, roofline {s['roofline_us_per_step']:.0f} us")


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


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"gemm": gemm, "limits": limits, "nccl": nccl, "decode": decode, "telemetry": telemetry,
     "kill": kill}[cmd](*args)
