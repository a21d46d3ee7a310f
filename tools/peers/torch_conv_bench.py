#!/usr/bin/python3
"""Peer for //bench:conv_bench: Debian's torch 1.13 (oneDNN 2.6) on the same shapes.

    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 tools/peers/torch_conv_bench.py [--threads 1,2] [--batch 8]

Prints, per ResNet-18 convolution shape at batch N and 224x224 (conv_bench's table),
forward, input-gradient and weight-gradient GFLOP/s (FLOPs counted as conv_bench
counts them: 2 N O OH OW C KH KW each), then the images/s of the two ResNet training
steps conv_bench times (forward, cross-entropy, backward, SGD momentum 0.9; fp32;
CIFAR stem at 32x32: the examples/configs/resnet.json default widths 16-128 depths 1 at batch 32, and
the ResNet-18 layout at batch 16).

Settings, for torch at its best: each row runs with torch.set_num_threads(t) for every
t in --threads (on a busy 2-core machine one thread is often faster); torch picks its
convolution backend itself (oneDNN/mkldnn for fp32 NCHW here; the gradients through
torch.ops.aten.convolution_backward with an output mask, the call autograd makes);
OPENBLAS_CORETYPE=SkylakeX only matters for the GEMM of the fc layer. Inputs use the
same distribution as conv_bench (uniform [-1, 1)); the best of 3 timing rounds is kept.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from resnet_golden import BasicBlock  # noqa: E402  (torchvision's block, written out)


def time_it(fn, min_time):
    fn()
    best = float("inf")
    for _ in range(3):
        reps, t0 = 0, time.perf_counter()
        while True:
            fn()
            reps += 1
            t = time.perf_counter()
            if t - t0 >= min_time / 3:
                break
        best = min(best, (t - t0) / reps)
    return best


def layers(s):
    s1, s2, s3 = s // 4, s // 8, s // 16
    return [("conv1 7x7/2", 3, 64, 7, 2, 3, s), ("layer1 3x3", 64, 64, 3, 1, 1, s1),
            ("layer2.0.conv1 3x3/2", 64, 128, 3, 2, 1, s1), ("layer2.0.downsample 1x1/2", 64, 128, 1, 2, 0, s1),
            ("layer2 3x3", 128, 128, 3, 1, 1, s2), ("layer3.0.conv1 3x3/2", 128, 256, 3, 2, 1, s2),
            ("layer3.0.downsample 1x1/2", 128, 256, 1, 2, 0, s2), ("layer3 3x3", 256, 256, 3, 1, 1, s3),
            ("layer4.0.conv1 3x3/2", 256, 512, 3, 2, 1, s3), ("layer4.0.downsample 1x1/2", 256, 512, 1, 2, 0, s3),
            ("layer4 3x3", 512, 512, 3, 1, 1, s3 // 2)]


def conv_table(n, image, min_time):
    print(f"{'layer (ResNet-18)':28s} {'N x C x H -> O x OH':22s} {'fwd':>9s} {'dgrad':>9s} {'wgrad':>9s}")
    gen = torch.Generator().manual_seed(1)
    for name, c, o, k, stride, pad, size in layers(image):
        x = torch.rand((n, c, size, size), generator=gen) * 2 - 1
        w = torch.rand((o, c, k, k), generator=gen) * 2 - 1
        with torch.no_grad():
            y = F.conv2d(x, w, stride=stride, padding=pad)
        oh = y.shape[2]
        dy = torch.rand(y.shape, generator=gen) * 2 - 1
        flops = 2.0 * n * o * oh * oh * c * k * k

        def bwd(mask):
            return torch.ops.aten.convolution_backward(dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False,
                                                       [0, 0], 1, mask)
        with torch.no_grad():
            t_f = time_it(lambda: F.conv2d(x, w, stride=stride, padding=pad), min_time)
            t_dx = time_it(lambda: bwd([True, False, False]), min_time)
            t_dw = time_it(lambda: bwd([False, True, False]), min_time)
        print(f"{name:28s} {f'{n}x{c}x{size} -> {o}x{oh}':22s} {flops / t_f * 1e-9:9.1f} "
              f"{flops / t_dx * 1e-9:9.1f} {flops / t_dw * 1e-9:9.1f}", flush=True)


class CifarResNet(nn.Module):
    """torchvision's ResNet with a 3x3 stride-1 conv1 and no max-pool (the vision job's cifar stem)."""

    def __init__(self, widths, depths, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        blocks, inplanes = [], widths[0]
        for i, (wd, dp) in enumerate(zip(widths, depths)):
            for b in range(dp):
                blocks.append(BasicBlock(inplanes, wd, 2 if (i > 0 and b == 0) else 1, 1e-5, 0.1))
                inplanes = wd
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def forward_macs(widths, depths, s):
    macs, h, inp = 3 * widths[0] * 9 * s * s, s, widths[0]
    for i, (wd, dp) in enumerate(zip(widths, depths)):
        for b in range(dp):
            st = 2 if (i > 0 and b == 0) else 1
            h = (h + 2 - 3) // st + 1
            macs += wd * h * h * inp * 9 + wd * h * h * wd * 9
            if st != 1 or inp != wd:
                macs += wd * h * h * inp
            inp = wd
    return macs + inp * 10


def step_row(name, widths, depths, batch, min_time):
    torch.manual_seed(1)
    model = CifarResNet(widths, depths)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand((batch, 3, 32, 32)) * 2 - 1
    t = torch.randint(0, 10, (batch,))

    def one():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), t).backward()
        opt.step()
    sec = time_it(one, min_time)
    flops = 3 * 2.0 * forward_macs(widths, depths, 32) * batch
    print(f"{name:44s} batch {batch:3d} {batch / sec:8.1f} images/s {flops / sec * 1e-9:7.1f} model GFLOP/s "
          f"(3 x forward)", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--min_time", type=float, default=0.3)
    a = p.parse_args()
    for t in [int(v) for v in a.threads.split(",")]:
        torch.set_num_threads(t)
        load = open("/proc/loadavg").read().split()[:3]
        print(f"\n== torch {torch.__version__}, {t} thread(s), mkldnn {torch.backends.mkldnn.is_available()}; "
              f"load average {' '.join(load)}")
        conv_table(a.batch, a.image, a.min_time)
        print("ResNet training steps (forward, backward, SGD; fp32; CIFAR stem, 32x32):")
        step_row("resnet.json default (16-128 wide, 32x32)", [16, 32, 64, 128], [1, 1, 1, 1], 32, 2 * a.min_time)
        step_row("ResNet-18 layout, CIFAR stem, 32x32", [64, 128, 256, 512], [2, 2, 2, 2], 16, 2 * a.min_time)


if __name__ == "__main__":
    main()
