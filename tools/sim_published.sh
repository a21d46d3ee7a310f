#!/usr/bin/env bash
# The simulator against published large-scale runs (issue 24): reruns every row
# of docs/simulator.md "Against published runs" (and its "HYBRID_SHARD at
# scale" example) and prints the tables. The published figures are written
# below with their sources; the predictions come from bazel-bin/sim/zs_simulate
# (built here with the Makefile's flags when it is missing; ZS_SIMULATE=path
# picks another binary).
#
#   tools/sim_published.sh              # the table (markdown), ~3 s of simulation
#   tools/sim_published.sh --commands   # also every zs_simulate command line
#
# Each prediction is zs_simulate with the shipped profile (sim/profiles/<name>.json);
# "fits" is zs_simulate's own verdict (peak reserved bytes per rank against the
# profile's memory.memory_bytes).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${ZS_SIMULATE:-bazel-bin/sim/zs_simulate}"
if [[ ! -x "$bin" ]]; then
  bazel build --disk_cache="$HOME/.cache/zeroshard/bazel-disk" --repo_env=ZEROSHARD_CUDA=0 //sim:zs_simulate >&2
fi

ZS_SIMULATE_BIN="$bin" exec python3 - "$@" <<'PYTHON'
import json, math, os, subprocess, sys

BIN = os.environ["ZS_SIMULATE_BIN"]
SHOW_COMMANDS = "--commands" in sys.argv[1:]
GIB = 2.0 ** 30

# ------------------------------------------------------------------ sources
SOURCES = {
    "TT-H100": "torchtitan docs/performance.md (commit eaea6f6a, versions of 2024-12-26), Tables 1 and 3: "
               "Llama 3.1 8B, FSDP2, bf16 params / f32 reduce, seq 8192, local batch 2, selective (op) AC; "
               "Grand Teton H100 96 GB HBM2e at 500 W, 400 Gb/s RDMA per GPU. Also arXiv 2410.06511 (TorchTitan).",
    "TT-A100": "torchtitan docs/performance.md (commit 04133643, 2024), 'Llama 3 performance numbers': FSDP2 on 64 A100 80GB, "
               "seq 8192, local batch 1; WPS = tokens/s per GPU.",
    "MOSAIC": "mosaicml/llm-foundry scripts/train/benchmarking/README.md, table 'H100 80GB BF16': MPT models, "
              "PyTorch FSDP (FSDP1) FULL_SHARD, mixed_precision PURE (bf16 params and reductions), seq 2048.",
    "OPT": "Zhang et al., OPT: Open Pre-trained Transformer Language Models, arXiv 2205.01068, section 2.4: OPT-175B on 992 "
           "A100 80GB, FSDP with Megatron-LM tensor parallelism, 'up to 147 TFLOP/s per GPU', fp16 weights, 2M-token batches of 2048.",
    "LLAMA3": "Llama Team, The Llama 3 Herd of Models, arXiv 2407.21783, Table 4: 405B on 16,384 H100 (700 W, 80 GB HBM3), "
              "TP 8 x PP 16 x DP 128, seq 8192, 16M-token batches: 400 TFLOP/s per GPU, 41% BF16 MFU (8,192 GPUs: 430, 43%).",
    "ZERO": "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion Parameter Models, arXiv 1910.02054, "
            "section 5: model states of ZeRO-3 (Pos+g+p) = (2 + 2 + K) Psi / Nd with K = 12 for mixed-precision Adam.",
    "DS": "DeepSpeed deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs (no offload): "
          "per GPU = 4 * largest_layer_params + 18 * total_params / total_gpus.",
    "FA": "Dao, FlashAttention-2, arXiv 2307.08691 (50-73% of the A100's peak); Shah et al., FlashAttention-3, "
          "arXiv 2407.08608 (FlashAttention-2 reaches about 35% of the H100's peak).",
}

# ------------------------------------------------------------------ rows
H100 = ["--profile=h100_dgx"]
A100 = ["--profile=a100_80g"]
BF16_F32 = ["--param_dtype=bf16", "--reduce_dtype=f32"]     # torchtitan's default MixedPrecisionPolicy
BF16_BF16 = ["--param_dtype=bf16", "--reduce_dtype=bf16"]   # Composer's PURE
AC = ["--activation_checkpointing=true"]

