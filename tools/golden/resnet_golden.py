#!/usr/bin/env python3
"""Writes the ResNet golden file that zeroshard's vision parity test compares against.

    /usr/bin/python3 tools/golden/resnet_golden.py --out tests/testdata/resnet_golden.safetensors

A small torchvision-layout ResNet (BasicBlock; the module tree and parameter/buffer
names of torchvision.models.resnet, written out here because Debian has no
torchvision), one fixed batch of images, in training mode: logits, loss, every
gradient and the BatchNorm running statistics after the forward; then one SGD
step (momentum, weight decay); then the loss of a second training forward and the
eval-mode logits with the updated running statistics. Everything is computed in
float64 from float32 weights and stored as float32 (see tools/golden/README.md).

Needs Debian's python3-torch (1.13); the test that reads the file needs no torch.
The output is deterministic: running the script again gives the same bytes.
"""

import argparse
import json
import os
import platform
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

FORMAT = "zeroshard-resnet-golden/1"

CONFIG = {
    "widths": [4, 6, 8],
    "depths": [2, 1, 1],
    "in_channels": 3,
    "num_classes": 5,
    "stem": "imagenet",   # conv1 7x7/2 pad 3, maxpool 3x3/2 pad 1
    "batch_size": 6,
    "image_size": 24,     # 24 -> 12 (conv1) -> 6 (maxpool) -> 6, 3, 2 (layers)
    "bn_eps": 1e-5,
    "bn_momentum": 0.1,
}
SEED = 1337
SGD = {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}


# ---------------------------------------------------------------- the model (torchvision's)

