// The peer of //bench:step_bench: one GPT (or Llama) training step run by Debian's
// libtorch (1.13, C++ API, CPU, fp32), timed.
//
// --model=gpt (the default) is nanoGPT's model (the same as autograd/nn/gpt.h and
// tools/golden/gpt_golden.py): learned token and position embeddings, pre-LayerNorm
// blocks (eps 1e-5, with biases), causal multi-head self-attention (c_attn [3C, C] split
// into q, k, v; the explicit masked-softmax path), a 4C GELU(tanh) MLP, final LayerNorm,
// lm_head tied to transformer.wte.weight (one tensor), dropout 0, GPT-2 init.
//
// --model=llama is Hugging Face's LlamaForCausalLM (transformers' modeling_llama.py, as
// tools/golden/llama_golden.py writes it out): embed_tokens, pre-RMSNorm layers with
// rotary (rotate-half) grouped-query causal attention and a SwiGLU MLP, no biases, final
// RMSNorm, lm_head tied or not; optional Llama 3 rope scaling (golden files only).
//
// One step is
//   zero_grad, forward, mean cross-entropy, backward, AdamW
// (lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D parameters only, 0 on
// the rest: nanoGPT's groups).
//
// Built only where libtorch is installed (`make bench-peers`); zeroshard never links it.
// Run at its best: see docs/peers.md (OpenBLAS with OPENBLAS_CORETYPE=SkylakeX, threads).
// Kept in one file (issue 19): a peer is one self-contained program, built only against
// libtorch, whose model, optimizers and timing are read side by side.
//
//   torch_gpt_step --n_layer=4 --n_head=4 --n_embd=256 --block_size=128 --vocab_size=256
//                  --batch_size=8 --steps=20 --warmup=3 --threads=1
//   torch_gpt_step --model=llama --n_layer=4 --n_head=4 --n_kv_head=2 --n_embd=256
//                  --block_size=128 --vocab_size=256 --batch_size=8 --threads=1
//   torch_gpt_step --check_golden=tests/testdata/gpt_golden.safetensors
//   torch_gpt_step --check_golden=tests/testdata/llama_golden_gqa.safetensors
//
// Prints one machine-readable line per run:
//   peer=libtorch ms_per_step=... tokens_per_s=... ... config=n_layer=4,...
// (a Llama run adds model=llama before config=, and its fields to config=)
// plus the first and final loss on the (repeated) batch: loss_first > loss_final shows
// that it trains.

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

// ------------------------------------------------------------------------------ flags

struct Flags {
  std::string model;     // gpt (the default) | llama; with --check_golden the file says
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 256;
  int64_t block_size = 128;
  int64_t vocab_size = 256;
  int64_t batch_size = 8;
  int64_t steps = 20;
  int64_t warmup = 3;
  int threads = 0;       // torch intra-op threads; 0 = leave torch's default
  int blas_threads = 0;  // OpenBLAS threads via openblas_set_num_threads; 0 = leave as is
  double lr = 6e-4;
  double weight_decay = 0.1;
  uint64_t seed = 1337;
  std::string optim = "flat";    // flat | foreach | torch
  std::string attn = "manual";   // manual | sdpa
  std::string data = "repeat";   // repeat | random
  std::string zero_grad = "auto";  // auto | none | zero
  std::string check_golden;      // path of tests/testdata/gpt_golden.safetensors
  std::string profile;           // chrome trace of the timed steps (torch's legacy profiler)
  // --model=llama only (Hugging Face's LlamaConfig names):
  int64_t n_kv_head = 0;          // num_key_value_heads; 0 = n_head
  int64_t head_dim = 0;           // 0 = n_embd / n_head
  int64_t intermediate_size = 0;  // 0 = 8/3 n_embd rounded up to a multiple of 64
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  std::vector<std::string> llama_flags_given;  // to refuse them with --model=gpt
};

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr,
               "torch_gpt_step: %s\n"
               "flags: --n_layer --n_head --n_embd --block_size --vocab_size --batch_size\n"
               "       --steps --warmup --threads --blas_threads --lr --weight_decay --seed\n"
               "       --optim=flat|foreach|torch --attn=manual|sdpa --data=repeat|random\n"
               "       --zero_grad=auto|none|zero --check_golden=PATH --profile=TRACE.json\n"
               "       --model=gpt|llama; llama: --n_kv_head --head_dim --intermediate_size\n"
               "       --rope_theta --rms_norm_eps --tie_word_embeddings[=true|false]\n",
               msg.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) Usage("unexpected argument " + a);
    std::string key = a.substr(2), val;
    auto eq = key.find('=');
    if (eq != std::string::npos) {
      val = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (key == "tie_word_embeddings") {
      val = "true";  // a bare boolean flag
    } else if (i + 1 < argc) {
      val = argv[++i];
    } else {
      Usage("missing value for --" + key);
    }
    auto i64 = [&](int64_t& dst) {
      char* end = nullptr;
      dst = std::strtoll(val.c_str(), &end, 10);
      if (end == val.c_str() || *end) Usage("bad integer for --" + key + ": " + val);
    };
    auto dbl = [&](double& dst) {
      char* end = nullptr;
      dst = std::strtod(val.c_str(), &end);
      if (end == val.c_str() || *end) Usage("bad number for --" + key + ": " + val);
    };
    int64_t tmp = 0;
    if (key == "n_layer") i64(f.n_layer);
    else if (key == "n_head") i64(f.n_head);
    else if (key == "n_embd") i64(f.n_embd);
    else if (key == "block_size") i64(f.block_size);
    else if (key == "vocab_size") i64(f.vocab_size);
    else if (key == "batch_size") i64(f.batch_size);
    else if (key == "steps") i64(f.steps);
    else if (key == "warmup") i64(f.warmup);
    else if (key == "threads") { i64(tmp); f.threads = static_cast<int>(tmp); }
    else if (key == "blas_threads") { i64(tmp); f.blas_threads = static_cast<int>(tmp); }
    else if (key == "seed") { i64(tmp); f.seed = static_cast<uint64_t>(tmp); }
    else if (key == "lr") dbl(f.lr);
    else if (key == "weight_decay") dbl(f.weight_decay);
    else if (key == "optim") f.optim = val;
    else if (key == "attn") f.attn = val;
    else if (key == "data") f.data = val;
    else if (key == "zero_grad") f.zero_grad = val;
    else if (key == "check_golden") f.check_golden = val;
    else if (key == "profile") f.profile = val;
    else if (key == "model") f.model = val;
    else if (key == "n_kv_head") i64(f.n_kv_head);
    else if (key == "head_dim") i64(f.head_dim);
    else if (key == "intermediate_size") i64(f.intermediate_size);
    else if (key == "rope_theta") dbl(f.rope_theta);
    else if (key == "rms_norm_eps") dbl(f.rms_norm_eps);
    else if (key == "tie_word_embeddings") {
      if (val == "true" || val == "1") f.tie_word_embeddings = true;
      else if (val == "false" || val == "0") f.tie_word_embeddings = false;
      else Usage("bad boolean for --tie_word_embeddings: " + val);
    }
    else Usage("unknown flag --" + key);
    if (key == "n_kv_head" || key == "head_dim" || key == "intermediate_size" ||
        key == "rope_theta" || key == "rms_norm_eps" || key == "tie_word_embeddings")
      f.llama_flags_given.push_back(key);
  }
  if (f.n_layer < 1 || f.n_head < 1 || f.n_embd < 1 || f.block_size < 1 ||
      f.vocab_size < 2 || f.batch_size < 1 || f.steps < 1 || f.warmup < 0)
    Usage("sizes must be positive");
  if (f.model != "" && f.model != "gpt" && f.model != "llama")
    Usage("--model must be gpt or llama, not " + f.model);
  if (f.model != "llama") {
    if (!f.llama_flags_given.empty())
      Usage("--" + f.llama_flags_given[0] + " is a Llama flag: add --model=llama");
    if (f.n_embd % f.n_head != 0) Usage("n_embd must be a multiple of n_head");
  } else {
    if (f.n_kv_head < 0 || f.head_dim < 0 || f.intermediate_size < 0)
      Usage("--n_kv_head, --head_dim and --intermediate_size must be >= 0 (0 = derived)");
    if (f.n_head % (f.n_kv_head > 0 ? f.n_kv_head : f.n_head) != 0)
      Usage("n_head must be a multiple of n_kv_head");
    if (f.head_dim == 0 && f.n_embd % f.n_head != 0)
      Usage("n_embd must be a multiple of n_head (or give --head_dim)");
    if ((f.head_dim > 0 ? f.head_dim : f.n_embd / f.n_head) % 2 != 0)
      Usage("head_dim must be even (rotary pairs its two halves)");
    if (!(f.rope_theta > 0.0) || !(f.rms_norm_eps >= 0.0))
      Usage("--rope_theta must be > 0 and --rms_norm_eps >= 0");
  }
  if (f.optim != "flat" && f.optim != "foreach" && f.optim != "torch")
    Usage("--optim must be flat, foreach or torch");
  if (f.attn != "manual" && f.attn != "sdpa") Usage("--attn must be manual or sdpa");
  if (f.data != "repeat" && f.data != "random") Usage("--data must be repeat or random");
  if (f.zero_grad != "auto" && f.zero_grad != "none" && f.zero_grad != "zero")
    Usage("--zero_grad must be auto, none or zero");
  return f;
}