def gpt(vocab, layers, heads, width, block, bias):
    return ["--set", f"model.vocab_size={vocab}", "--set", f"model.n_layer={layers}", "--set", f"model.n_head={heads}",
            "--set", f"model.n_embd={width}", "--set", f"model.block_size={block}", "--set", f"model.bias={str(bias).lower()}"]

MPT7 = gpt(50368, 32, 32, 4096, 2048, False)
MPT13 = gpt(50368, 40, 40, 5120, 2048, False)
MPT70 = gpt(50368, 80, 64, 8192, 2048, False)
OPT175 = gpt(50272, 96, 96, 12288, 2048, True)
GPT3_LIKE = "sim/models/gpt3_175b_like.json"

# metric: tps (tokens/s per device), tflops (model TFLOP/s per device = MFU x dense peak), peak (GiB reserved)
ROWS = [
    # id, setup, source, published, metric, flags
    ("1a", "Llama 3.1 8B, 8 H100, batch 2 x 8192, eager; ours: full AC", "TT-H100", 5762, "tps",
     ["--model=llama-8b", "--world=8", "--micro_batch=2", "--seq_len=8192"] + H100 + BF16_F32 + AC),
    ("1b", "same; ours: no AC", "TT-H100", 5762, "tps",
     ["--model=llama-8b", "--world=8", "--micro_batch=2", "--seq_len=8192"] + H100 + BF16_F32),
    ("1c", "same, torch.compile; ours: full AC", "TT-H100", 6667, "tps",
     ["--model=llama-8b", "--world=8", "--micro_batch=2", "--seq_len=8192"] + H100 + BF16_F32 + AC),
    ("2",  "Llama 3.1 8B, 64 H100, batch 2 x 8192; ours: full AC (not published: 8 and 128 are)", None, None, "tps",
     ["--model=llama-8b", "--world=64", "--micro_batch=2", "--seq_len=8192"] + H100 + BF16_F32 + AC),
    ("3a", "Llama 3.1 8B, 128 H100, batch 2 x 8192, eager; ours: full AC", "TT-H100", 5605, "tps",
     ["--model=llama-8b", "--world=128", "--micro_batch=2", "--seq_len=8192"] + H100 + BF16_F32 + AC),
    ("3b", "same; ours: no AC", "TT-H100", 5605, "tps",
     ["--model=llama-8b", "--world=128", "--micro_batch=2", "--seq_len=8192"] + H100 + BF16_F32),
    ("4",  "Llama 3 8B, 64 A100, batch 1 x 8192; ours: full AC", "TT-A100", 2973, "tps",
     ["--model=llama-8b", "--world=64", "--micro_batch=1", "--seq_len=8192"] + A100 + BF16_F32 + AC),
    ("5",  "Llama 3 70B, 64 A100, batch 1 x 8192, full AC", "TT-A100", 331, "tps",
     ["--model=llama-70b", "--world=64", "--micro_batch=1", "--seq_len=8192"] + A100 + BF16_F32 + AC),
    ("6",  "MPT-7B, 8 H100, batch 6 x 2048, no AC", "MOSAIC", 10643, "tps",
     MPT7 + ["--world=8", "--micro_batch=6", "--seq_len=2048"] + H100 + BF16_BF16),
    ("7",  "MPT-13B, 8 H100, batch 2 x 2048, no AC", "MOSAIC", 4792, "tps",
     MPT13 + ["--world=8", "--micro_batch=2", "--seq_len=2048"] + H100 + BF16_BF16),
    ("8",  "MPT-13B, 64 H100, batch 2 x 2048, no AC", "MOSAIC", 4800, "tps",
     MPT13 + ["--world=64", "--micro_batch=2", "--seq_len=2048"] + H100 + BF16_BF16),
    ("9",  "MPT-70B, 64 H100, batch 8 x 2048, 4 micro-steps, full AC", "MOSAIC", 1039, "tps",
     MPT70 + ["--world=64", "--micro_batch=8", "--grad_accum_steps=4", "--seq_len=2048"] + H100 + BF16_BF16 + AC),
    ("10", "OPT-175B shape, 992 A100, batch 1 x 2048, fp16; theirs FSDP + TP 8, ours FSDP only, full AC", "OPT", 147,
     "tflops", OPT175 + ["--world=992", "--micro_batch=1", "--seq_len=2048", "--param_dtype=f16", "--reduce_dtype=f32"]
     + A100 + AC),
    ("11", "Llama 3.1 405B, 16384 H100, 8192 tokens per GPU; theirs TP 8 x PP 16 x DP 128, ours FSDP only, full AC",
     "LLAMA3", 400, "tflops",
     ["--model=llama-405b", "--world=16384", "--micro_batch=1", "--seq_len=8192"] + H100 + BF16_F32 + AC),
]

