"""torch.distributed.all_reduce (NCCL) at nccl-tests sizes, timed like collbench's pipelined mode:
CUDA events around N back-to-back ops after warmup, one process per GPU.
Prints one line per size: bytes time_us algbw_gbps busbw_gbps (busbw factor 2(n-1)/n).
Usage: python torch_allreduce.py --gpus 8 --min 8 --max 268435456 --iters 20 --warmup 5 [--dtype bf16]
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.gpus)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    esize = torch.tensor([], dtype=dtype).element_size()
    n = args.gpus
    size = args.min
    while size <= args.max:
        count = max(1, size // esize)
        x = torch.ones(count, dtype=dtype, device="cuda")
        for _ in range(args.warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(end) * 1e3 / args.iters
        if rank == 0:
            algbw = count * esize / (us * 1e-6) / 1e9
            print(f"{count * esize} {us:.3f} {algbw:.4f} {algbw * 2 * (n - 1) / n:.4f}", flush=True)
        size *= args.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    p.add_argument("--min", type=int, default=8)
    p.add_argument("--max", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="f32")
    p.add_argument("--port", type=int, default=29511)
    a = p.parse_args()
    mp.spawn(worker, args=(a,), nprocs=a.gpus)