// ------------------------------------------------------------------------------ BLAS

// Which BLAS torch actually calls, read from OpenBLAS itself when it is the one loaded.
struct BlasInfo {
  std::string name = "unknown";
  std::string core = "-";
  int threads = -1;
};

BlasInfo QueryBlas(int set_threads) {
  BlasInfo info;
  using SetFn = void (*)(int);
  using GetIntFn = int (*)();
  using GetStrFn = char* (*)();
  auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetIntFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  auto core = reinterpret_cast<GetStrFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  auto parallel = reinterpret_cast<GetIntFn>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (core != nullptr) {
    if (set != nullptr && set_threads > 0) set(set_threads);
    const int par = parallel != nullptr ? parallel() : -1;  // 0 serial, 1 pthread, 2 openmp
    info.name = par == 2 ? "openblas-openmp" : par == 1 ? "openblas-pthread"
                : par == 0 ? "openblas-serial" : "openblas";
    info.core = core();
    info.threads = get != nullptr ? get() : -1;
  } else if (dlsym(RTLD_DEFAULT, "sgemm_") != nullptr) {
    info.name = "reference-or-other";  // netlib libblas3 is single-threaded and slow
  }
  return info;
}

// ------------------------------------------------------------------------------ model

// What the step, the optimizers and the golden check need of either model: its
// parameters by name (in named_parameters() order, a tied weight once), an init, and
// Forward returning (logits [B, T, V], mean cross-entropy loss).
class Model {
 public:
  virtual ~Model() = default;
  virtual void Init(at::Generator& gen) = 0;
  virtual std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& idx,
                                                          const torch::Tensor& targets) const = 0;
  std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() { return named_; }
  int64_t NumParams() const {
    int64_t n = 0;
    for (const auto& [name, t] : named_) n += t.numel();
    return n;
  }

 protected:
  torch::Tensor AddParam(const std::string& name, std::vector<int64_t> shape) {
    torch::Tensor t = torch::empty(shape, torch::kFloat32);
    named_.emplace_back(name, t);
    return t;
  }
  std::vector<std::pair<std::string, torch::Tensor>> named_;
};

// ------------------------------------------------------------------------------ GPT

struct Config {
  int64_t n_layer, n_head, n_embd, block_size, vocab_size;
};

struct BlockParams {
  torch::Tensor ln_1_w, ln_1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
  torch::Tensor ln_2_w, ln_2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
};

// nanoGPT's GPT with plain tensors: the parameters in named_parameters() order under
// their nanoGPT names (the tied weight once, as transformer.wte.weight).
class Gpt : public Model {
 public:
  Gpt(const Config& cfg, bool sdpa) : cfg_(cfg), sdpa_(sdpa) {
    const int64_t C = cfg.n_embd;
    auto p = [&](const std::string& name, std::vector<int64_t> shape) {
      return AddParam(name, std::move(shape));
    };
    wte_ = p("transformer.wte.weight", {cfg.vocab_size, C});
    wpe_ = p("transformer.wpe.weight", {cfg.block_size, C});
    for (int64_t i = 0; i < cfg.n_layer; ++i) {
      const std::string h = "transformer.h." + std::to_string(i) + ".";
      BlockParams b;
      b.ln_1_w = p(h + "ln_1.weight", {C});
      b.ln_1_b = p(h + "ln_1.bias", {C});
      b.attn_w = p(h + "attn.c_attn.weight", {3 * C, C});
      b.attn_b = p(h + "attn.c_attn.bias", {3 * C});
      b.attn_proj_w = p(h + "attn.c_proj.weight", {C, C});
      b.attn_proj_b = p(h + "attn.c_proj.bias", {C});
      b.ln_2_w = p(h + "ln_2.weight", {C});
      b.ln_2_b = p(h + "ln_2.bias", {C});
      b.fc_w = p(h + "mlp.c_fc.weight", {4 * C, C});
      b.fc_b = p(h + "mlp.c_fc.bias", {4 * C});
      b.mlp_proj_w = p(h + "mlp.c_proj.weight", {C, 4 * C});
      b.mlp_proj_b = p(h + "mlp.c_proj.bias", {C});
      blocks_.push_back(b);
    }
    ln_f_w_ = p("transformer.ln_f.weight", {C});
    ln_f_b_ = p("transformer.ln_f.bias", {C});
    for (auto& [name, t] : named_) t.set_requires_grad(true);
    // nanoGPT's causal-mask buffer, inverted once: true above the diagonal.
    above_diag_ = torch::ones({cfg.block_size, cfg.block_size}, torch::kBool).triu(1);
  }