MEMORY_ROWS = [
    ("M1a", "Llama 3.1 8B, 8 H100, batch 2 x 8192, selective AC; ours: full AC", "TT-H100", 82.4, "peak", ROWS[0][5]),
    ("M1b", "same; ours: no AC", "TT-H100", 82.4, "peak", ROWS[1][5]),
    ("M2a", "Llama 3.1 8B, 128 H100, same; ours: full AC", "TT-H100", 67.0, "peak", ROWS[4][5]),
    ("M2b", "same; ours: no AC", "TT-H100", 67.0, "peak", ROWS[5][5]),
]

GPT3_FLAGS = ["--model=" + GPT3_LIKE, "--micro_batch=1", "--seq_len=2048"] + H100 + AC

# ------------------------------------------------------------------ running
PEAK = {}  # compute.peak_flops_bf16: the dense peak MFU is counted against
for prof in ("h100_dgx", "a100_80g"):
    with open(os.path.join("sim", "profiles", prof + ".json")) as f:
        PEAK[prof] = json.load(f)["compute"]["peak_flops_bf16"]

def profile_of(flags):
    for f in flags:
        if f.startswith("--profile="):
            return f.split("=", 1)[1]
    return "h100_dgx"

def command(flags):
    return " ".join([BIN] + [("'" + f + "'") if " " in f else f for f in flags] + ["--json"])

