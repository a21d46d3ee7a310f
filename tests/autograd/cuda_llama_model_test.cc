// A tiny Llama with every parameter and activation on CUDA against the same
// model on the CPU, as tests/autograd/cuda_gpt_test.cc does for the GPT:
// logits, loss and every parameter's gradient after one forward and
// backward, then an AdamW step on each device and the loss of the stepped
// models. Two models: grouped-query (4 query heads on 2 kv heads, untied,
// head_dim 24 != hidden / heads, Llama 3 rope scaling that bends the
// frequencies at these lengths) and multi-query (1 kv head, tied embeddings,
// attention and MLP biases, activation checkpointing). Skips without a device.
//
// What runs on the GPU: the embedding gather / scatter-add (and, tied, the
// lm_head GEMM's gradient added to the scatter-add's), RMSNorm forward and
// backward, cuBLASLt GEMMs (fp32, no TF32; biases through the epilogue),
// rotary embeddings with the tables built on the device
// (nn::LlamaRotary::Get), our attention kernel with K/V heads shared by query
// heads (f32 has no cuDNN path), strided copies for the head split / merge,
// SiluGate, the residual adds, fused cross-entropy and the fused AdamW step.
//
// Tolerances, derived as cuda_gpt_test.cc's: the per-element math (RMSNorm's
// scaling, the rotation, silu(g) u, the AdamW update) is the CPU's, from
// kernels/math/, so the differences are the order of fp32 sums (GEMMs over at
// most C = 64 or F = 96 terms, attention over T <= 29 keys, RMSNorm's mean of
// 64 squares, the gradient reductions over B T = 87 rows): each a few ulp
// (2^-24 ~ 6e-8) of the terms summed, through ~12 dependent reductions
// forward and as many backward, so well under 1e-4 of each tensor's scale.
// Values are compared with |gpu - cpu| <= 1e-5 + 1e-4 max|cpu| + 1e-3 |cpu|
// per tensor (relative to the tensor's scale: gradients of different
// parameters differ by orders of magnitude, and a small gradient element is a
// difference of larger terms). The loss, a mean of 87 cross-entropies of
// order log V, agrees to 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ToDoubles;

void ExpectNear(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> w = ToDoubles(want);
  double scale = 0;
  for (double x : w) scale = std::max(scale, std::fabs(x));
  ExpectClose(ToDoubles(got), w, 1e-5 + 1e-4 * scale, 1e-3, what);
}

Tensor Tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> v(B * T);
  uint64_t s = seed;
  for (auto& t : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return Tensor::FromVector(v, {B, T}).value();
}

nn::LlamaConfig Gqa() {
  nn::LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 24;  // H D = 96 != C: q_proj [96, 64], o_proj [64, 96]
  c.max_position_embeddings = 32;
  c.rms_norm_eps = 1e-5;
  // Weights of 0.1 (not transformers' 0.02) make scores q.k / sqrt(D) of
  // order 1 rather than 1e-2: attention far from uniform, so the rotation
  // (and an error in it, e.g. tables 1% off in theta) shows in the logits.
  c.initializer_range = 0.1;
  // original 16 / high 4 = wavelength 4 .. 16 / low 1: every band (kept,
  // smoothed, divided by the factor) occurs among D / 2 = 12 frequencies.
  c.rope_scaling = Llama3RopeScaling{.factor = 4.0, .original_max_position_embeddings = 16};
  return c;
}

nn::LlamaConfig TiedMqa() {
  nn::LlamaConfig c = Gqa();
  c.head_dim = 0;  // C / H = 16
  c.num_key_value_heads = 1;
  c.rope_scaling.reset();
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  c.mlp_bias = true;
  c.activation_checkpointing = true;
  return c;
}

