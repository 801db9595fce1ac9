"""PyTorch and NVML beside collbench on one GPU (scripts/device-gpu.sh), one subcommand each:

  limits --bytes N --iters I --warmup W   device-to-device copy (2 x N bytes counted, as
                                          collbench), a read-only pass (x.sum(), N bytes), an
                                          almost empty kernel (torch.cuda._sleep(0)) back to back
                                          and each waited for; one JSON line
  matmul --seconds S                      bf16 8192^3 products back to back for S seconds (load
                                          for the telemetry step); prints "ready" first
  hold --gib G                            allocates and fills G GiB, prints "ready", sleeps (at
                                          most 300 s) until killed
  nvml --seconds S                        NVML (nvidia-ml-py) once a second: one JSON line per
                                          sample with the unix time
torch and pynvml are imported by the subcommand that needs them.
"""
import argparse
import json
import sys
import time


def events_us(torch, fn, iters):
    """Mean µs per call of `fn` over `iters` calls back to back, from CUDA events between them."""
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return sum(ev[i].elapsed_time(ev[i + 1]) for i in range(iters)) * 1e3 / iters


def limits(a):
    import torch

    src = torch.rand(a.bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    n = src.numel() * 4
    for _ in range(a.warmup):
        dst.copy_(src)
        src.sum()
    torch.cuda.synchronize()
    copy_us = events_us(torch, lambda: dst.copy_(src), a.iters)
    read_us = events_us(torch, lambda: src.sum(), a.iters)
    launches = max(100, a.iters * 50)
    events_us(torch, lambda: torch.cuda._sleep(0), 10)
    launch_us = events_us(torch, lambda: torch.cuda._sleep(0), launches)
    sync = []
    for _ in range(launches):
        t = time.perf_counter()
        torch.cuda._sleep(0)
        torch.cuda.synchronize()
        sync.append((time.perf_counter() - t) * 1e6)
    print(json.dumps({
        "kind": "torch_limits", "bytes": n, "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "copy_us": copy_us, "copy_gbps": 2 * n / (copy_us * 1e-6) / 1e9,
        "read_us": read_us, "read_gbps": n / (read_us * 1e-6) / 1e9,
        "launch_us": launch_us, "launch_sync_us": sum(sync) / len(sync),
    }), flush=True)


def matmul(a):
    import torch

    x = torch.rand(8192, 8192, device="cuda", dtype=torch.bfloat16) - 0.5
    y = torch.rand(8192, 8192, device="cuda", dtype=torch.bfloat16) - 0.5
    torch.matmul(x, y)
    torch.cuda.synchronize()
    print("ready", flush=True)
    end = time.time() + a.seconds
    while time.time() < end:
        for _ in range(10):
            torch.matmul(x, y)
        torch.cuda.synchronize()


def hold(a):
    import torch

    x = torch.empty(a.gib << 30, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    print("ready", flush=True)
    time.sleep(300)


def nvml(a):
    import pynvml as n

    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    end = time.time() + a.seconds
    while time.time() < end:
        t = time.time()
        row = {"t": t}
        reads = {
            "util_pct": lambda: n.nvmlDeviceGetUtilizationRates(h).gpu,
            "mem_used_mib": lambda: n.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            "power_w": lambda: n.nvmlDeviceGetPowerUsage(h) / 1000,
            "sm_clock_mhz": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "temp_c": lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "pcie_tx_kb_s": lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES),
            "pcie_rx_kb_s": lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES),
        }
        for k, f in reads.items():
            try:
                row[k] = f()
            except n.NVMLError as e:
                row[k + "_error"] = str(e)
        print(json.dumps(row), flush=True)
        time.sleep(max(0.0, 1.0 - (time.time() - t)))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("limits")
    s.add_argument("--bytes", type=int, default=1 << 30)
    s.add_argument("--iters", type=int, default=10)
    s.add_argument("--warmup", type=int, default=2)
    sub.add_parser("matmul").add_argument("--seconds", type=float, default=20)
    sub.add_parser("hold").add_argument("--gib", type=int, default=10)
    sub.add_parser("nvml").add_argument("--seconds", type=float, default=20)
    a = p.parse_args()
    {"limits": limits, "matmul": matmul, "hold": hold, "nvml": nvml}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
