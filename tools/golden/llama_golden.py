#!/usr/bin/env python3
"""Writes the Llama golden files that zeroshard's parity tests compare against.

    /usr/bin/python3 tools/golden/llama_golden.py --out_dir tests/testdata
    /usr/bin/python3 tools/golden/llama_golden.py check --dir SAVED_DIR   # a folder train_gpt saved

Two tiny Llamas with Hugging Face's module names, parameter layouts and math
(transformers' modeling_llama.py, written out here because the oracle machine has
torch but not transformers), built from a fixed seed:

  llama_golden_gqa.safetensors   untied embeddings, grouped-query attention (4 query
                                 heads, 2 key/value heads), head_dim 8 != hidden/heads,
                                 Llama 3 rope scaling (all three frequency bands hit)
  llama_golden_tied.safetensors  tied embeddings, multi-query attention (1 kv head)

Each holds the initial float32 weights, one batch, its logits, loss and every gradient,
then 5 AdamW steps; everything computed in float64 from the float32 weights and stored
as float32. Its metadata "config" is the model's config.json text.

It also writes llama_hf_gqa/: the GQA model's initial weights as a Hugging Face model
folder (config.json, model.safetensors.index.json and two shards, as save_pretrained
writes them with a small max_shard_size), for the init_from tests.

Needs Debian's python3-torch (1.13); the tests that read the files need no torch. The
tensors are deterministic (the same bytes on every run: float64 on one thread); only the
metadata's fp32_max_abs_diff, torch's own float32 run, depends on the BLAS torch loads
(the reference BLAS or OpenBLAS give different last bits).
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

FORMAT = "zeroshard-llama-golden/1"
SEED = 20261126
BATCH, SEQ_LEN = 2, 8
OPTIMIZER = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "steps": 5}

# Hugging Face LlamaConfig fields (config.json).
CONFIGS = {
    "gqa": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "vocab_size": 32, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        # head_dim 8: inv_freq 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283) against
        # the bands 64/4 = 16 and 64/1 = 64: one kept, one smoothed, two divided by 8.
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "initializer_range": 0.02, "torch_dtype": "float32",
    },
    "tied": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "vocab_size": 32, "hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
        "rope_scaling": None, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
        "initializer_range": 0.02, "torch_dtype": "float32",
    },
}


# ---------------------------------------------------------------- the model (modeling_llama.py)

def llama3_inv_freq(inv_freq, s):
    """transformers' _compute_llama3_parameters."""
    low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s["factor"], inv_freq)
    smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(cfg, T, dtype):
    """cos, sin [T, D]: emb = cat(freqs, freqs), freqs[p, i] = p * inv_freq[i]. In float64
    here (transformers computes the angles in float32; the difference is far below the
    tests' tolerances)."""
    D = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).double() / D))
    if cfg.get("rope_scaling"):
        inv_freq = llama3_inv_freq(inv_freq, cfg["rope_scaling"])
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """[B, K, T, D] -> [B, K * n_rep, T, D]: kv head j serves query heads j*n_rep .. j*n_rep+n_rep-1."""
    B, K, T, D = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(B, K, n_rep, T, D).reshape(B, K * n_rep, T, D)


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # transformers upcasts to float32 here; the reference runs in the model's dtype.
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["hidden_size"]
        self.H, self.K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.D = cfg.get("head_dim") or C // self.H
        self.q_proj = nn.Linear(C, self.H * self.D, bias=cfg["attention_bias"])
        self.k_proj = nn.Linear(C, self.K * self.D, bias=cfg["attention_bias"])
        self.v_proj = nn.Linear(C, self.K * self.D, bias=cfg["attention_bias"])
        self.o_proj = nn.Linear(self.H * self.D, C, bias=cfg["attention_bias"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.K, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.K, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin          # apply_rotary_pos_emb (cos, sin [T, D])
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.H // self.K)
        v = repeat_kv(v, self.H // self.K)
        att = (q @ k.transpose(2, 3)) * (self.D ** -0.5)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.H * self.D)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, F_ = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(C, F_, bias=cfg["mlp_bias"])
        self.up_proj = nn.Linear(C, F_, bias=cfg["mlp_bias"])
        self.down_proj = nn.Linear(F_, C, bias=cfg["mlp_bias"])

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.model.embed_tokens(idx)
        cos, sin = rope_cos_sin(self.cfg, T, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.model.norm(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def init_llama(model, generator):
    """transformers' _init_weights, drawn in float32 from `generator` in named_parameters()
    order (a tied weight once): Linear and Embedding weights normal(0, initializer_range),
    RMSNorm weights 1; then every 1-D parameter += normal(0, 0.02), so a model that
    ignored the RMSNorm weights would not match."""
    std = model.cfg["initializer_range"]
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * std)
            else:
                p.fill_(1.0)
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * 0.02)


def make_optimizer(model):
    """2-D (and higher) parameters decay, others don't (as the GPT golden)."""
    params = dict(model.named_parameters())
    decay = [p for _, p in params.items() if p.dim() >= 2]
    no_decay = [p for _, p in params.items() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": OPTIMIZER["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=OPTIMIZER["lr"], betas=tuple(OPTIMIZER["betas"]),
                             eps=OPTIMIZER["eps"], foreach=False)


def run(model, idx, targets):
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
        losses.append(step_loss.detach().clone())
        step_loss.backward()
        opt.step()
    out["adamw_losses"] = torch.stack(losses)
    out["adamw_final"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


def max_abs_diff(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def config_text(cfg):
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def write_hf_folder(path, cfg, weights, split_after):
    """save_pretrained's layout: config.json, model-0000i-of-00002.safetensors (the
    tensors in state_dict order, a new file after `split_after` tensors), and the index
    (metadata.total_size = the tensors' bytes, weight_map name -> file)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write(config_text(cfg))
    items = list(weights.items())
    files = [items[:split_after], items[split_after:]]
    weight_map, total = {}, 0
    for i, part in enumerate(files):
        name = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        safetensors_io.write(os.path.join(path, name), part, {"format": "pt"})
        for n, t in part:
            weight_map[n] = name
            total += t.numel() * t.element_size()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def make_golden(key, out_dir, hf_dir=None):
    cfg = CONFIGS[key]
    gen = torch.Generator().manual_seed(SEED)
    model32 = LlamaForCausalLM(cfg)
    init_llama(model32, gen)
    V = cfg["vocab_size"]
    tokens = torch.randint(0, V, (BATCH, SEQ_LEN + 1), generator=gen, dtype=torch.int64)
    idx, targets = tokens[:, :SEQ_LEN].contiguous(), tokens[:, 1:].contiguous()
    # state_dict(): a tied weight under both names.
    weights = {n: t.detach().clone() for n, t in model32.state_dict().items()}
    model64 = LlamaForCausalLM(cfg).double()
    model64.load_state_dict({n: t.double() for n, t in weights.items()})
    ref = run(model64, idx, targets)
    f32 = run(model32, idx, targets)
    param_names = [n for n, _ in model64.named_parameters()]
    diffs = {
        "logits": max_abs_diff(f32["logits"], ref["logits"]),
        "loss": max_abs_diff(f32["loss"], ref["loss"]),
        "grads": max(max_abs_diff(f32["grads"][n], ref["grads"][n]) for n in param_names),
        "adamw_losses": max_abs_diff(f32["adamw_losses"], ref["adamw_losses"]),
        "adamw_final": max(max_abs_diff(f32["adamw_final"][n], ref["adamw_final"][n]) for n in param_names),
    }
    f32_of = lambda t: t.to(torch.float32)  # noqa: E731
    entries = list(weights.items())
    entries += [("input_ids", idx), ("targets", targets), ("logits", f32_of(ref["logits"])),
                ("loss", f32_of(ref["loss"]))]
    entries += [(f"grad.{n}", f32_of(ref["grads"][n])) for n in param_names]
    entries.append(("adamw_losses", f32_of(ref["adamw_losses"])))
    entries += [(f"adamw_final.{n}", f32_of(ref["adamw_final"][n])) for n in param_names]
    b1, b2 = OPTIMIZER["betas"]
    metadata = {
        "format": FORMAT,
        "generator": "tools/golden/llama_golden.py",
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "config": config_text(cfg),
        "seed": str(SEED),
        "parameters": json.dumps(param_names),
        "batch": json.dumps({"batch_size": BATCH, "seq_len": SEQ_LEN}),
        "init": ("torch.Generator().manual_seed(seed); named_parameters() order (a tied weight once): "
                 "2-D weights torch.randn(shape) * initializer_range, 1-D ones; then every 1-D "
                 "parameter += torch.randn(shape) * 0.02; tokens = torch.randint(0, vocab_size, "
                 "(batch, seq_len + 1)), input_ids = tokens[:, :-1], targets = tokens[:, 1:]"),
        "precision": ("weights are float32 and stored exactly; everything else is computed in float64 "
                      "from them (torch, 1 thread), rotary tables included, and rounded to float32 once"),
        "optimizer": (f"torch.optim.AdamW(lr={OPTIMIZER['lr']}, betas=({b1}, {b2}), eps={OPTIMIZER['eps']}, "
                      f"foreach=False), weight_decay {OPTIMIZER['weight_decay']} for dim >= 2, 0 for the "
                      "rest; 5 steps on the same batch"),
        "keys": ("<param name>: initial weights (a tied weight under both names); input_ids, targets "
                 "int64 [batch, seq_len]; logits [batch, seq_len, vocab]; loss []; grad.<param>: for each "
                 "of `parameters`; adamw_losses [5] (the loss before each update); adamw_final.<param>"),
        "fp32_max_abs_diff": json.dumps(diffs, sort_keys=True),
    }
    out = os.path.join(out_dir, f"llama_golden_{key}.safetensors")
    safetensors_io.write(out, entries, metadata)
    got, meta = safetensors_io.read(out)
    assert meta == metadata
    for n, t in entries:
        assert safetensors_io.tensor_bytes(got[n]) == safetensors_io.tensor_bytes(t), n
    print(f"wrote {out} ({os.path.getsize(out)} bytes); loss {float(ref['loss']):.9f}")
    print("  torch float32 vs float64 max |diff|:", json.dumps(diffs, sort_keys=True))
    if hf_dir is not None:
        # As save_pretrained writes a model: parameters once (tied ones under the first name).
        hf_weights = {n: weights[n] for n in param_names}
        write_hf_folder(hf_dir, cfg, hf_weights, split_after=len(hf_weights) // 2)
        print(f"wrote {hf_dir}/")


def read_hf_folder(path):
    """A Hugging Face folder as transformers reads it: config.json, then model.safetensors
    or the index's weight_map and the files it names."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        tensors, _ = safetensors_io.read(single)
        return cfg, tensors
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for name in sorted(set(index["weight_map"].values())):
        got, meta = safetensors_io.read(os.path.join(path, name))
        assert meta.get("format") == "pt", (name, meta)
        tensors.update(got)
    assert set(tensors) == set(index["weight_map"]), "the index and the files disagree"
    return cfg, tensors


def check(folder, golden):
    """Loads a folder zeroshard saved (train_gpt --model=llama --save=DIR) into the PyTorch
    transcription of LlamaForCausalLM with load_state_dict(strict=True), restoring a tied
    lm_head.weight as transformers' tie_weights() does, and compares its logits on the
    golden batch with the golden ones (the folder must hold the golden initial weights,
    e.g. saved after --lr=0 steps from llama_hf_gqa/)."""
    cfg, tensors = read_hf_folder(folder)
    model = LlamaForCausalLM(cfg).double()
    state = {n: t.double() for n, t in tensors.items()}
    if cfg.get("tie_word_embeddings") and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    want, _ = safetensors_io.read(golden)
    with torch.no_grad():
        logits, loss = model(want["input_ids"], want["targets"])
    diff = max_abs_diff(logits, want["logits"])
    print(f"{folder}: {len(tensors)} tensors loaded strictly; logits max |diff| vs {golden}: {diff:.3g}; "
          f"loss {float(loss):.9f} (golden {float(want['loss']):.9f})")
    # The golden logits are the float64 logits rounded to float32 (half an ulp of ~1).
    assert diff < 1e-6, diff


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", default="write", choices=["write", "check"])
    parser.add_argument("--out_dir", default="tests/testdata")
    parser.add_argument("--dir", help="check: the Hugging Face folder zeroshard saved")
    parser.add_argument("--golden", default="tests/testdata/llama_golden_gqa.safetensors")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.command == "check":
        check(args.dir, args.golden)
        return
    make_golden("gqa", args.out_dir, hf_dir=os.path.join(args.out_dir, "llama_hf_gqa"))
    make_golden("tied", args.out_dir)


if __name__ == "__main__":
    main()