void ExpectLlamaMatchesCpu(const nn::LlamaConfig& c) {
  CudaAllocator gpu(0);
  auto cpu_model = std::make_shared<nn::Llama>(c);
  auto gpu_model = std::make_shared<nn::Llama>(c);
  ZS_ASSERT_OK(cpu_model->Materialize(/*seed=*/7));
  ZS_ASSERT_OK(gpu_model->Materialize(/*seed=*/7, &gpu));
  auto cpu_params = cpu_model->NamedParameters();
  auto gpu_params = gpu_model->NamedParameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    ASSERT_EQ(cpu_params[i].first, gpu_params[i].first);
    ASSERT_TRUE(gpu_params[i].second.value().device().is_cuda()) << gpu_params[i].first;
    // The same init: computed on the host, copied over.
    EXPECT_EQ(ToDoubles(gpu_params[i].second.value()), ToDoubles(cpu_params[i].second.value()))
        << gpu_params[i].first;
  }

  const int64_t B = 3, T = 29;  // odd T: partial attention tiles
  const Tensor ids = Tokens(B, T, c.vocab_size, 1), targets = Tokens(B, T, c.vocab_size, 2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids_d, ids.To(&gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets_d, targets.To(&gpu));

  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput want, cpu_model->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput got, gpu_model->Forward(ids_d, targets_d));
  ASSERT_TRUE(got.logits.value().device().is_cuda());
  ExpectNear(got.logits.value(), want.logits.value(), "logits");
  ZS_ASSERT_OK_AND_ASSIGN(double loss_cpu, want.loss.value().Item());
  ZS_ASSERT_OK_AND_ASSIGN(double loss_gpu, got.loss.value().Item());
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 + 1e-5 * std::fabs(loss_cpu));
  // Sane at init: logits of standard deviation ~0.1 sqrt(C) = 0.8 put the
  // mean cross-entropy near log V + 0.8^2 / 2.
  EXPECT_NEAR(loss_cpu, std::log(static_cast<double>(c.vocab_size)) + 0.3, 0.5);

  ZS_ASSERT_OK(autograd::Backward(want.loss));
  ZS_ASSERT_OK(autograd::Backward(got.loss));
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const Tensor& g = gpu_params[i].second.grad();
    ASSERT_TRUE(g.defined()) << gpu_params[i].first;
    EXPECT_TRUE(g.device().is_cuda()) << gpu_params[i].first;
    ExpectNear(g, cpu_params[i].second.grad(), "grad of " + cpu_params[i].first);
  }

  // One AdamW step per parameter on each device (decay on matrices only).
  const optim::AdamWOptions adam;
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const Tensor& pc = cpu_params[i].second.value();
    const Tensor& pg = gpu_params[i].second.value();
    const double wd = pc.dim() >= 2 ? 0.1 : 0.0;
    const std::vector<optim::ParamGroup> groups = {optim::ParamGroup::Whole(pc.numel(), 1e-2, wd)};
    ZS_ASSERT_OK_AND_ASSIGN(optim::AdamWState sc, optim::AdamWState::Create(pc.numel()));
    ZS_ASSERT_OK_AND_ASSIGN(optim::AdamWState sg, optim::AdamWState::Create(pg.numel(), &gpu));
    ZS_ASSERT_OK(optim::AdamWStep(adam, groups, pc, cpu_params[i].second.grad(), sc));
    ZS_ASSERT_OK(optim::AdamWStep(adam, groups, pg, gpu_params[i].second.grad(), sg));
    // Adam's first step moves an element by about lr * sign(g): identical on
    // both devices wherever the gradient's sign is certain (|g| above twice
    // the gradient tolerance); elsewhere (gradients at the noise floor) it
    // moves by at most 2 lr = 2e-2 more.
    const std::vector<double> g = ToDoubles(cpu_params[i].second.grad());
    const std::vector<double> a = ToDoubles(pg), b = ToDoubles(pc);
    double gscale = 0;
    for (double x : g) gscale = std::max(gscale, std::fabs(x));
    const double certain = 2 * (1e-5 + 1e-4 * gscale);
    int bad = 0;
    for (size_t e = 0; e < g.size() && bad < 5; ++e) {
      const double tol = std::fabs(g[e]) > certain ? 1e-6 + 1e-5 * std::fabs(b[e]) : 2.1e-2;
      if (!(std::fabs(a[e] - b[e]) <= tol)) {
        ADD_FAILURE() << "stepped " << cpu_params[i].first << "[" << e << "]: gpu " << a[e]
                      << ", cpu " << b[e] << ", grad " << g[e];
        ++bad;
      }
    }
    ExpectNear(sg.exp_avg_sq, sc.exp_avg_sq, "exp_avg_sq of " + cpu_params[i].first);
  }
  autograd::NoGradGuard no_grad;
  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput after_cpu, cpu_model->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput after_gpu, gpu_model->Forward(ids_d, targets_d));
  ZS_ASSERT_OK_AND_ASSIGN(double l1, after_cpu.loss.value().Item());
  ZS_ASSERT_OK_AND_ASSIGN(double l2, after_gpu.loss.value().Item());
  EXPECT_LT(l1, loss_cpu);  // the step helped on the batch it saw
  // The stepped weights agree to the step tolerance above (1e-5 relative, or
  // 2 lr on noise-floor elements, whose effect on the loss is of the order
  // of their gradient): the loss to 1e-3 relative, as the GPT's.
  EXPECT_NEAR(l2, l1, 1e-3 * std::fabs(l1));
}

TEST(CudaLlama, GroupedQueryUntiedForwardBackwardAndAdamWMatchCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  ExpectLlamaMatchesCpu(Gqa());
}

TEST(CudaLlama, MultiQueryTiedForwardBackwardAndAdamWMatchCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  ExpectLlamaMatchesCpu(TiedMqa());
}

}  // namespace
}  // namespace zeroshard
