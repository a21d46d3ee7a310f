#!/usr/bin/env python3
"""The GPT-2 training step of bench/cuda_bench_step.cc in PyTorch, for the GPU record.

Same model (GPT-2 small: 12 layers, 12 heads, width 768, context T, vocabulary 50304,
biases, tied embedding, GELU tanh, dropout 0), same batch, bf16 compute with fp32
weights and AdamW (torch.autocast; fused AdamW), on one GPU without a process group.
Run eagerly and under torch.compile. An outside baseline only: nothing in the project
imports it. Prints one JSON object per mode on a line starting with "RESULT ".

  python3 torch_gpt_step.py [--mode=eager|compile|both] [--batch=8] [--T=1024]
"""
import argparse, json, math, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def run(mode, args):
    torch.manual_seed(1337)
    dev = "cuda"
    V, T, L, H, C, B = 50304, args.T, 12, 12, 768, args.batch
    model = GPT(V, T, L, H, C).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    first = step().item()
    warm_s = time.time() - t0
    for _ in range(args.warmup - 1):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.steps):
        loss = step()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / args.steps
    tokens_per_s = B * T / (ms / 1e3)
    flops_per_token = 6 * n_params + 12 * L * C * T  # llm.c's count, as bench/cuda_bench_step.cc
    mfu = flops_per_token * tokens_per_s / 989e12
    return {
        "mode": mode, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "batch": B, "T": T, "params": n_params, "first_loss": first, "last_loss": loss.item(),
        "ms_per_step": ms, "tokens_per_s": tokens_per_s, "mfu_vs_989": mfu,
        "first_step_s": warm_s, "peak_mem_bytes": torch.cuda.max_memory_allocated(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="both")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpt_step.py: torch sees no GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    modes = ["eager", "compile"] if args.mode == "both" else [args.mode]
    for m in modes:
        r = run(m, args)
        print("RESULT " + json.dumps(r), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return 0


if __name__ == "__main__":
    sys.exit(main())
