#!/usr/bin/env python3
"""Writes the GPT golden file that zeroshard's parity tests compare against.

    /usr/bin/python3 tools/golden/gpt_golden.py --out tests/testdata/gpt_golden.safetensors

A tiny nanoGPT (same module names, parameter names and layouts as nanoGPT's model.py,
bias=True, no dropout) built from a fixed seed; one fixed batch; its logits, loss and
every gradient; then 5 AdamW steps on that batch. Everything is computed in float64
from float32 weights and stored as float32 (see tools/golden/README.md for every key,
the exact optimizer update and the tolerances).

Needs Debian's python3-torch (1.13); the tests that read the file need no torch. The
output is deterministic: running the script again gives the same bytes.
"""

import argparse
import json
import math
import os
import platform
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

FORMAT = "zeroshard-gpt-golden/1"

CONFIG = {
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 16,
    "block_size": 8,
    "vocab_size": 32,
    "batch_size": 2,
    "seq_len": 8,   # T: the batch is [batch_size, seq_len]; seq_len <= block_size
    "bias": True,
    "dropout": 0.0,
    "layer_norm_eps": 1e-5,
}
SEED = 1337
INIT_STD = 0.02
OPTIMIZER = {
    "lr": 1e-3,
    "betas": [0.9, 0.95],
    "eps": 1e-8,
    "weight_decay": 0.1,
    "steps": 5,
}


