"""The CPU references for `collbench gemm` and `collbench limits` in the same run:
numpy's GEMM (its BLAS, float32, `x @ w.T` as a linear layer) and a plain memcpy loop
(numpy.copyto on one thread).

  python numpy_reference.py gemm M N K ITERS WARMUP   ->  "time_us tflops" (mean per call)
  python numpy_reference.py copy BYTES ITERS WARMUP   ->  "time_us gbps" (2 x bytes per copy)

Weights are cycled through enough copies to pass 96 MiB, as collbench does, so a call does
not find its weights in the cache from the call before.
"""
import sys
import time

import numpy as np


def gemm(m, n, k, iters, warmup):
    rng = np.random.default_rng(1)
    x = rng.random((m, k), dtype=np.float32) - 0.5
    copies = max(1, min(64, -(-(96 << 20) // (n * k * 4))))
    ws = [rng.random((n, k), dtype=np.float32) - 0.5 for _ in range(copies)]
    y = np.empty((m, n), dtype=np.float32)
    for i in range(warmup):
        np.matmul(x, ws[i % copies].T, out=y)
    times = []
    for i in range(iters):
        t = time.perf_counter()
        np.matmul(x, ws[i % copies].T, out=y)
        times.append(time.perf_counter() - t)
    mean = sum(times) / len(times)
    print(f"{mean * 1e6:.3f} {2 * m * n * k / mean / 1e12:.6f}")


def copy(nbytes, iters, warmup):
    src = np.arange(nbytes // 8, dtype=np.uint64)
    dst = np.empty_like(src)
    for _ in range(warmup):
        np.copyto(dst, src)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    mean = sum(times) / len(times)
    print(f"{mean * 1e6:.3f} {2 * src.nbytes / mean / 1e9:.4f}")


if __name__ == "__main__":
    what, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    {"gemm": gemm, "copy": copy}[what](*args)