def simulate(flags):
    r = subprocess.run([BIN] + flags + ["--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("zs_simulate failed: " + command(flags) + "\n" + r.stderr)
    return json.loads(r.stdout)

def metric(res, kind, prof):
    if kind == "tps":
        return res["tokens_per_s_per_device"]
    if kind == "tflops":
        return res["mfu"] * PEAK[prof] / 1e12
    if kind == "peak":
        return res["peak_bytes_per_rank"] / GIB
    raise ValueError(kind)

def fmt(x, kind):
    if x is None:
        return "-"
    if kind == "peak":
        return f"{x:.1f} GiB"
    if kind == "tflops":
        return f"{x:.0f} TFLOP/s"
    return f"{x:,.0f}"

def ratio(p, pub):
    return "-" if p is None or pub is None else f"{p / pub:.2f}"

print("### Throughput (tokens/s per GPU unless marked; predicted / published)\n")
print("| # | setup | published | source | predicted | ratio | MFU (ours) | exposed comm | peak/rank |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
commands = []
for rid, setup, src, pub, kind, flags in ROWS:
    prof = profile_of(flags)
    a = simulate(flags)
    pa = metric(a, kind, prof)
    fit = "" if a["fits"] else f" (does not fit {a['memory_capacity_bytes'] / GIB:.1f} GiB)"
    print(f"| {rid} | {setup} | {fmt(pub, kind)} | {src or '-'} | {fmt(pa, kind)} | {ratio(pa, pub)} | "
          f"{100 * a['mfu']:.1f}% | {100 * a['exposed_comm_fraction']:.1f}% | "
          f"{a['peak_bytes_per_rank'] / GIB:.1f} GiB{fit} |")
    commands.append((rid, command(flags)))

print("\n### Memory (peak reserved per rank)\n")
print("| # | setup | published | source | predicted | ratio |")
print("| --- | --- | --- | --- | --- | --- |")
peaks = {}
for rid, setup, src, pub, kind, flags in MEMORY_ROWS:
    a = simulate(flags)
    pa = peaks[rid] = metric(a, kind, profile_of(flags))
    print(f"| {rid} | {setup} | {fmt(pub, kind)} | {src} | {fmt(pa, kind)} | {ratio(pa, pub)} |")
    commands.append((rid, command(flags)))
# What 8 -> 128 ranks saves is the model-state shard, 16 Psi (1/8 - 1/128), whatever the activations.
for ac, a8, a128 in (("full AC", "M1a", "M2a"), ("no AC", "M1b", "M2b")):
    d = peaks[a8] - peaks[a128]
    print(f"| M2-M1 | peak at 8 ranks minus peak at 128; ours: {ac} | {82.4 - 67.0:.1f} GiB | TT-H100 | "
          f"{d:.1f} GiB | {d / (82.4 - 67.0):.2f} |")

# ------------------------------------------------------------------ 175B-class memory fit
print("\n### GPT-3 175B-class (" + GPT3_LIKE + "), FULL_SHARD on H100 80 GB, batch 1 x 2048, full AC\n")
w64 = simulate(GPT3_FLAGS + ["--world=64"] + BF16_F32)
psi = w64["parameters"]
m = w64["memory"]
state = m["parameters"] + m["gradients"] + m["optimizer_state"]
zero = 16 * psi / 64
largest = 50257 * 12288  # the (tied) embedding: the largest module of this model
ds = 4 * largest + 18 * psi / 64
print(f"Psi = {psi:,} parameters (largest module: the tied embedding, {largest:,}).\n")
print("| # | quantity | formula (source) | predicted | ratio |")
print("| --- | --- | --- | --- | --- |")
print(f"| M3 | model states per rank at N = 64 | ZeRO 16 Psi / N = {zero / 1e9:.3f} GB (ZERO) | "
      f"{state / 1e9:.3f} GB | {state / zero:.4f} |")
print(f"| M4 | same, DeepSpeed's estimator | 4 L + 18 Psi / N = {ds / 1e9:.3f} GB (DS) | {state / 1e9:.3f} GB | "
      f"{state / ds:.3f} |")
commands.append(("M3-M4", command(GPT3_FLAGS + ["--world=64"] + BF16_F32)))

def min_world(dtype_flags):
    lo, hi = 1, 4096  # hi fits (model states ~ 0.7 GB at 4096); find the smallest world that does
    def fits(w):
        return simulate(GPT3_FLAGS + [f"--world={w}"] + dtype_flags)["fits"]
    assert fits(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo

FITS = w64["memory_capacity_bytes"]  # the profile's memory.memory_bytes (81,559 MiB on h100_dgx)
formula_min = math.ceil(16 * psi / FITS)
ds_min = math.ceil(18 * psi / (FITS - 4 * largest))
for rid, label, dt in (("M5a", "reduce f32", BF16_F32), ("M5b", "reduce bf16", BF16_BF16)):
    w = min_world(dt)
    print(f"| {rid} | smallest world whose peak fits {FITS / 2**20:,.0f} MiB ({label}) | ZeRO 16 Psi / N: N >= {formula_min}; "
          f"DeepSpeed: N >= {ds_min} | {w} | {w / formula_min:.2f} |")
    commands.append((rid, command(GPT3_FLAGS + [f"--world={w}"] + dt) + f"   # and --world={w - 1} does not fit"))

# ------------------------------------------------------------------ HYBRID_SHARD at scale
print("\n### HYBRID_SHARD at scale: Llama 3 8B (row 2's job), FULL_SHARD against HYBRID_SHARD (groups of 8)\n")
print("| world | strategy | step time | tokens/s/GPU | exposed comm | peak/rank |")
print("| --- | --- | --- | --- | --- | --- |")
HSDP = ["--sharding_strategy=HYBRID_SHARD", "--hybrid_shard_size=8"]
for w in (64, 512):
    for label, extra in (("FULL_SHARD", []), ("HYBRID_SHARD, 8", HSDP)):
        # row 2: llama-8b, batch 2 x 8192, bf16 / f32, full AC
        flags = [f for f in ROWS[3][5] if not f.startswith("--world=")] + [f"--world={w}"] + extra
        r = simulate(flags)
        step = 1e3 * r["step_time_s"]
        fit = "" if r["fits"] else " (does not fit)"
        print(f"| {w} | {label} | {step:,.1f} ms | {r['tokens_per_s_per_device']:,.0f} | "
              f"{step * r['exposed_comm_fraction']:.1f} ms ({100 * r['exposed_comm_fraction']:.1f}%) | "
              f"{r['peak_bytes_per_rank'] / GIB:.1f} GiB{fit} |")
        commands.append((f"HSDP {w} {label}", command(flags)))

print("\nSources:\n")
for k, v in SOURCES.items():
    print(f"- {k}: {v}")

if SHOW_COMMANDS:
    print("\nCommands:\n")
    for rid, c in commands:
        print(f"- {rid}: `{c}`")
PYTHON
