// The peer of //bench:step_bench: one GPT training step run by Debian's libtorch (1.13,
// C++ API, CPU, fp32), timed.
//
// The model is nanoGPT's (the same as autograd/nn/gpt.h and tools/golden/gpt_golden.py):
// learned token and position embeddings, pre-LayerNorm blocks (eps 1e-5, with biases),
// causal multi-head self-attention (c_attn [3C, C] split into q, k, v; the explicit
// masked-softmax path), a 4C GELU(tanh) MLP, final LayerNorm, lm_head tied to
// transformer.wte.weight (one tensor), dropout 0, GPT-2 init. One step is
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
//   torch_gpt_step --check_golden=tests/testdata/gpt_golden.safetensors
//
// Prints one machine-readable line per run:
//   peer=libtorch ms_per_step=... tokens_per_s=... ... config=n_layer=4,...
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
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

// ------------------------------------------------------------------------------ flags

struct Flags {
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
};

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr,
               "torch_gpt_step: %s\n"
               "flags: --n_layer --n_head --n_embd --block_size --vocab_size --batch_size\n"
               "       --steps --warmup --threads --blas_threads --lr --weight_decay --seed\n"
               "       --optim=flat|foreach|torch --attn=manual|sdpa --data=repeat|random\n"
               "       --zero_grad=auto|none|zero --check_golden=PATH --profile=TRACE.json\n",
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
    else Usage("unknown flag --" + key);
  }
  if (f.n_layer < 1 || f.n_head < 1 || f.n_embd < 1 || f.block_size < 1 ||
      f.vocab_size < 2 || f.batch_size < 1 || f.steps < 1 || f.warmup < 0)
    Usage("sizes must be positive");
  if (f.n_embd % f.n_head != 0) Usage("n_embd must be a multiple of n_head");
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

struct Config {
  int64_t n_layer, n_head, n_embd, block_size, vocab_size;
};

struct BlockParams {
  torch::Tensor ln_1_w, ln_1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
  torch::Tensor ln_2_w, ln_2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
};

// nanoGPT's GPT with plain tensors: the parameters in named_parameters() order under
// their nanoGPT names (the tied weight once, as transformer.wte.weight).
class Gpt {
 public:
  Gpt(const Config& cfg, bool sdpa) : cfg_(cfg), sdpa_(sdpa) {
    const int64_t C = cfg.n_embd;
    auto p = [&](const std::string& name, std::vector<int64_t> shape) {
      torch::Tensor t = torch::empty(shape, torch::kFloat32);
      named_.emplace_back(name, t);
      return t;
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
  void InitGpt2(at::Generator& gen) {
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
                                                  const torch::Tensor& targets) const {
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

  std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() { return named_; }
  int64_t NumParams() const {
    int64_t n = 0;
    for (const auto& [name, t] : named_) n += t.numel();
    return n;
  }

 private:
  Config cfg_;
  bool sdpa_;
  torch::Tensor wte_, wpe_, ln_f_w_, ln_f_b_, above_diag_;
  std::vector<BlockParams> blocks_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
};

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

std::unique_ptr<Optimizer> MakeOptimizer(const std::string& kind, Gpt& model,
                                         const AdamWConfig& c, bool set_to_none) {
  if (kind == "torch") return std::make_unique<TorchAdamW>(model.named_parameters(), c, set_to_none);
  if (kind == "foreach")
    return std::make_unique<ForeachAdamW>(model.named_parameters(), c, set_to_none);
  return std::make_unique<FlatAdamW>(model.named_parameters(), c);
}

// ------------------------------------------------------------------------------ golden

// A minimal safetensors reader (F32 and I64 only), enough for gpt_golden.safetensors.
std::map<std::string, torch::Tensor> ReadSafetensors(const std::string& path,
                                                     std::string* metadata_config) {
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
      if (metadata_config != nullptr) *metadata_config = meta["config"];
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

int64_t JsonInt(const std::string& json, const std::string& key) {
  const auto p = json.find("\"" + key + "\"");
  if (p == std::string::npos) throw std::runtime_error("config lacks " + key);
  return std::stoll(json.substr(json.find(':', p) + 1));
}

// Loads the golden weights and batch, then checks logits, loss, every gradient and the
// 5 AdamW steps (lr 1e-3, betas (0.9, 0.95), eps 1e-8, wd 0.1 on 2-D) against the file,
// with the tolerances of tools/golden/README.md. Returns true when everything matches.
bool CheckGolden(const Flags& flags) {
  std::string cfg_json;
  auto g = ReadSafetensors(flags.check_golden, &cfg_json);
  const Config cfg{JsonInt(cfg_json, "n_layer"), JsonInt(cfg_json, "n_head"),
                   JsonInt(cfg_json, "n_embd"), JsonInt(cfg_json, "block_size"),
                   JsonInt(cfg_json, "vocab_size")};
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
      Gpt model(cfg, sdpa);
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
      std::printf("golden optim=%s attn=%s max_abs_diff grad=%.3g adamw_losses=%.3g "
                  "adamw_final=%.3g\n",
                  optim, sdpa ? "sdpa" : "manual", max_grad, max_loss, max_final);
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
  const Config cfg{f.n_layer, f.n_head, f.n_embd, f.block_size, f.vocab_size};
  at::Generator gen = at::detail::createCPUGenerator(f.seed);
  Gpt model(cfg, f.attn == "sdpa");
  model.InitGpt2(gen);
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
      "profiled=%d params=%lld torch=%s config=n_layer=%lld,n_head=%lld,n_embd=%lld,block_size=%lld,"
      "vocab_size=%lld,batch_size=%lld,dtype=fp32\n",
      mean_ms, static_cast<double>(B * T) * 1000.0 / mean_ms, Median(step_ms),
      *std::min_element(step_ms.begin(), step_ms.end()), clean_ms.size(),
      clean_ms.empty() ? std::nan("") : mean(clean_ms), mean(fwd_ms), mean(bwd_ms),
      mean(opt_ms), cpu_per_wall, others_per_wall, loss_first, loss_final, loss_final < loss_first ? 1 : 0,
      static_cast<long long>(f.steps), static_cast<long long>(f.warmup),
      at::get_num_threads(), blas.name.c_str(), blas.core.c_str(), blas.threads,
      EnvOr("OPENBLAS_CORETYPE", "unset"), EnvOr("OMP_WAIT_POLICY", "unset"), f.optim.c_str(),
      f.attn.c_str(), f.data.c_str(), set_to_none ? "none" : "zero",
      f.profile.empty() ? 0 : 1, static_cast<long long>(model.NumParams()), TORCH_VERSION,
      static_cast<long long>(f.n_layer), static_cast<long long>(f.n_head),
      static_cast<long long>(f.n_embd), static_cast<long long>(f.block_size),
      static_cast<long long>(f.vocab_size), static_cast<long long>(f.batch_size));
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
