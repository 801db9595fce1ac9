"""torch.matmul at the shapes collbench timed, the same way: `x @ w.T` (a linear layer), warm-up
then ITERS calls back to back with CUDA events between them, weights cycled through copies past
twice the L2 cache (at least 256 MiB), mean per call.

Reads "name m n k" lines on stdin; prints "name m n k time_us tflops" per line.
Usage: python torch_gemm.py --dtype bf16 --iters 20 --warmup 5 < shapes.txt
"""
import argparse
import sys

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args()
    torch.cuda.set_device(a.device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    # As cuBLAS through collbench: no TF32 for f32.
    torch.backends.cuda.matmul.allow_tf32 = False
    l2 = torch.cuda.get_device_properties(a.device).L2_cache_size
    cache = max(2 * l2, 256 << 20)
    esize = torch.tensor([], dtype=dtype).element_size()
    for line in sys.stdin:
        if not line.strip():
            continue
        name, m, n, k = line.split()
        m, n, k = int(m), int(n), int(k)
        copies = max(1, min(64, -(-cache // (n * k * esize))))
        x = torch.rand(m, k, device="cuda", dtype=dtype) - 0.5
        ws = [torch.rand(n, k, device="cuda", dtype=dtype) - 0.5 for _ in range(copies)]
        for i in range(a.warmup):
            torch.matmul(x, ws[i % copies].t())
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(a.iters + 1)]
        events[0].record()
        for i in range(a.iters):
            torch.matmul(x, ws[i % copies].t())
            events[i + 1].record()
        torch.cuda.synchronize()
        us = sum(events[i].elapsed_time(events[i + 1]) for i in range(a.iters)) * 1e3 / a.iters
        print(f"{name} {m} {n} {k} {us:.3f} {2 * m * n * k / (us * 1e-6) / 1e12:.4f}", flush=True)


if __name__ == "__main__":
    main()
