// A tiny GPT with every parameter and activation on CUDA against the same
// model on the CPU: logits, loss and every parameter's gradient after one
// forward and backward, then an AdamW step on each device and the loss of the
// stepped models. Skips without a device.
//
// What runs on the GPU: embedding gather / scatter-add, broadcast adds (token
// + position, biases through cuBLASLt's bias epilogue), LayerNorm, cuBLASLt
// GEMMs (fp32, no TF32), our attention kernel (f32 has no cuDNN path), strided
// copies for the head split / merge, GELU, fused cross-entropy, the sums of
// the bias gradients and the fused AdamW step.
//
// Tolerances: the per-element math is the CPU's, so the differences are the
// order of fp32 sums (GEMM, attention, reductions), a few ulp per op. Values
// are compared with |gpu - cpu| <= 1e-5 + 1e-4 max|cpu| + 1e-3 |cpu| per
// tensor (relative to the tensor's scale: gradients of different parameters
// differ by orders of magnitude).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/nn/gpt.h"
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

TEST(CudaGpt, ForwardBackwardAndAdamWMatchCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  nn::GptConfig c;
  c.vocab_size = 97;
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;  // D = 16
  c.bias = true;
  auto cpu_model = std::make_shared<nn::Gpt>(c);
  auto gpu_model = std::make_shared<nn::Gpt>(c);
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

  ZS_ASSERT_OK_AND_ASSIGN(nn::GptOutput want, cpu_model->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(nn::GptOutput got, gpu_model->Forward(ids_d, targets_d));
  ASSERT_TRUE(got.logits.value().device().is_cuda());
  ExpectNear(got.logits.value(), want.logits.value(), "logits");
  ZS_ASSERT_OK_AND_ASSIGN(double loss_cpu, want.loss.value().Item());
  ZS_ASSERT_OK_AND_ASSIGN(double loss_gpu, got.loss.value().Item());
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 + 1e-5 * std::fabs(loss_cpu));
  EXPECT_NEAR(loss_cpu, std::log(static_cast<double>(c.vocab_size)), 0.5);  // sane at init

  ZS_ASSERT_OK(autograd::Backward(want.loss));
  ZS_ASSERT_OK(autograd::Backward(got.loss));
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const Tensor& g = gpu_params[i].second.grad();
    ASSERT_TRUE(g.defined()) << gpu_params[i].first;
    EXPECT_TRUE(g.device().is_cuda()) << gpu_params[i].first;
    ExpectNear(g, cpu_params[i].second.grad(), "grad of " + cpu_params[i].first);
  }

  // One AdamW step per parameter on each device (nanoGPT's decay groups).
  const optim::AdamWOptions adam;
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const Tensor& pc = cpu_params[i].second.value();
    const Tensor& pg = gpu_params[i].second.value();
    const double wd = nn::Gpt::DecaysWeight(pc.shape()) ? 0.1 : 0.0;
    const std::vector<optim::ParamGroup> groups = {optim::ParamGroup::Whole(pc.numel(), 1e-2, wd)};
    ZS_ASSERT_OK_AND_ASSIGN(optim::AdamWState sc, optim::AdamWState::Create(pc.numel()));
    ZS_ASSERT_OK_AND_ASSIGN(optim::AdamWState sg, optim::AdamWState::Create(pg.numel(), &gpu));
    ZS_ASSERT_OK(optim::AdamWStep(adam, groups, pc, cpu_params[i].second.grad(), sc));
    ZS_ASSERT_OK(optim::AdamWStep(adam, groups, pg, gpu_params[i].second.grad(), sg));
    // Adam's first step moves an element by about lr * sign(g): identical on
    // both devices wherever the gradient's sign is certain (|g| well above the
    // gradient tolerance); elsewhere (gradients at the noise floor) it moves
    // by at most 2 lr more.
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
  ZS_ASSERT_OK_AND_ASSIGN(nn::GptOutput after_cpu, cpu_model->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(nn::GptOutput after_gpu, gpu_model->Forward(ids_d, targets_d));
  ZS_ASSERT_OK_AND_ASSIGN(double l1, after_cpu.loss.value().Item());
  ZS_ASSERT_OK_AND_ASSIGN(double l2, after_gpu.loss.value().Item());
  EXPECT_LT(l1, loss_cpu);  // the step helped on the batch it saw
  EXPECT_NEAR(l2, l1, 1e-3 * std::fabs(l1));
}

}  // namespace
}  // namespace zeroshard
