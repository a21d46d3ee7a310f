// AdamWStep on CUDA tensors against the CPU step, bit for bit: the same
// per-element math (optim/adamw_math.h) compiled without FMA contraction, every
// gradient and param-copy dtype, two groups with a gap, Adam and AdamW, 10
// steps. Skips without a device; without one, a CUDA step fails cleanly.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/param_group.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasCudaDevice;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;

std::vector<ParamGroup> Groups(int64_t n) {
  if (n < 4) return {ParamGroup::Whole(n, 1e-2, 0.1)};
  const int64_t a = n / 3, c = n / 2;
  return {ParamGroup{{{0, a}, {c + 1, n - c - 1}}, 1e-2, 0.1},
          ParamGroup{{{a, c - a}}, 3e-3, 0.0}};
}

TEST(CudaAdamW, StepsMatchCpuBitwise) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  for (int64_t n : {1, 7, 257, 1000003}) {
    for (DType grad_dtype : kFloatDTypes) {
      for (std::optional<DType> copy_dtype :
           {std::optional<DType>(), std::optional<DType>(DType::kBF16),
            std::optional<DType>(DType::kF16)}) {
        for (bool decoupled : {true, false}) {
          const std::string what = "n=" + std::to_string(n) + " grad " +
                                   std::string(DTypeName(grad_dtype)) + (decoupled ? " AdamW" : " Adam");
          AdamWOptions options;
          options.decoupled_weight_decay = decoupled;
          const std::vector<ParamGroup> groups = Groups(n);
          Tensor p = RandomTensor({n}, DType::kF32, -1, 1, n);
          Tensor pd = p.To(&gpu).value();
          ZS_ASSERT_OK_AND_ASSIGN(AdamWState s, AdamWState::Create(n));
          ZS_ASSERT_OK_AND_ASSIGN(AdamWState sd, AdamWState::Create(n, &gpu));
          StepOptions step, step_d;
          step.grad_scale = step_d.grad_scale = 0.75;
          if (copy_dtype) {
            step.param_copy = Tensor::Zeros({n}, *copy_dtype).value();
            step_d.param_copy = Tensor::Zeros({n}, *copy_dtype, &gpu).value();
          }
          for (int it = 0; it < 10; ++it) {
            const Tensor g = RandomTensor({n}, grad_dtype, -1, 1, 1000 * it + n);
            ZS_ASSERT_OK(AdamWStep(options, groups, p, g, s, step));
            ZS_ASSERT_OK(AdamWStep(options, groups, pd, g.To(&gpu).value(), sd, step_d));
          }
          EXPECT_EQ(sd.step, s.step);
          ExpectClose(pd, ToDoubles(p), 0, 0, what + " param");
          ExpectClose(sd.exp_avg, ToDoubles(s.exp_avg), 0, 0, what + " exp_avg");
          ExpectClose(sd.exp_avg_sq, ToDoubles(s.exp_avg_sq), 0, 0, what + " exp_avg_sq");
          if (copy_dtype) {
            ExpectClose(step_d.param_copy, ToDoubles(step.param_copy), 0, 0, what + " copy");
          }
        }
      }
    }
  }
}

TEST(CudaAdamW, MixedDevicesAreRefused) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  Tensor pd = Tensor::Zeros({8}, DType::kF32, &gpu).value();
  Tensor g = Tensor::Zeros({8}, DType::kF32).value();
  AdamWState sd = AdamWState::Create(8, &gpu).value();
  EXPECT_THAT(AdamWStep({}, {ParamGroup::Whole(8, 1e-3, 0)}, pd, g, sd),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                testing::HasSubstr("grad is on cpu, expected cuda:0")));
}

TEST(CudaAdamW, WithoutADeviceTheStepFailsCleanly) {
  if (HasCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  // CUDA-labelled host memory: the launch is refused (never reads it).
  std::vector<float> mem(4 * 8);
  const Tensor p = Tensor::Wrap(mem.data(), {8}, DType::kF32, Device::Cuda(0));
  AdamWState s;
  s.exp_avg = Tensor::Wrap(mem.data() + 8, {8}, DType::kF32, Device::Cuda(0));
  s.exp_avg_sq = Tensor::Wrap(mem.data() + 16, {8}, DType::kF32, Device::Cuda(0));
  const Tensor g = Tensor::Wrap(mem.data() + 24, {8}, DType::kF32, Device::Cuda(0));
  EXPECT_FALSE(AdamWStep({}, {ParamGroup::Whole(8, 1e-3, 0)}, p, g, s).ok());
  EXPECT_EQ(s.step, 0);
}

}  // namespace
}  // namespace zeroshard::optim
