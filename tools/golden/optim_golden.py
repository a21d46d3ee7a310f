#!/usr/bin/python3
"""Golden values for the optimizers: torch.optim.AdamW / Adam / SGD, run for 10
steps on fixed data, written to tests/optim/testdata/optim_golden.txt.

    /usr/bin/python3 tools/golden/optim_golden.py          # Debian's python3-torch (1.13)

The gtest //tests/optim:optim_golden_test reads the file (it needs no torch).
Every case has two parameters in two param groups (their own lr and weight
decay) that zeroshard lays out as one flat buffer [a (5x7) | b (9)]. Format,
one record per line, floats with 9 significant digits (exact for float32):

    case NAME
    optimizer adamw|adam|sgd
    hyper beta1 B1 beta2 B2 eps E momentum M dampening D nesterov 0|1
    clip MAX_NORM                (0: no clipping; else clip_grad_norm_ before each step)
    schedule none | schedule cosine LR MIN_LR WARMUP DECAY   (nanoGPT get_lr sets every group's lr)
    group OFFSET NUMEL LR WEIGHT_DECAY
    init V...                    (flat initial parameters)
    grad STEP V...               (flat gradient of step STEP, 0-based)
    param STEP V...              (flat parameters after step STEP)
    state NAME V...              (flat optimizer state after the last step)
    end
"""
import math
import os
import sys

import torch

STEPS = 10
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "optim",
                   "testdata", "optim_golden.txt")


def fmt(t):
    return " ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())


def nanogpt_get_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def run_case(out, name, optimizer, groups, hyper, clip=0.0, schedule=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.nn.Parameter(torch.randn(5, 7, generator=gen) * 0.5)
    b = torch.nn.Parameter(torch.randn(9, generator=gen) * 0.5)
    params = [a, b]
    param_groups = [{"params": [p], "lr": lr, "weight_decay": wd}
                    for p, (lr, wd) in zip(params, groups)]
    if optimizer == "adamw":
        opt = torch.optim.AdamW(param_groups, betas=(hyper["beta1"], hyper["beta2"]),
                                eps=hyper["eps"], foreach=False)
    elif optimizer == "adam":
        opt = torch.optim.Adam(param_groups, betas=(hyper["beta1"], hyper["beta2"]),
                               eps=hyper["eps"], foreach=False)
    else:
        opt = torch.optim.SGD(param_groups, lr=groups[0][0], momentum=hyper["momentum"],
                              dampening=hyper["dampening"], nesterov=bool(hyper["nesterov"]),
                              foreach=False)
    flat = lambda ts: torch.cat([t.detach().reshape(-1) for t in ts])
    out.write("case %s\noptimizer %s\n" % (name, optimizer))
    out.write("hyper beta1 %r beta2 %r eps %r momentum %r dampening %r nesterov %d\n" % (
        hyper.get("beta1", 0.9), hyper.get("beta2", 0.999), hyper.get("eps", 1e-8),
        hyper.get("momentum", 0.0), hyper.get("dampening", 0.0), hyper.get("nesterov", 0)))
    out.write("clip %r\n" % clip)
    if schedule is None:
        out.write("schedule none\n")
    else:
        out.write("schedule cosine %r %r %d %d\n" % schedule)
    offset = 0
    for p, (lr, wd) in zip(params, groups):
        out.write("group %d %d %r %r\n" % (offset, p.numel(), lr, wd))
        offset += p.numel()
    out.write("init %s\n" % fmt(flat(params)))
    for step in range(STEPS):
        ga = torch.randn(5, 7, generator=gen)
        gb = torch.randn(9, generator=gen) * 3
        ga[0, :3] = 0  # exact zeros
        a.grad, b.grad = ga, gb
        out.write("grad %d %s\n" % (step, fmt(flat([ga, gb]))))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        if schedule is not None:
            for g in opt.param_groups:
                g["lr"] = nanogpt_get_lr(step, *schedule)
        opt.step()
        out.write("param %d %s\n" % (step, fmt(flat(params))))
    if optimizer in ("adamw", "adam"):
        out.write("state exp_avg %s\n" % fmt(flat([opt.state[p]["exp_avg"] for p in params])))
        out.write("state exp_avg_sq %s\n" % fmt(flat([opt.state[p]["exp_avg_sq"] for p in params])))
    elif hyper["momentum"] != 0:
        out.write("state momentum_buffer %s\n" % fmt(
            flat([opt.state[p]["momentum_buffer"] for p in params])))
    out.write("end\n")


def main():
    torch.set_num_threads(1)
    adam_hyper = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8}
    with open(OUT, "w") as out:
        out.write("# torch %s, written by tools/golden/optim_golden.py\n" % torch.__version__)
        run_case(out, "adamw", "adamw", [(1e-2, 0.1), (3e-3, 0.0)], adam_hyper, seed=1)
        run_case(out, "adam_l2", "adam", [(1e-2, 0.05), (3e-3, 0.0)],
                 {"beta1": 0.8, "beta2": 0.999, "eps": 1e-6}, seed=2)
        run_case(out, "adamw_clip_cosine", "adamw", [(1e-2, 0.1), (1e-2, 0.0)], adam_hyper,
                 clip=1.0, schedule=(1e-2, 1e-3, 3, 8), seed=3)
        run_case(out, "sgd_nesterov", "sgd", [(0.05, 1e-2), (0.02, 0.0)],
                 {"momentum": 0.9, "dampening": 0.0, "nesterov": 1}, seed=4)
        run_case(out, "sgd_dampening", "sgd", [(0.05, 1e-2), (0.02, 0.0)],
                 {"momentum": 0.9, "dampening": 0.1, "nesterov": 0}, seed=5)
        run_case(out, "sgd_plain", "sgd", [(0.05, 1e-2), (0.02, 0.0)],
                 {"momentum": 0.0, "dampening": 0.0, "nesterov": 0}, seed=6)
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    sys.exit(main())