  // GPT-2 init as nanoGPT does: 2-D weights N(0, 0.02), residual projections
  // (*.c_proj.weight) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1.
  void Init(at::Generator& gen) override {
    torch::NoGradGuard ng;
    const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.n_layer));
    for (auto& [name, t] : named_) {
      if (t.dim() >= 2) {
        const bool proj = name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
        t.normal_(0.0, proj ? proj_std : 0.02, gen);
      } else if (name.find("ln_") != std::string::npos &&
                 name.compare(name.size() - 7, 7, ".weight") == 0) {
        t.fill_(1.0);
      } else {
        t.zero_();
      }
    }
  }

  // Returns (logits [B, T, V], mean cross-entropy loss).
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& idx,
                                                  const torch::Tensor& targets) const override {
    const int64_t B = idx.size(0), T = idx.size(1), C = cfg_.n_embd, nh = cfg_.n_head;
    const int64_t hs = C / nh;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    torch::Tensor x = at::embedding(wte_, idx) + wpe_.narrow(0, 0, T);
    const torch::Tensor mask = above_diag_.narrow(0, 0, T).narrow(1, 0, T);
    for (const BlockParams& b : blocks_) {
      torch::Tensor h = at::layer_norm(x, {C}, b.ln_1_w, b.ln_1_b, 1e-5);
      std::vector<torch::Tensor> qkv = at::linear(h, b.attn_w, b.attn_b).split(C, 2);
      torch::Tensor q = qkv[0].view({B, T, nh, hs}).transpose(1, 2);  // (B, nh, T, hs)
      torch::Tensor k = qkv[1].view({B, T, nh, hs}).transpose(1, 2);
      torch::Tensor v = qkv[2].view({B, T, nh, hs}).transpose(1, 2);
      torch::Tensor y;
      if (sdpa_) {
        y = std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, true));
      } else {
        torch::Tensor att = at::matmul(q, k.transpose(-2, -1)) * scale;
        att = att.masked_fill(mask, -std::numeric_limits<float>::infinity());
        att = at::softmax(att, -1);
        y = at::matmul(att, v);
      }
      y = y.transpose(1, 2).contiguous().view({B, T, C});
      x = x + at::linear(y, b.attn_proj_w, b.attn_proj_b);
      h = at::layer_norm(x, {C}, b.ln_2_w, b.ln_2_b, 1e-5);
      h = at::gelu(at::linear(h, b.fc_w, b.fc_b), "tanh");
      x = x + at::linear(h, b.mlp_proj_w, b.mlp_proj_b);
    }
    x = at::layer_norm(x, {C}, ln_f_w_, ln_f_b_, 1e-5);
    torch::Tensor logits = at::linear(x, wte_);  // lm_head, tied
    torch::Tensor loss = at::cross_entropy_loss(logits.view({-1, cfg_.vocab_size}),
                                                targets.reshape({-1}));
    return {logits, loss};
  }

 private:
  Config cfg_;
  bool sdpa_;
  torch::Tensor wte_, wpe_, ln_f_w_, ln_f_b_, above_diag_;
  std::vector<BlockParams> blocks_;
};

// ------------------------------------------------------------------------------ Llama

// transformers' rope_scaling {"rope_type": "llama3", ...} (Llama 3.1's frequency bands).
struct Llama3RopeScaling {
  double factor, low_freq_factor, high_freq_factor, original_max_position_embeddings;
};

// Hugging Face's LlamaConfig fields this model reads (config.json names in comments).
struct LlamaConfig {
  int64_t n_layer;            // num_hidden_layers
  int64_t n_head;             // num_attention_heads
  int64_t n_kv_head;          // num_key_value_heads, divides n_head
  int64_t head_dim;           // head_dim (default hidden_size / num_attention_heads)
  int64_t n_embd;             // hidden_size
  int64_t intermediate_size;  // intermediate_size
  int64_t vocab_size;         // vocab_size
  int64_t max_positions;      // max_position_embeddings: rows of the rotary tables
  double rope_theta;          // rope_theta
  double rms_norm_eps;        // rms_norm_eps
  bool tie_word_embeddings;   // tie_word_embeddings: lm_head is embed_tokens
  std::optional<Llama3RopeScaling> rope_scaling;  // null: none
};

// The SwiGLU width Llama's recipe uses when none is given: 8/3 C (the 4C MLP's
// parameters over three matrices) rounded up to a multiple of 64.
int64_t DefaultIntermediateSize(int64_t n_embd) {
  const int64_t third = (8 * n_embd + 2) / 3;  // ceil(8C / 3)
  return (third + 63) / 64 * 64;
}

// inv_freq [D/2]: transformers' _compute_default_rope_parameters,
// 1 / theta^(arange(0, D, 2) / D), then _compute_llama3_parameters when configured.
// In double (transformers: float32; the golden reference: float64).
std::vector<double> RopeInvFreq(const LlamaConfig& c) {
  const int64_t D = c.head_dim;
  std::vector<double> inv_freq(D / 2);
  for (int64_t i = 0; i < D / 2; ++i)
    inv_freq[i] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(D));
  if (c.rope_scaling) {
    const Llama3RopeScaling& s = *c.rope_scaling;
    const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2.0 * M_PI / f;
      // wavelen < high_freq_wavelen: kept; wavelen > low_freq_wavelen: divided by factor;
      // in between: interpolated between the two.
      const double inv_freq_llama = wavelen > low_freq_wavelen ? f / s.factor : f;
      const double smooth_factor = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                                   (s.high_freq_factor - s.low_freq_factor);
      const double smoothed = (1.0 - smooth_factor) * inv_freq_llama / s.factor +
                              smooth_factor * inv_freq_llama;
      const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = is_medium_freq ? smoothed : inv_freq_llama;
    }
  }
  return inv_freq;
}

struct LlamaLayerParams {
  torch::Tensor input_layernorm, q_proj, k_proj, v_proj, o_proj;  // q (H D, C), k v (K D, C), o (C, H D)
  torch::Tensor post_attention_layernorm, gate_proj, up_proj, down_proj;  // gate up (F, C), down (C, F)
};

// LlamaRMSNorm: weight * (x * rsqrt(mean(x^2, -1) + eps)).
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x * at::rsqrt(variance + eps));
}

// rotate_half: cat(-x2, x1) along the last dim, x1 and x2 its two halves.
torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// repeat_kv: [B, K, T, D] -> [B, K n_rep, T, D], kv head j serving query heads
// j n_rep .. j n_rep + n_rep - 1 (expand then reshape, as transformers does).
torch::Tensor RepeatKv(const torch::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t B = x.size(0), K = x.size(1), T = x.size(2), D = x.size(3);
  return x.unsqueeze(2).expand({B, K, n_rep, T, D}).reshape({B, K * n_rep, T, D});
}

