#!/usr/bin/python3
"""The optimizer peer (issue 6): torch.optim.AdamW on the CPU (Debian's torch 1.13),
stepping one flat fp32 parameter of n elements (torch's best case: one tensor, so the
single-tensor and foreach paths do the same work), beside zeroshard's fused AdamW
(//bench:optim_bench's AdamW/f32grad/nocopy row) and memcpy over the same n and threads,
run right after it in the same invocation.

    /usr/bin/python3 tools/peers/torch_adamw_bench.py [--sizes 10M,100M] [--threads 1,2]

Bytes per parameter are counted as optim_bench counts them: param, exp_avg and
exp_avg_sq read and written, the gradient read = 28. Needs python3-torch (run by
`make bench-peers`); the library never needs it.
"""
import argparse
import json
import os
import re
import subprocess
import time

import torch


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMB]?)", s.strip())
    if not m:
        raise SystemExit(f"--sizes: expected numbers like 10M or 1B, found {s!r}")
    return int(m.group(1)) * {"": 1, "K": 10**3, "M": 10**6, "B": 10**9}[m.group(2)]


def torch_adamw(n, threads, foreach, steps):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.rand(n, generator=g))
    p.grad = torch.rand(n, generator=g) * 1e-3
    opt = torch.optim.AdamW([p], lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            foreach=foreach)
    opt.step()  # creates the state
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def ours(n, threads, binary):
    if not os.access(binary, os.X_OK):
        return None
    out = subprocess.run([binary, f"--optim_sizes={n}", f"--optim_threads={threads}",
                          "--benchmark_filter=AdamW/f32grad/nocopy|Memcpy",
                          "--benchmark_format=json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{binary} failed:\n{out.stdout}\n{out.stderr}")
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    rows = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("error_occurred"):
            raise SystemExit(f"{binary}: {b['name']}: {b.get('error_message')}")
        key = "adamw" if b["name"].startswith("AdamW") else "memcpy"
        rows[key] = b["real_time"] * scale[b["time_unit"]]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10M,100M")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ours", default="bazel-bin/bench/optim_bench")
    a = ap.parse_args()
    print(f"# torch {torch.__version__} AdamW on CPU; bytes/param 28; load "
          f"{open('/proc/loadavg').read().split()[:3]}")
    for n in map(parse_size, a.sizes.split(",")):
        for t in map(int, a.threads.split(",")):
            for foreach in (False, True):
                s = torch_adamw(n, t, foreach, a.steps)
                print(f"peer=torch.optim.AdamW foreach={int(foreach)} n={n} threads={t} "
                      f"ms={s * 1e3:.2f} params_per_s={n / s / 1e6:.0f}M GB_per_s={28 * n / s / 1e9:.2f}")
            best = min(torch_adamw(n, t, f, a.steps) for f in (False, True))
            o = ours(n, t, a.ours)
            if o and "adamw" in o:
                s = o["adamw"]
                print(f"ours=zeroshard n={n} threads={t} ms={s * 1e3:.2f} params_per_s={n / s / 1e6:.0f}M "
                      f"GB_per_s={28 * n / s / 1e9:.2f} speedup_vs_torch={best / s:.2f}x"
                      + (f" memcpy_same_bytes_GB_per_s={28 * n / o['memcpy'] / 1e9:.2f}" if "memcpy" in o else ""))
            else:
                print(f"# ours: {a.ours} missing (bazel build -c opt //bench:optim_bench)")


if __name__ == "__main__":
    main()