def conv3x3(i, o, stride=1):
    return nn.Conv2d(i, o, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride, eps, momentum):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes, eps=eps, momentum=momentum)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes, eps=eps, momentum=momentum)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes, eps=eps, momentum=momentum))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        w0, eps, mom = cfg["widths"][0], cfg["bn_eps"], cfg["bn_momentum"]
        self.conv1 = nn.Conv2d(cfg["in_channels"], w0, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(w0, eps=eps, momentum=mom)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inplanes = w0
        for i, (width, depth) in enumerate(zip(cfg["widths"], cfg["depths"])):
            blocks = []
            for b in range(depth):
                stride = 2 if (i > 0 and b == 0) else 1
                blocks.append(BasicBlock(inplanes, width, stride, eps, mom))
                inplanes = width
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.n_layers = len(cfg["widths"])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, cfg["num_classes"])

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.n_layers):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def init(model, gen):
    """torchvision's init drawn from `gen` in state_dict order, then perturbations that make
    every BatchNorm parameter and buffer matter: conv weights normal(0, sqrt(2 / fan_out));
    fc weight and bias uniform(+-1/sqrt(in)); BN weight 1 + 0.2 randn, bias 0.2 randn,
    running_mean 0.2 randn, running_var 1 + 0.5 rand, num_batches_tracked 3."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                t.fill_(3)
            elif t.dim() == 4:
                fan_out = t.shape[0] * t.shape[2] * t.shape[3]
                t.copy_(torch.randn(t.shape, generator=gen) * (2.0 / fan_out) ** 0.5)
            elif name.startswith("fc."):
                bound = 1.0 / model.fc.in_features ** 0.5
                t.copy_((torch.rand(t.shape, generator=gen) * 2 - 1) * bound)
            elif name.endswith("running_var"):
                t.copy_(1 + 0.5 * torch.rand(t.shape, generator=gen))
            elif name.endswith("weight"):
                t.copy_(1 + 0.2 * torch.randn(t.shape, generator=gen))
            else:  # BN bias, running_mean
                t.copy_(0.2 * torch.randn(t.shape, generator=gen))


def run(model, images, targets):
    model.train()
    model.zero_grad(set_to_none=True)
    logits = model(images)
    loss = F.cross_entropy(logits, targets)
    loss.backward()
    params = dict(model.named_parameters())
    out = {"logits": logits.detach().clone(), "loss": loss.detach().clone(),
           "grads": {n: p.grad.detach().clone() for n, p in params.items()},
           "buffers_after_forward": {n: b.detach().clone() for n, b in model.named_buffers()}}
    opt = torch.optim.SGD(model.parameters(), lr=SGD["lr"], momentum=SGD["momentum"],
                          weight_decay=SGD["weight_decay"], foreach=False)
    opt.step()
    out["params_after_step"] = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        out["loss_after_step"] = F.cross_entropy(model(images), targets).detach().clone()
        out["buffers_after_second_forward"] = {n: b.detach().clone() for n, b in model.named_buffers()}
        model.eval()
        out["eval_logits"] = model(images).detach().clone()
    return out


def max_abs_diff(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/testdata/resnet_golden.safetensors")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    cfg = CONFIG
    gen = torch.Generator().manual_seed(SEED)
    model32 = ResNet(cfg)
    init(model32, gen)
    n, s = cfg["batch_size"], cfg["image_size"]
    images = torch.randn((n, cfg["in_channels"], s, s), generator=gen, dtype=torch.float32)
    targets = torch.randint(0, cfg["num_classes"], (n,), generator=gen, dtype=torch.int64)
    weights = {k: t.detach().clone() for k, t in model32.state_dict().items()}

    model64 = ResNet(cfg).double()
    model64.load_state_dict({k: (t.double() if t.is_floating_point() else t) for k, t in weights.items()})
    ref = run(model64, images.double(), targets)
    f32 = run(model32, images, targets)

    param_names = [k for k, _ in model64.named_parameters()]
    buffer_names = [k for k, _ in model64.named_buffers()]
    fbuf = [k for k in buffer_names if not k.endswith("num_batches_tracked")]
    diffs = {
        "logits": max_abs_diff(f32["logits"], ref["logits"]),
        "loss": max_abs_diff(f32["loss"], ref["loss"]),
        "grads": max(max_abs_diff(f32["grads"][k], ref["grads"][k]) for k in param_names),
        "buffers_after_forward": max(max_abs_diff(f32["buffers_after_forward"][k],
                                                  ref["buffers_after_forward"][k]) for k in fbuf),
        "params_after_step": max(max_abs_diff(f32["params_after_step"][k], ref["params_after_step"][k])
                                 for k in param_names),
        "eval_logits": max_abs_diff(f32["eval_logits"], ref["eval_logits"]),
    }

    def f32_of(t):
        return t.to(torch.float32) if t.is_floating_point() else t

    entries = [(k, t) for k, t in weights.items()]
    entries += [("images", images), ("targets", targets), ("logits", f32_of(ref["logits"])),
                ("loss", f32_of(ref["loss"]))]
    entries += [(f"grad.{k}", f32_of(ref["grads"][k])) for k in param_names]
    entries += [(f"after_forward.{k}", f32_of(ref["buffers_after_forward"][k])) for k in buffer_names]
    entries += [(f"after_step.{k}", f32_of(ref["params_after_step"][k])) for k in param_names]
    entries += [("loss_after_step", f32_of(ref["loss_after_step"]))]
    entries += [(f"after_second_forward.{k}", f32_of(ref["buffers_after_second_forward"][k]))
                for k in buffer_names]
    entries += [("eval_logits", f32_of(ref["eval_logits"]))]

    metadata = {
        "format": FORMAT,
        "generator": "tools/golden/resnet_golden.py",
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "config": json.dumps(cfg, sort_keys=True),
        "seed": str(SEED),
        "parameters": json.dumps(param_names),
        "buffers": json.dumps(buffer_names),
        "sgd": json.dumps(SGD, sort_keys=True),
        "init": init.__doc__.replace("\n", " "),
        "precision": ("weights are float32 and stored exactly; everything else is computed in "
                      "float64 from them (torch, 1 thread) and rounded to float32 once when stored"),
        "keys": ("<state_dict name>: initial weights and buffers; images [N, C, H, W]; targets [N] "
                 "int64; logits, loss: the training-mode forward; grad.<param>; after_forward.<buffer>: "
                 "buffers after that forward; after_step.<param>: parameters after one "
                 "torch.optim.SGD step (foreach=False); loss_after_step: a second training forward "
                 "(no grad); after_second_forward.<buffer>: buffers after it; eval_logits: eval mode "
                 "after that"),
        "fp32_max_abs_diff": json.dumps(diffs, sort_keys=True),
    }
    safetensors_io.write(args.out, entries, metadata)
    got, meta = safetensors_io.read(args.out)
    assert meta == metadata
    for k, t in entries:
        assert safetensors_io.tensor_bytes(got[k]) == safetensors_io.tensor_bytes(t), k
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, {len(entries)} tensors)")
    print(f"loss {float(ref['loss']):.9f}, after step {float(ref['loss_after_step']):.9f}")
    print("torch float32 vs float64 max |diff|:", json.dumps(diffs, sort_keys=True))


if __name__ == "__main__":
    main()