// Hugging Face's LlamaForCausalLM with plain tensors: the parameters in named_parameters()
// order under their HF names (a tied lm_head once, as model.embed_tokens.weight).
class Llama : public Model {
 public:
  Llama(const LlamaConfig& cfg, bool sdpa) : cfg_(cfg), sdpa_(sdpa) {
    const int64_t C = cfg.n_embd, H = cfg.n_head, K = cfg.n_kv_head, D = cfg.head_dim;
    const int64_t F = cfg.intermediate_size;
    embed_tokens_ = AddParam("model.embed_tokens.weight", {cfg.vocab_size, C});
    for (int64_t i = 0; i < cfg.n_layer; ++i) {
      const std::string l = "model.layers." + std::to_string(i) + ".";
      LlamaLayerParams p;
      p.q_proj = AddParam(l + "self_attn.q_proj.weight", {H * D, C});
      p.k_proj = AddParam(l + "self_attn.k_proj.weight", {K * D, C});
      p.v_proj = AddParam(l + "self_attn.v_proj.weight", {K * D, C});
      p.o_proj = AddParam(l + "self_attn.o_proj.weight", {C, H * D});
      p.gate_proj = AddParam(l + "mlp.gate_proj.weight", {F, C});
      p.up_proj = AddParam(l + "mlp.up_proj.weight", {F, C});
      p.down_proj = AddParam(l + "mlp.down_proj.weight", {C, F});
      p.input_layernorm = AddParam(l + "input_layernorm.weight", {C});
      p.post_attention_layernorm = AddParam(l + "post_attention_layernorm.weight", {C});
      layers_.push_back(p);
    }
    norm_ = AddParam("model.norm.weight", {C});
    lm_head_ = cfg.tie_word_embeddings ? embed_tokens_ : AddParam("lm_head.weight", {cfg.vocab_size, C});
    for (auto& [name, t] : named_) t.set_requires_grad(true);
    // Rotary tables [max_positions, D]: emb = cat(freqs, freqs), freqs[p, i] = p inv_freq[i]
    // (LlamaRotaryEmbedding), computed in double, stored as float32.
    const std::vector<double> inv = RopeInvFreq(cfg);
    const torch::Tensor inv_freq = torch::tensor(inv, torch::dtype(torch::kFloat64));
    const torch::Tensor freqs = torch::outer(torch::arange(cfg.max_positions, torch::kFloat64), inv_freq);
    const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    cos_ = emb.cos().to(torch::kFloat32);
    sin_ = emb.sin().to(torch::kFloat32);
    above_diag_ = torch::ones({cfg.max_positions, cfg.max_positions}, torch::kBool).triu(1);
  }

  // transformers' _init_weights: Linear and Embedding weights N(0, initializer_range
  // 0.02), RMSNorm weights 1.
  void Init(at::Generator& gen) override {
    torch::NoGradGuard ng;
    for (auto& [name, t] : named_) {
      if (t.dim() >= 2) t.normal_(0.0, 0.02, gen);
      else t.fill_(1.0);
    }
  }

  // Returns (logits [B, T, V], mean cross-entropy loss).
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& idx,
                                                  const torch::Tensor& targets) const override {
    const int64_t B = idx.size(0), T = idx.size(1);
    const int64_t H = cfg_.n_head, K = cfg_.n_kv_head, D = cfg_.head_dim;
    if (T > cfg_.max_positions)
      throw std::runtime_error("sequence length " + std::to_string(T) + " exceeds max_position_embeddings " +
                               std::to_string(cfg_.max_positions));
    const double scaling = 1.0 / std::sqrt(static_cast<double>(D));  // head_dim^-0.5
    const torch::Tensor cos = cos_.narrow(0, 0, T), sin = sin_.narrow(0, 0, T);  // (T, D)
    const torch::Tensor mask = above_diag_.narrow(0, 0, T).narrow(1, 0, T);
    torch::Tensor x = at::embedding(embed_tokens_, idx);  // (B, T, C)
    for (const LlamaLayerParams& p : layers_) {
      // LlamaAttention
      torch::Tensor h = RmsNorm(x, p.input_layernorm, cfg_.rms_norm_eps);
      torch::Tensor q = at::linear(h, p.q_proj).view({B, T, H, D}).transpose(1, 2);  // (B, H, T, D)
      torch::Tensor k = at::linear(h, p.k_proj).view({B, T, K, D}).transpose(1, 2);  // (B, K, T, D)
      torch::Tensor v = at::linear(h, p.v_proj).view({B, T, K, D}).transpose(1, 2);
      q = q * cos + RotateHalf(q) * sin;  // apply_rotary_pos_emb
      k = k * cos + RotateHalf(k) * sin;
      k = RepeatKv(k, H / K);
      v = RepeatKv(v, H / K);
      torch::Tensor y;
      if (sdpa_) {
        y = std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, true));
      } else {  // eager_attention_forward
        torch::Tensor att = at::matmul(q, k.transpose(2, 3)) * scaling;
        att = att.masked_fill(mask, -std::numeric_limits<float>::infinity());
        att = at::softmax(att, -1);
        y = at::matmul(att, v);
      }
      y = y.transpose(1, 2).contiguous().view({B, T, H * D});
      x = x + at::linear(y, p.o_proj);
      // LlamaMLP: down_proj(silu(gate_proj(h)) * up_proj(h))
      h = RmsNorm(x, p.post_attention_layernorm, cfg_.rms_norm_eps);
      x = x + at::linear(at::silu(at::linear(h, p.gate_proj)) * at::linear(h, p.up_proj), p.down_proj);
    }
    x = RmsNorm(x, norm_, cfg_.rms_norm_eps);
    torch::Tensor logits = at::linear(x, lm_head_);
    torch::Tensor loss = at::cross_entropy_loss(logits.view({-1, cfg_.vocab_size}),
                                                targets.reshape({-1}));
    return {logits, loss};
  }

 private:
  LlamaConfig cfg_;
  bool sdpa_;
  torch::Tensor embed_tokens_, norm_, lm_head_, cos_, sin_, above_diag_;
  std::vector<LlamaLayerParams> layers_;
};

LlamaConfig LlamaConfigFromFlags(const Flags& f) {
  LlamaConfig c;
  c.n_layer = f.n_layer;
  c.n_head = f.n_head;
  c.n_kv_head = f.n_kv_head > 0 ? f.n_kv_head : f.n_head;
  c.head_dim = f.head_dim > 0 ? f.head_dim : f.n_embd / f.n_head;
  c.n_embd = f.n_embd;
  c.intermediate_size = f.intermediate_size > 0 ? f.intermediate_size : DefaultIntermediateSize(f.n_embd);
  c.vocab_size = f.vocab_size;
  c.max_positions = f.block_size;
  c.rope_theta = f.rope_theta;
  c.rms_norm_eps = f.rms_norm_eps;
  c.tie_word_embeddings = f.tie_word_embeddings;
  return c;
}

// ------------------------------------------------------------------------------ AdamW

struct AdamWConfig {
  double lr = 6e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void ZeroGrad() = 0;
  virtual void Step() = 0;
};

// nanoGPT's groups: decay on parameters with dim() >= 2, none on the rest.
void SplitGroups(std::vector<std::pair<std::string, torch::Tensor>>& named,
                 std::vector<torch::Tensor>* decay, std::vector<torch::Tensor>* no_decay) {
  for (auto& [name, t] : named) (t.dim() >= 2 ? decay : no_decay)->push_back(t);
}

