"""torch.matmul at the shapes collbench timed, the same way: `x @ w.T` (a linear layer), warm-up
then ITERS calls back to back with CUDA events between them, weights cycled through copies past
twice the L2 cache (at least 256 MiB), mean per call.

Reads "name m n k" lines on stdin; prints "name m n k time_us tflops" per line.
fp8: torch._scaled_mm (E4M3 in, BF16 out, unit scales), which needs m, n and k divisible by 16:
a smaller m is padded up to 16 and the line ends with "padded_m=16" (the time is of the padded
product, its TFLOP/s counted for the shape asked).
Usage: python torch_gemm.py --dtype bf16|f32|fp8 --iters 20 --warmup 5 < shapes.txt
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
    fp8 = a.dtype == "fp8"
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[a.dtype]
    one = torch.tensor(1.0, device="cuda")
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
        run_m = -(-m // 16) * 16 if fp8 else m
        make = torch.bfloat16 if fp8 else dtype

        def rand(rows, cols):
            return (torch.rand(rows, cols, device="cuda", dtype=make) - 0.5).to(dtype)

        x = rand(run_m, k)
        ws = [rand(n, k) for _ in range(copies)]

        def call(w):
            if fp8:
                # w.t() is column-major, as _scaled_mm wants its second operand.
                return torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            return torch.matmul(x, w.t())

        for i in range(a.warmup):
            call(ws[i % copies])
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(a.iters + 1)]
        events[0].record()
        for i in range(a.iters):
            call(ws[i % copies])
            events[i + 1].record()
        torch.cuda.synchronize()
        us = sum(events[i].elapsed_time(events[i + 1]) for i in range(a.iters)) * 1e3 / a.iters
        note = f" padded_m={run_m}" if run_m != m else ""
        print(f"{name} {m} {n} {k} {us:.3f} {2 * m * n * k / (us * 1e-6) / 1e12:.4f}{note}", flush=True)


if __name__ == "__main__":
    main()
