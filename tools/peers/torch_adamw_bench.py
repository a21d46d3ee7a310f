#!/usr/bin/python3
"""Peer for //bench:optim_bench: torch.optim.AdamW on the CPU, at its best.

    /usr/bin/python3 tools/peers/torch_adamw_bench.py [--sizes 10M,100M] [--threads 1,2]

Runs one flat fp32 parameter of n elements (grad f32, lr 1e-3, weight decay 0.1,
as optim_bench) with the for-loop (foreach=False) and the multi-tensor
(foreach=True) implementations, and prints ms/step, params/s and GB/s counted
as optim_bench counts a fused step (28 bytes per parameter: the bytes a
single-pass step must move; torch's op-by-op step moves several times that).

Settings, for torch at its best: each row runs with torch.set_num_threads(t)
for every t in --threads (default 1 and 2, the cores here; on a busy machine
one thread is often faster); AdamW does no GEMM, so OpenBLAS and OPENBLAS_CORETYPE do not
matter. torch's op-by-op step allocates parameter-sized temporaries; glibc
serves allocations above 32 MB with fresh mmap()s, so every step page-faults
them in again (at 100M parameters: ~300k faults, 4x slower steps). The script
therefore re-runs itself with MALLOC_MMAP_MAX_=0 and a large
MALLOC_TRIM_THRESHOLD_, which keep freed memory in the heap for reuse
(--no_malloc_tuning measures the default instead). The first step (state
allocation) is not timed.
"""
import argparse
import os
import sys
import time

import torch


def parse_count(text):
    scale = {"K": 10**3, "M": 10**6, "B": 10**9}.get(text[-1], 1)
    return int(text[:-1] if scale != 1 else text) * scale


def bench(n, foreach, min_time):
    gen = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.rand(n, generator=gen) * 2 - 1)
    p.grad = torch.rand(n, generator=gen) * 2 - 1
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, foreach=foreach)
    opt.step()  # allocates the state
    steps, elapsed = 0, 0.0
    best = float("inf")
    while elapsed < min_time or steps < 3:
        t0 = time.perf_counter()
        opt.step()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        elapsed += dt
        steps += 1
    assert torch.isfinite(p).all()
    mean = elapsed / steps
    return mean, best, steps


MALLOC_TUNING = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10M,100M")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--min_time", type=float, default=1.0, help="seconds per row")
    ap.add_argument("--no_malloc_tuning", action="store_true",
                    help="keep glibc's default mmap threshold (slower torch steps)")
    args = ap.parse_args()
    if not args.no_malloc_tuning and any(os.environ.get(k) != v for k, v in MALLOC_TUNING.items()):
        env = dict(os.environ, **MALLOC_TUNING)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)  # glibc reads these at start
    print("torch %s, %s" % (
        torch.__version__, "glibc default malloc" if args.no_malloc_tuning else
        " ".join("%s=%s" % kv for kv in MALLOC_TUNING.items())))
    print("%-40s %10s %10s %12s %8s %6s" % ("row", "ms/step", "best ms", "params/s", "GB/s", "steps"))
    for n in [parse_count(s) for s in args.sizes.split(",")]:
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            for foreach in (False, True):
                mean, best, steps = bench(n, foreach, args.min_time)
                name = "TorchAdamW/%s/n:%d/threads:%d" % (
                    "foreach" if foreach else "forloop", n, threads)
                print("%-40s %10.2f %10.2f %12.4g %8.2f %6d" % (
                    name, mean * 1e3, best * 1e3, n / mean, 28.0 * n / mean / 1e9, steps))


if __name__ == "__main__":
    main()