// torch::optim::AdamW, the C++ API's optimizer (torch 1.13's single-tensor update).
class TorchAdamW : public Optimizer {
 public:
  TorchAdamW(std::vector<std::pair<std::string, torch::Tensor>>& named, const AdamWConfig& c,
             bool set_to_none)
      : set_to_none_(set_to_none) {
    std::vector<torch::Tensor> decay, no_decay;
    SplitGroups(named, &decay, &no_decay);
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps)
              .weight_decay(wd).amsgrad(false));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, opts(c.weight_decay));
    groups.emplace_back(no_decay, opts(0.0));
    opt_ = std::make_unique<torch::optim::AdamW>(groups, *opts(c.weight_decay));
    for (auto& g : opt_->param_groups())
      for (auto& p : g.params()) params_.push_back(p);
  }
  void ZeroGrad() override {
    if (!set_to_none_) {
      opt_->zero_grad();
      return;
    }
    for (auto& p : params_) p.mutable_grad().reset();
  }
  void Step() override { opt_->step(); }

 private:
  bool set_to_none_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  std::vector<torch::Tensor> params_;
};

// The update of torch 1.13's Python `_multi_tensor_adamw` (AdamW(foreach=True)) with the
// same _foreach_* ops, one call per group. Python 1.13 has no fused CPU AdamW.
struct Group {
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
  double weight_decay = 0.0;
};

class ForeachAdamW : public Optimizer {
 public:
  ForeachAdamW(std::vector<std::pair<std::string, torch::Tensor>>& named,
               const AdamWConfig& c, bool set_to_none)
      : c_(c), set_to_none_(set_to_none) {
    Group d, n;
    SplitGroups(named, &d.params, &n.params);
    d.weight_decay = c.weight_decay;
    groups_ = {d, n};
    for (auto& g : groups_)
      for (auto& p : g.params) {
        g.exp_avg.push_back(torch::zeros_like(p));
        g.exp_avg_sq.push_back(torch::zeros_like(p));
      }
  }
  void ZeroGrad() override {
    for (auto& g : groups_)
      for (auto& p : g.params) {
        if (set_to_none_) p.mutable_grad().reset();
        else if (p.grad().defined()) p.mutable_grad().zero_();
      }
  }
  void Step() override {
    torch::NoGradGuard ng;
    ++step_;
    const double bc1 = 1.0 - std::pow(c_.beta1, static_cast<double>(step_));
    const double bc2 = 1.0 - std::pow(c_.beta2, static_cast<double>(step_));
    for (auto& g : groups_) {
      std::vector<torch::Tensor> grads;
      for (auto& p : g.params) grads.push_back(p.grad());
      const size_t n = g.params.size();
      at::_foreach_mul_(g.params, 1.0 - c_.lr * g.weight_decay);
      at::_foreach_mul_(g.exp_avg, c_.beta1);
      at::_foreach_add_(g.exp_avg, grads, 1.0 - c_.beta1);
      at::_foreach_mul_(g.exp_avg_sq, c_.beta2);
      at::_foreach_addcmul_(g.exp_avg_sq, grads, grads, 1.0 - c_.beta2);
      std::vector<at::Scalar> step_size(n, at::Scalar(-c_.lr / bc1));
      std::vector<at::Scalar> bc2_sqrt(n, at::Scalar(std::sqrt(bc2)));
      std::vector<torch::Tensor> denom = at::_foreach_sqrt(g.exp_avg_sq);
      at::_foreach_div_(denom, bc2_sqrt);
      at::_foreach_add_(denom, c_.eps);
      at::_foreach_addcdiv_(g.params, g.exp_avg, denom, step_size);
    }
  }

 private:
  AdamWConfig c_;
  bool set_to_none_;
  std::vector<Group> groups_;
  int64_t step_ = 0;
};

// The same update on flat buffers: each group's parameters and gradients are views into
// one contiguous buffer (autograd accumulates into the views in place), so every op of
// the update runs once per group over a large, multi-threaded buffer instead of once
// per tensor. The per-element arithmetic is that of the two optimizers above.
class FlatAdamW : public Optimizer {
 public:
  FlatAdamW(std::vector<std::pair<std::string, torch::Tensor>>& named, const AdamWConfig& c)
      : c_(c) {
    std::vector<torch::Tensor> decay, no_decay;
    SplitGroups(named, &decay, &no_decay);
    flats_.push_back(Flatten(decay, c.weight_decay));
    flats_.push_back(Flatten(no_decay, 0.0));
  }
  void ZeroGrad() override {
    for (auto& f : flats_) f.grad.zero_();
  }
  void Step() override {
    torch::NoGradGuard ng;
    ++step_;
    const double bc1 = 1.0 - std::pow(c_.beta1, static_cast<double>(step_));
    const double bc2 = 1.0 - std::pow(c_.beta2, static_cast<double>(step_));
    for (auto& f : flats_) {
      if (f.weight_decay != 0.0) f.param.mul_(1.0 - c_.lr * f.weight_decay);
      f.exp_avg.mul_(c_.beta1).add_(f.grad, 1.0 - c_.beta1);
      f.exp_avg_sq.mul_(c_.beta2).addcmul_(f.grad, f.grad, 1.0 - c_.beta2);
      at::sqrt_out(f.denom, f.exp_avg_sq);
      f.denom.div_(std::sqrt(bc2)).add_(c_.eps);
      f.param.addcdiv_(f.exp_avg, f.denom, -c_.lr / bc1);
    }
  }

 private:
  struct Flat {
    torch::Tensor param, grad, exp_avg, exp_avg_sq, denom;
    double weight_decay;
  };
  static Flat Flatten(std::vector<torch::Tensor>& params, double wd) {
    int64_t total = 0;
    for (auto& p : params) total += p.numel();
    Flat f;
    f.weight_decay = wd;
    f.param = torch::empty({total}, torch::kFloat32);
    f.grad = torch::zeros({total}, torch::kFloat32);
    f.exp_avg = torch::zeros({total}, torch::kFloat32);
    f.exp_avg_sq = torch::zeros({total}, torch::kFloat32);
    f.denom = torch::empty({total}, torch::kFloat32);
    int64_t off = 0;
    for (auto& p : params) {
      const int64_t n = p.numel();
      torch::Tensor pv = f.param.narrow(0, off, n).view(p.sizes());
      {
        torch::NoGradGuard ng;
        pv.copy_(p);
      }
      // Point the existing parameter (the model holds it) at the flat storage.
      p.set_data(pv);
      p.mutable_grad() = f.grad.narrow(0, off, n).view(p.sizes());
      off += n;
    }
    return f;
  }
  AdamWConfig c_;
  std::vector<Flat> flats_;
  int64_t step_ = 0;
};

std::unique_ptr<Optimizer> MakeOptimizer(const std::string& kind, Model& model,
                                         const AdamWConfig& c, bool set_to_none) {
  if (kind == "torch") return std::make_unique<TorchAdamW>(model.named_parameters(), c, set_to_none);
  if (kind == "foreach")
    return std::make_unique<ForeachAdamW>(model.named_parameters(), c, set_to_none);
  return std::make_unique<FlatAdamW>(model.named_parameters(), c);
}