# ---------------------------------------------------------------- the model (nanoGPT)

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_attn = nn.Linear(c, 3 * c, bias=cfg["bias"])   # weight [3C, C]: q, k, v rows
        self.c_proj = nn.Linear(c, c, bias=cfg["bias"])       # weight [C, C]
        self.n_head = cfg["n_head"]
        self.n_embd = c

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                                     # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_fc = nn.Linear(c, 4 * c, bias=cfg["bias"])     # weight [4C, C]
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c, c, bias=cfg["bias"])   # weight [C, 4C]

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, eps = cfg["n_embd"], cfg["layer_norm_eps"]
        self.ln_1 = nn.LayerNorm(c, eps=eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(c, eps=eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        c = cfg["n_embd"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab_size"], c),
            wpe=nn.Embedding(cfg["block_size"], c),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
            ln_f=nn.LayerNorm(c, eps=cfg["layer_norm_eps"]),
        ))
        self.lm_head = nn.Linear(c, cfg["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT does

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def init_gpt2(model, generator):
    """GPT-2 / nanoGPT initialisation, drawn in float32 from `generator`.

    Parameters in named_parameters() order (the tied weight once, as
    transformer.wte.weight): every 2-D weight normal(0, 0.02), except the residual
    projections (*.c_proj.weight) normal(0, 0.02 / sqrt(2 * n_layer)); biases 0;
    LayerNorm weight 1, bias 0.
    """
    n_layer = model.cfg["n_layer"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = INIT_STD / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else INIT_STD
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * std)
            elif "ln_" in name and name.endswith(".weight"):
                p.fill_(1.0)
            else:
                p.zero_()


def perturb_1d(model, generator):
    """Makes every bias and LayerNorm parameter matter (GPT-2 init leaves them 0 and 1,
    so a model that forgot to add a bias would still match the logits): in
    named_parameters() order, every 1-D parameter gets normal(0, 0.02) added."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * 0.02)


def make_optimizer(model):
    """nanoGPT's configure_optimizers: 2-D (and higher) parameters decay, others don't."""
    params = dict(model.named_parameters())  # the tied weight once
    decay = [p for _, p in params.items() if p.dim() >= 2]
    no_decay = [p for _, p in params.items() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": OPTIMIZER["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=OPTIMIZER["lr"], betas=tuple(OPTIMIZER["betas"]),
                             eps=OPTIMIZER["eps"], foreach=False)


def run(model, idx, targets):
    """Forward + backward, then 5 AdamW steps. Returns a dict of results (model dtype)."""
    model.zero_grad(set_to_none=True)
    logits, loss = model(idx, targets)
    loss.backward()
    out = {"logits": logits.detach().clone(), "loss": loss.detach().clone(),
           "grads": {n: p.grad.detach().clone() for n, p in model.named_parameters()}}
    opt = make_optimizer(model)
    losses = []
    for _ in range(OPTIMIZER["steps"]):
        opt.zero_grad(set_to_none=True)
        _, step_loss = model(idx, targets)
        losses.append(step_loss.detach().clone())  # the loss before this step's update
        step_loss.backward()
        opt.step()
    out["adamw_losses"] = torch.stack(losses)
    out["adamw_final"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


def max_abs_diff(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/testdata/gpt_golden.safetensors")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    cfg = CONFIG
    gen = torch.Generator().manual_seed(SEED)
    model32 = GPT(cfg)
    init_gpt2(model32, gen)
    perturb_1d(model32, gen)
    B, T, V = cfg["batch_size"], cfg["seq_len"], cfg["vocab_size"]
    tokens = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    idx, targets = tokens[:, :T].contiguous(), tokens[:, 1:].contiguous()

    # The initial float32 weights, exactly as stored (state_dict order, tied under both names).
    weights = {n: t.detach().clone() for n, t in model32.state_dict().items()}

    # The reference: the same weights in float64.
    model64 = GPT(cfg).double()
    model64.load_state_dict({n: t.double() for n, t in weights.items()})
    ref = run(model64, idx, targets)
    # For the tolerances: torch's own float32 run against the float64 reference.
    f32 = run(model32, idx, targets)

    param_names = [n for n, _ in model64.named_parameters()]
    diffs = {
        "logits": max_abs_diff(f32["logits"], ref["logits"]),
        "loss": max_abs_diff(f32["loss"], ref["loss"]),
        "grads": max(max_abs_diff(f32["grads"][n], ref["grads"][n]) for n in param_names),
        "grads_relative": max(max_abs_diff(f32["grads"][n], ref["grads"][n]) /
                              float(ref["grads"][n].abs().max()) for n in param_names),
        "adamw_losses": max_abs_diff(f32["adamw_losses"], ref["adamw_losses"]),
        "adamw_final": max(max_abs_diff(f32["adamw_final"][n], ref["adamw_final"][n])
                           for n in param_names),
    }

    def f32_of(t):
        return t.to(torch.float32)  # float64 -> float32, round to nearest-even

    entries = []
    for n, t in weights.items():
        entries.append((n, t))
    entries.append(("input_ids", idx))
    entries.append(("targets", targets))
    entries.append(("logits", f32_of(ref["logits"])))
    entries.append(("loss", f32_of(ref["loss"])))
    for n in param_names:
        entries.append((f"grad.{n}", f32_of(ref["grads"][n])))
    entries.append(("adamw_losses", f32_of(ref["adamw_losses"])))
    for n in param_names:
        entries.append((f"adamw_final.{n}", f32_of(ref["adamw_final"][n])))

    b1, b2 = OPTIMIZER["betas"]
    metadata = {
        "format": FORMAT,
        "generator": "tools/golden/gpt_golden.py",
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "config": json.dumps(cfg, sort_keys=True),
        "seed": str(SEED),
        "parameters": json.dumps(param_names),
        "init": ("torch.Generator().manual_seed(seed); in named_parameters() order (tied weight "
                 "once, as transformer.wte.weight): 2-D weights torch.randn(shape) * 0.02, "
                 "*.c_proj.weight * 0.02/sqrt(2*n_layer); biases 0, LayerNorm weights 1; then, "
                 "in the same order, every 1-D parameter += torch.randn(shape) * 0.02 (so biases "
                 "and LayerNorm parameters are not trivial); then tokens = torch.randint(0, "
                 "vocab_size, (batch_size, seq_len + 1)); input_ids = tokens[:, :-1], "
                 "targets = tokens[:, 1:]"),
        "model": ("nanoGPT (bias=True, dropout 0): x = wte[idx] + wpe[0..T-1]; per block "
                  "x += attn(ln_1(x)); x += mlp(ln_2(x)); attn: q, k, v = c_attn(x).split(C) "
                  "along the output dim, heads view(B, T, n_head, C/n_head).transpose(1, 2), "
                  "softmax(q k^T / sqrt(C/n_head), causal mask) v, heads merged back, c_proj; "
                  "mlp: c_proj(gelu_tanh(c_fc(x))); logits = ln_f(x) @ wte^T (lm_head tied); "
                  "LayerNorm eps 1e-5; loss = mean cross-entropy over all B*T positions"),
        "precision": ("weights are float32 and stored exactly; everything else is computed in "
                      "float64 from them (torch, 1 thread) and rounded to float32 once when stored"),
        "optimizer": (f"torch.optim.AdamW(lr={OPTIMIZER['lr']}, betas=({b1}, {b2}), "
                      f"eps={OPTIMIZER['eps']}, foreach=False), nanoGPT param groups: "
                      f"weight_decay {OPTIMIZER['weight_decay']} for parameters with dim >= 2 "
                      "(wte (tied, once), wpe, every Linear weight), 0 for the rest (biases, "
                      "LayerNorm). Step t = 1..5 on the same batch: p *= 1 - lr*wd; "
                      "m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
                      "p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)"),
        "keys": ("<param name>: initial weights (float32; the tied weight under both "
                 "transformer.wte.weight and lm_head.weight); input_ids, targets: int64 "
                 "[batch_size, seq_len]; logits: [batch_size, seq_len, vocab_size]; loss: [] "
                 "(0-d); grad.<param name>: d loss / d param for each of `parameters` (the tied "
                 "weight's summed gradient under grad.transformer.wte.weight only); "
                 "adamw_losses: [5], adamw_losses[i] = the loss before update i+1 (so "
                 "adamw_losses[0] is the loss above, before rounding); adamw_final.<param name>: "
                 "the parameters after the 5 updates"),
        "fp32_max_abs_diff": json.dumps(diffs, sort_keys=True),
    }
    safetensors_io.write(args.out, entries, metadata)

    # Read back and compare.
    got, meta = safetensors_io.read(args.out)
    assert meta == metadata
    for n, t in entries:
        assert safetensors_io.tensor_bytes(got[n]) == safetensors_io.tensor_bytes(t), n
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, {len(entries)} tensors)")
    print(f"loss {float(ref['loss']):.9f}; adamw_losses {[round(float(x), 9) for x in ref['adamw_losses']]}")
    print("torch float32 vs float64 max |diff|:", json.dumps(diffs, sort_keys=True))


if __name__ == "__main__":
    main()
