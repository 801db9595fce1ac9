"""torch at the shapes collbench timed, timed the way engines run decode: each shape's CALLS
calls of `x @ w.T` (a linear layer) captured in one CUDA graph, weights cycled through copies
past twice the L2 cache (at least 256 MiB), the graph replayed ITERS times between two events,
the mean per call; and each batch's step (every shape per_step times, layer by layer, as
collbench's step order for dense models) captured as one graph and replayed STEP_ITERS times
between two events, and launched back to back (eager) the same way.

Why a graph: an event after every call, or a Python loop issuing a 12-18 us kernel (it cannot
issue one faster than ~35 us), measures the reference's overhead, not the GEMM (the H200's
first run: gpu-h200/torchdiag.txt). collbench's `back_to_back` figures (20 calls between two
events) are set against the graph figures here.

Reads "batch name m n k per_step" lines on stdin (collbench's gemm records, in order); prints
  gemm BATCH NAME M N K GRAPH_US TFLOPS [padded_m=16]     per shape
  step BATCH GRAPH_US BACK_TO_BACK_US CALLS              per batch, after its shapes
fp8: torch._scaled_mm (E4M3 in, BF16 out, unit scales), which needs m, n and k divisible by 16:
a smaller m is padded up to 16 and the line ends with "padded_m=16" (the time is of the padded
product, its TFLOP/s counted for the shape asked).
Usage: python torch_gemm.py --dtype bf16|f32|fp8 [--iters 10] [--warmup 3] [--calls 20]
       [--step-iters 3] < shapes.txt
"""
import argparse
import sys

import torch


def graph_of(fn):
    """fn captured once as a CUDA graph (after a warm-up on a side stream, as torch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def timed_us(fn, reps, warmup):
    """Mean us of one fn() over reps back to back, between two events, after warmup."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


class Shape:
    def __init__(self, a, batch, name, m, n, k, per_step):
        self.batch, self.name, self.m, self.n, self.k, self.per_step = batch, name, m, n, k, per_step
        fp8 = a.dtype == "fp8"
        self.run_m = -(-m // 16) * 16 if fp8 else m
        copies = max(1, min(64, -(-a.cache // (n * k * a.esize))))
        self.x = a.rand(self.run_m, k)
        self.ws = [a.rand(n, k) for _ in range(copies)]
        self.next = 0
        self.a = a

    def call(self):
        w = self.ws[self.next]
        self.next = (self.next + 1) % len(self.ws)
        if self.a.dtype == "fp8":
            # w.t() is column-major, as _scaled_mm wants its second operand.
            return torch._scaled_mm(self.x, w.t(), scale_a=self.a.one, scale_b=self.a.one,
                                    out_dtype=torch.bfloat16)
        return torch.matmul(self.x, w.t())


def step_order(shapes):
    """Layer by layer: each shape once per layer while it has layers left (dense: per_step)."""
    order = []
    for layer in range(max(s.per_step for s in shapes)):
        order.extend(s for s in shapes if layer < s.per_step)
    return order


def finish_batch(a, shapes):
    for s in shapes:
        calls = lambda s=s: [s.call() for _ in range(a.calls)]
        g = graph_of(calls)
        us = timed_us(g.replay, a.iters, a.warmup) / a.calls
        note = f" padded_m={s.run_m}" if s.run_m != s.m else ""
        tflops = 2 * s.m * s.n * s.k / (us * 1e-6) / 1e12
        print(f"gemm {s.batch} {s.name} {s.m} {s.n} {s.k} {us:.3f} {tflops:.4f}{note}", flush=True)
    order = step_order(shapes)
    step = lambda: [s.call() for s in order]
    g = graph_of(step)
    graph_us = timed_us(g.replay, a.step_iters, 1)
    eager_us = timed_us(step, a.step_iters, 1)
    print(f"step {shapes[0].batch} {graph_us:.1f} {eager_us:.1f} {len(order)}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--step-iters", type=int, default=3)
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args()
    torch.cuda.set_device(a.device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[a.dtype]
    a.one = torch.tensor(1.0, device="cuda")
    # As cuBLAS through collbench: no TF32 for f32.
    torch.backends.cuda.matmul.allow_tf32 = False
    l2 = torch.cuda.get_device_properties(a.device).L2_cache_size
    a.cache = max(2 * l2, 256 << 20)
    a.esize = torch.tensor([], dtype=dtype).element_size()
    make = torch.bfloat16 if a.dtype == "fp8" else dtype
    a.rand = lambda rows, cols: (torch.rand(rows, cols, device="cuda", dtype=make) - 0.5).to(dtype)
    shapes = []
    for line in sys.stdin:
        if not line.strip():
            continue
        batch, name, m, n, k, per_step = line.split()
        if shapes and shapes[0].batch != int(batch):
            finish_batch(a, shapes)
            shapes = []
            torch.cuda.empty_cache()
        shapes.append(Shape(a, int(batch), name, int(m), int(n), int(k), int(per_step)))
    if shapes:
        finish_batch(a, shapes)


if __name__ == "__main__":
    main()