// ------------------------------------------------------------------------------ golden

// A minimal safetensors reader (F32 and I64 only), enough for the golden files; the
// string-valued __metadata__ goes to *metadata.
std::map<std::string, torch::Tensor> ReadSafetensors(const std::string& path,
                                                     std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) throw std::runtime_error("short file");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  if (hlen > bytes.size() - 8) throw std::runtime_error("header overruns file");
  const std::string header = bytes.substr(8, hlen);
  const size_t data0 = 8 + hlen;
  // Tiny JSON walk: the header is {"name": {"dtype": "...", "shape": [...],
  // "data_offsets": [a, b]}, ..., "__metadata__": {...}} as the golden writer lays it out.
  std::map<std::string, torch::Tensor> out;
  size_t pos = 0;
  auto read_string = [&](size_t& p) {
    if (header[p] != '"') throw std::runtime_error("json: expected string");
    std::string s;
    for (++p; header[p] != '"'; ++p) {
      if (header[p] == '\\') {
        ++p;
        if (header[p] == 'u') throw std::runtime_error("json: \\u escapes unsupported");
        s += header[p] == 'n' ? '\n' : header[p];
      } else {
        s += header[p];
      }
    }
    ++p;
    return s;
  };
  auto skip_ws = [&](size_t& p) {
    while (p < header.size() && std::isspace(static_cast<unsigned char>(header[p]))) ++p;
  };
  auto read_ints = [&](size_t& p) {
    std::vector<int64_t> v;
    if (header[p] != '[') throw std::runtime_error("json: expected [");
    ++p;
    skip_ws(p);
    while (header[p] != ']') {
      size_t used = 0;
      v.push_back(std::stoll(header.substr(p), &used));
      p += used;
      skip_ws(p);
      if (header[p] == ',') ++p;
      skip_ws(p);
    }
    ++p;
    return v;
  };
  skip_ws(pos);
  if (header[pos] != '{') throw std::runtime_error("json: expected {");
  ++pos;
  while (true) {
    skip_ws(pos);
    if (header[pos] == '}') break;
    if (header[pos] == ',') { ++pos; continue; }
    const std::string name = read_string(pos);
    skip_ws(pos);
    ++pos;  // ':'
    skip_ws(pos);
    if (header[pos] != '{') throw std::runtime_error("json: expected object");
    ++pos;
    std::string dtype;
    std::vector<int64_t> shape, offsets;
    std::map<std::string, std::string> meta;
    while (true) {
      skip_ws(pos);
      if (header[pos] == '}') { ++pos; break; }
      if (header[pos] == ',') { ++pos; continue; }
      const std::string key = read_string(pos);
      skip_ws(pos);
      ++pos;  // ':'
      skip_ws(pos);
      if (header[pos] == '"') meta[key] = read_string(pos);
      else if (key == "shape") shape = read_ints(pos);
      else if (key == "data_offsets") offsets = read_ints(pos);
      else throw std::runtime_error("json: unexpected value for " + key);
      if (key == "dtype") dtype = meta[key];
    }
    if (name == "__metadata__") {
      if (metadata != nullptr) *metadata = meta;
      continue;
    }
    if (offsets.size() != 2 || offsets[1] < offsets[0] ||
        data0 + static_cast<size_t>(offsets[1]) > bytes.size())
      throw std::runtime_error("bad offsets for " + name);
    const auto st = dtype == "F32" ? torch::kFloat32 : dtype == "I64" ? torch::kInt64
                                                                      : torch::kFloat64;
    if (dtype != "F32" && dtype != "I64") throw std::runtime_error("dtype " + dtype);
    torch::Tensor t = torch::empty(shape, st);
    if (static_cast<int64_t>(t.nbytes()) != offsets[1] - offsets[0])
      throw std::runtime_error("size mismatch for " + name);
    std::memcpy(t.data_ptr(), bytes.data() + data0 + offsets[0], t.nbytes());
    out[name] = t;
  }
  return out;
}

// The config's JSON is flat but for Llama's rope_scaling object; its keys are unique,
// so a key is found by its quoted name. JsonValue gives the text of its value: an object
// up to its closing brace, a scalar up to the next ',', '}' or newline.
bool JsonHas(const std::string& json, const std::string& key) {
  return json.find("\"" + key + "\"") != std::string::npos;
}

std::string JsonValue(const std::string& json, const std::string& key) {
  const auto p = json.find("\"" + key + "\"");
  if (p == std::string::npos) throw std::runtime_error("config lacks " + key);
  size_t b = json.find(':', p) + 1;
  while (b < json.size() && std::isspace(static_cast<unsigned char>(json[b]))) ++b;
  size_t e = b;
  if (json[b] == '{') {
    e = json.find('}', b);  // no nested objects inside rope_scaling
    if (e == std::string::npos) throw std::runtime_error("config: unterminated " + key);
    return json.substr(b, e + 1 - b);
  }
  while (e < json.size() && json[e] != ',' && json[e] != '}' && json[e] != '\n') ++e;
  while (e > b && std::isspace(static_cast<unsigned char>(json[e - 1]))) --e;
  return json.substr(b, e - b);
}

int64_t JsonInt(const std::string& json, const std::string& key) {
  const auto p = json.find("\"" + key + "\"");
  if (p == std::string::npos) throw std::runtime_error("config lacks " + key);
  return std::stoll(json.substr(json.find(':', p) + 1));
}

double JsonDouble(const std::string& json, const std::string& key) {
  return std::stod(JsonValue(json, key));
}

bool JsonBool(const std::string& json, const std::string& key) {
  const std::string v = JsonValue(json, key);
  if (v != "true" && v != "false")
    throw std::runtime_error("config: expected true or false for " + key + ", found " + v);
  return v == "true";
}

// The Llama of a Hugging Face config.json (the golden files' "config").
LlamaConfig LlamaConfigFromHfJson(const std::string& json) {
  LlamaConfig c;
  c.n_layer = JsonInt(json, "num_hidden_layers");
  c.n_head = JsonInt(json, "num_attention_heads");
  c.n_kv_head = JsonHas(json, "num_key_value_heads") && JsonValue(json, "num_key_value_heads") != "null"
                    ? JsonInt(json, "num_key_value_heads") : c.n_head;
  c.n_embd = JsonInt(json, "hidden_size");
  c.head_dim = JsonHas(json, "head_dim") && JsonValue(json, "head_dim") != "null"
                   ? JsonInt(json, "head_dim") : c.n_embd / c.n_head;
  c.intermediate_size = JsonInt(json, "intermediate_size");
  c.vocab_size = JsonInt(json, "vocab_size");
  c.max_positions = JsonInt(json, "max_position_embeddings");
  c.rope_theta = JsonDouble(json, "rope_theta");
  c.rms_norm_eps = JsonDouble(json, "rms_norm_eps");
  c.tie_word_embeddings = JsonHas(json, "tie_word_embeddings") && JsonBool(json, "tie_word_embeddings");
  if (c.n_head % c.n_kv_head != 0 || c.head_dim % 2 != 0)
    throw std::runtime_error("config: expected num_key_value_heads dividing num_attention_heads and an "
                             "even head_dim, found " + std::to_string(c.n_kv_head) + " kv heads, " +
                             std::to_string(c.n_head) + " heads, head_dim " + std::to_string(c.head_dim));
  const std::string scaling = JsonHas(json, "rope_scaling") ? JsonValue(json, "rope_scaling") : "null";
  if (scaling != "null") {
    const std::string type = JsonHas(scaling, "rope_type") ? JsonValue(scaling, "rope_type")
                                                           : JsonValue(scaling, "type");
    if (type != "\"llama3\"")
      throw std::runtime_error("config: rope_scaling type " + type + " unsupported (expected \"llama3\")");
    c.rope_scaling = Llama3RopeScaling{JsonDouble(scaling, "factor"), JsonDouble(scaling, "low_freq_factor"),
                                       JsonDouble(scaling, "high_freq_factor"),
                                       JsonDouble(scaling, "original_max_position_embeddings")};
  }
  return c;
}

// Loads the golden weights and batch, then checks logits, loss, every gradient and the
// 5 AdamW steps (lr 1e-3, betas (0.9, 0.95), eps 1e-8, wd 0.1 on 2-D) against the file,
// with the tolerances of tools/golden/README.md. The file's format says which model it
// holds: zeroshard-gpt-golden/1 (nanoGPT, config n_layer, ...) or zeroshard-llama-golden/1
// (Hugging Face's Llama, config the model's config.json). The tolerances are the same
// for both: the reference is float64 rounded to float32, and torch's own float32 run
// differs from it (each file's fp32_max_abs_diff) by at most 5e-8 in logits, 7e-8 in
// gradients, 4e-7 in the AdamW losses and 6e-7 in the final parameters, both models:
// fp32 rounding (2^-24 = 6e-8 relative) over a few dozen chained ops on values of order 1
// (logits, loss) and 1e-3..1e-1 (gradients, parameters). The bounds (1e-5, 1e-6 + 1e-4 of
// a gradient's largest element) leave >= 15x room for a different summation order, while
// a real error (a wrong head split, a missing mask or rope band) moves logits by 1e-3 or more.
// Returns true when everything matches.
bool CheckGolden(const Flags& flags) {
  std::map<std::string, std::string> meta;
  auto g = ReadSafetensors(flags.check_golden, &meta);
  const std::string cfg_json = meta["config"];
  const bool llama = meta["format"].rfind("zeroshard-llama-golden/", 0) == 0;
  if (!flags.model.empty() && (flags.model == "llama") != llama)
    throw std::runtime_error("--model=" + flags.model + ": expected a " + flags.model +
                             " golden file, found format " + meta["format"]);
  std::function<std::unique_ptr<Model>(bool)> make_model;
  if (llama) {
    const LlamaConfig cfg = LlamaConfigFromHfJson(cfg_json);
    make_model = [cfg](bool sdpa) { return std::make_unique<Llama>(cfg, sdpa); };
  } else {
    const Config cfg{JsonInt(cfg_json, "n_layer"), JsonInt(cfg_json, "n_head"),
                     JsonInt(cfg_json, "n_embd"), JsonInt(cfg_json, "block_size"),
                     JsonInt(cfg_json, "vocab_size")};
    make_model = [cfg](bool sdpa) { return std::make_unique<Gpt>(cfg, sdpa); };
  }
  bool ok = true;
  auto report = [&](const std::string& what, const torch::Tensor& got, const torch::Tensor& want,
                    double atol, double rtol) {
    const torch::Tensor diff = (got.detach() - want).abs();
    const double max_diff = diff.max().item<double>();
    const bool pass = (diff <= atol + rtol * want.abs()).all().item<bool>();
    if (!pass) {
      ok = false;
      std::printf("golden FAIL %s max_abs_diff=%.3g\n", what.c_str(), max_diff);
    }
    return max_diff;
  };
  for (const char* optim : {"torch", "foreach", "flat"}) {
    for (const bool sdpa : {false, true}) {
      std::unique_ptr<Model> model_ptr = make_model(sdpa);
      Model& model = *model_ptr;
      {
        torch::NoGradGuard ng;
        for (auto& [name, t] : model.named_parameters()) t.copy_(g.at(name));
      }
      const torch::Tensor idx = g.at("input_ids"), targets = g.at("targets");
      AdamWConfig ac;
      ac.lr = 1e-3;
      ac.weight_decay = 0.1;
      auto opt = MakeOptimizer(optim, model, ac, /*set_to_none=*/true);
      double max_grad = 0.0, max_final = 0.0, max_loss = 0.0;
      for (int s = 0; s < 5; ++s) {
        opt->ZeroGrad();
        auto [logits, loss] = model.Forward(idx, targets);
        if (s == 0) {
          report("logits", logits, g.at("logits"), 1e-5, 1e-5);
          report("loss", loss, g.at("loss"), 1e-5, 1e-5);
        }
        max_loss = std::max(max_loss, report("adamw_losses[" + std::to_string(s) + "]", loss,
                                             g.at("adamw_losses")[s], 1e-5, 0.0));
        loss.backward();
        if (s == 0)
          for (auto& [name, t] : model.named_parameters()) {
            const torch::Tensor& want = g.at("grad." + name);
            const double scale = want.abs().max().item<double>();
            max_grad = std::max(max_grad, report("grad." + name, t.grad(), want,
                                                 1e-6 + 1e-4 * scale, 0.0));
          }
        opt->Step();
      }
      for (auto& [name, t] : model.named_parameters())
        max_final = std::max(max_final, report("adamw_final." + name, t, g.at("adamw_final." + name),
                                               1e-5, 0.0));
      std::printf("golden %soptim=%s attn=%s max_abs_diff grad=%.3g adamw_losses=%.3g "
                  "adamw_final=%.3g\n",
                  llama ? "model=llama " : "", optim, sdpa ? "sdpa" : "manual", max_grad,
                  max_loss, max_final);
    }
  }
  std::printf("golden %s (%s)\n", ok ? "PASS" : "FAIL", flags.check_golden.c_str());
  return ok;
}

// ------------------------------------------------------------------------------ bench

// CPU seconds used by this process (all its threads): cpu / wall over the timed steps
// shows how much of the machine the peer actually got (2.0 = both cores).
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Busy CPU seconds of the whole machine (all cores, every process, plus steal) from
// /proc/stat. Minus this process's own CPU time over the same span, it is the CPU
// that others took while the peer ran: 0 means the figures were taken on an idle machine.
double MachineBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  unsigned long long v[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // user nice system idle iowait irq softirq steal
  in >> cpu;
  for (auto& x : v) in >> x;
  const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* EnvOr(const char* name, const char* dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? v : dflt;
}

int RunBench(const Flags& f) {
  const bool llama = f.model == "llama";
  at::Generator gen = at::detail::createCPUGenerator(f.seed);
  std::unique_ptr<Model> model_ptr;
  // The config= field: the GPT's as it always was; a Llama's with its own fields.
  char config[512];
  if (llama) {
    const LlamaConfig lc = LlamaConfigFromFlags(f);
    model_ptr = std::make_unique<Llama>(lc, f.attn == "sdpa");
    std::snprintf(config, sizeof(config),
                  "model=llama config=n_layer=%lld,n_head=%lld,n_kv_head=%lld,head_dim=%lld,"
                  "n_embd=%lld,intermediate_size=%lld,block_size=%lld,vocab_size=%lld,batch_size=%lld,"
                  "rope_theta=%g,rms_norm_eps=%g,tie_word_embeddings=%d,dtype=fp32",
                  static_cast<long long>(lc.n_layer), static_cast<long long>(lc.n_head),
                  static_cast<long long>(lc.n_kv_head), static_cast<long long>(lc.head_dim),
                  static_cast<long long>(lc.n_embd), static_cast<long long>(lc.intermediate_size),
                  static_cast<long long>(f.block_size), static_cast<long long>(f.vocab_size),
                  static_cast<long long>(f.batch_size), lc.rope_theta, lc.rms_norm_eps,
                  lc.tie_word_embeddings ? 1 : 0);
  } else {
    const Config cfg{f.n_layer, f.n_head, f.n_embd, f.block_size, f.vocab_size};
    model_ptr = std::make_unique<Gpt>(cfg, f.attn == "sdpa");
    std::snprintf(config, sizeof(config),
                  "config=n_layer=%lld,n_head=%lld,n_embd=%lld,block_size=%lld,vocab_size=%lld,"
                  "batch_size=%lld,dtype=fp32",
                  static_cast<long long>(f.n_layer), static_cast<long long>(f.n_head),
                  static_cast<long long>(f.n_embd), static_cast<long long>(f.block_size),
                  static_cast<long long>(f.vocab_size), static_cast<long long>(f.batch_size));
  }
  Model& model = *model_ptr;
  model.Init(gen);
  AdamWConfig ac;
  ac.lr = f.lr;
  ac.weight_decay = f.weight_decay;
  const bool set_to_none = f.zero_grad != "zero" && f.optim != "flat";  // flat: zeroes in place
  auto opt = MakeOptimizer(f.optim, model, ac, set_to_none);

  const int64_t B = f.batch_size, T = f.block_size;
  // Random token batches drawn up front: --data=repeat uses the first one every step
  // (the loss must fall); --data=random cycles through 8 different ones.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  const int nb = f.data == "repeat" ? 1 : 8;
  for (int i = 0; i < nb; ++i) {
    torch::Tensor tok = torch::randint(0, f.vocab_size, {B, T + 1}, gen, torch::kInt64);
    batches.emplace_back(tok.narrow(1, 0, T).contiguous(), tok.narrow(1, 1, T).contiguous());
  }

  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms, clean_ms;
  double loss_first = 0.0, loss_final = 0.0;
  const int64_t total = f.warmup + f.steps;
  double cpu0 = 0.0, busy0 = 0.0;
  Clock::time_point wall0;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
  for (int64_t s = 0; s < total; ++s) {
    if (s == f.warmup) {
      if (!f.profile.empty())
        profile = std::make_unique<torch::autograd::profiler::RecordProfile>(f.profile);
      cpu0 = ProcessCpuSeconds();
      busy0 = MachineBusySeconds();
      wall0 = Clock::now();
    }
    const auto& [idx, targets] = batches[s % nb];
    const double step_busy0 = MachineBusySeconds(), step_cpu0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    opt->ZeroGrad();
    auto [logits, loss] = model.Forward(idx, targets);
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    opt->Step();
    const auto t3 = Clock::now();
    // Others' CPU during this step (outside the timed span; /proc/stat counts in 10 ms
    // ticks, so this is coarse): a step is clean when others took < 0.1 core of it.
    const double step_others = MachineBusySeconds() - step_busy0 - (ProcessCpuSeconds() - step_cpu0);
    const double l = loss.item<double>();  // after the step: not on the timed path
    if (s == 0) loss_first = l;
    loss_final = l;
    if (s >= f.warmup) {
      step_ms.push_back(ms(t0, t3));
      fwd_ms.push_back(ms(t0, t1));
      bwd_ms.push_back(ms(t1, t2));
      opt_ms.push_back(ms(t2, t3));
      if (step_others < 0.1 * ms(t0, t3) / 1000.0) clean_ms.push_back(ms(t0, t3));
    }
  }
  const double wall_s = ms(wall0, Clock::now()) / 1000.0;
  const double own_cpu = ProcessCpuSeconds() - cpu0;
  const double cpu_per_wall = own_cpu / wall_s;
  const double others_per_wall = std::max(0.0, MachineBusySeconds() - busy0 - own_cpu) / wall_s;
  profile.reset();  // writes the trace
  auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  const double mean_ms = mean(step_ms);
  const BlasInfo blas = QueryBlas(0);
  std::printf(
      "peer=libtorch ms_per_step=%.2f tokens_per_s=%.0f median_ms=%.2f min_ms=%.2f "
      "clean_steps=%zu clean_ms=%.2f fwd_ms=%.2f bwd_ms=%.2f optim_ms=%.2f cpu_per_wall=%.2f others_cpu_per_wall=%.2f loss_first=%.4f loss_final=%.4f "
      "trains=%d steps=%lld warmup=%lld threads=%d blas=%s blas_core=%s blas_threads=%d "
      "OPENBLAS_CORETYPE=%s OMP_WAIT_POLICY=%s optim=%s attn=%s data=%s zero_grad=%s "
      "profiled=%d params=%lld torch=%s %s\n",
      mean_ms, static_cast<double>(B * T) * 1000.0 / mean_ms, Median(step_ms),
      *std::min_element(step_ms.begin(), step_ms.end()), clean_ms.size(),
      clean_ms.empty() ? std::nan("") : mean(clean_ms), mean(fwd_ms), mean(bwd_ms),
      mean(opt_ms), cpu_per_wall, others_per_wall, loss_first, loss_final, loss_final < loss_first ? 1 : 0,
      static_cast<long long>(f.steps), static_cast<long long>(f.warmup),
      at::get_num_threads(), blas.name.c_str(), blas.core.c_str(), blas.threads,
      EnvOr("OPENBLAS_CORETYPE", "unset"), EnvOr("OMP_WAIT_POLICY", "unset"), f.optim.c_str(),
      f.attn.c_str(), f.data.c_str(), set_to_none ? "none" : "zero",
      f.profile.empty() ? 0 : 1, static_cast<long long>(model.NumParams()), TORCH_VERSION, config);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = ParseFlags(argc, argv);
  if (f.threads > 0) at::set_num_threads(f.threads);
  QueryBlas(f.blas_threads);
  try {
    if (!f.check_golden.empty()) return CheckGolden(f) ? 0 : 1;
    return RunBench(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_gpt_step: %s\n", e.what());
    return 1;
  }
}
