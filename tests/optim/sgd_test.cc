// SgdStep: against a double-precision reference of torch.optim.SGD over 10
// steps (plain, momentum, dampening, nesterov, weight decay), every gradient
// dtype, param groups with a gap; bitwise equality across instruction sets;
// option and argument errors.
#include "zeroshard/optim/sgd.h"

#include <cstring>
#include <optional>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/optim/param_group.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/optim/optim_reference.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::SgdRef;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

constexpr int kSteps = 10;
constexpr int64_t kSizes[] = {1, 7, 33, 257, 100003};

std::vector<ParamGroup> TestGroups(int64_t n) {
  if (n < 4) return {ParamGroup::Whole(n, 0.05, 1e-2)};
  const int64_t a = n / 3, c = n / 2;
  return {ParamGroup{{{0, a}, {c + 1, n - c - 1}}, 0.05, 1e-2},
          ParamGroup{{{a, c - a}}, 0.02, 0.0}};
}

std::vector<float> StepGrad(int64_t n, int s, DType dtype) {
  std::vector<float> g = RandomValues(n, -1, 1, 200 + s);
  for (int64_t i = 0; i < n; i += 5) g[i] = 0;
  const Tensor t = Tensor::FromVector(g, {n}, dtype).value();
  return t.ToVector<float>().value();  // the values the kernel reads
}

struct Trajectory {
  Tensor param;
  SgdState state;
  Tensor copy;
};

Trajectory RunSteps(const SgdOptions& options, int64_t n, DType grad_dtype,
                    std::optional<DType> copy_dtype, double grad_scale, int steps) {
  Trajectory r;
  r.param = Tensor::FromVector(RandomValues(n, -2, 2, 9), {n}, DType::kF32).value();
  r.state = SgdState::Create(n, options).value();
  if (copy_dtype) r.copy = Tensor::Zeros({n}, *copy_dtype).value();
  const std::vector<ParamGroup> groups = TestGroups(n);
  for (int s = 0; s < steps; ++s) {
    const Tensor grad = Tensor::FromVector(StepGrad(n, s, grad_dtype), {n}, grad_dtype).value();
    StepOptions step;
    step.grad_scale = grad_scale;
    step.param_copy = r.copy;
    const absl::Status st = SgdStep(options, groups, r.param, grad, r.state, step);
    EXPECT_TRUE(st.ok()) << st;
  }
  return r;
}

std::vector<SgdOptions> AllVariants() {
  return {SgdOptions{},
          SgdOptions{.momentum = 0.9},
          SgdOptions{.momentum = 0.9, .dampening = 0.1},
          SgdOptions{.momentum = 0.8, .nesterov = true}};
}

TEST(SgdStepTest, MatchesDoubleReferenceOverTenSteps) {
  for (const SgdOptions& options : AllVariants()) {
    for (int64_t n : kSizes) {
      for (DType grad_dtype : kFloatDTypes) {
        for (double grad_scale : {1.0, 0.5}) {
          SCOPED_TRACE(::testing::Message() << options.ToString() << " n " << n << " grad "
                                            << DTypeName(grad_dtype) << " scale " << grad_scale);
          const Trajectory run = RunSteps(options, n, grad_dtype, std::nullopt, grad_scale, kSteps);
          std::vector<double> p0;
          for (float v : RandomValues(n, -2, 2, 9)) p0.push_back(v);
          SgdRef ref(p0);
          ref.momentum = options.momentum;
          ref.dampening = options.dampening;
          ref.nesterov = options.nesterov;
          for (int s = 0; s < kSteps; ++s) {
            std::vector<double> g;
            for (float v : StepGrad(n, s, grad_dtype)) g.push_back(v * grad_scale);
            for (const ParamGroup& grp : TestGroups(n)) {
              for (const FlatRange& r : grp.ranges) ref.Update(g, r.offset, r.numel, grp.lr, grp.weight_decay);
            }
            ref.EndStep();
          }
          EXPECT_EQ(run.state.step, kSteps);
          ExpectClose(run.param, ref.p, 2e-6, 2e-6, "param");
          if (options.momentum != 0) {
            ExpectClose(run.state.momentum_buffer, ref.buf, 2e-6, 2e-6, "momentum_buffer");
          } else {
            EXPECT_FALSE(run.state.momentum_buffer.defined());
          }
          if (n >= 4) {
            EXPECT_EQ(run.param.data<float>()[n / 2], static_cast<float>(p0[n / 2]));
          }
        }
      }
    }
  }
}

TEST(SgdStepTest, FirstStepInitialisesTheBufferWithTheGradientWithoutDampening) {
  const SgdOptions options{.momentum = 0.9, .dampening = 0.5};
  Tensor p = Tensor::Full({3}, 1.0, DType::kF32).value();
  const Tensor g = Tensor::FromVector(std::vector<float>{0.5f, -2.0f, 0.0f}, {3}).value();
  SgdState state = SgdState::Create(3, options).value();
  ZS_ASSERT_OK(SgdStep(options, {ParamGroup::Whole(3, 0.1, 0)}, p, g, state));
  EXPECT_EQ(ToDoubles(state.momentum_buffer), (std::vector<double>{0.5, -2.0, 0.0}));
  ZS_ASSERT_OK(SgdStep(options, {ParamGroup::Whole(3, 0.1, 0)}, p, g, state));
  // buf = 0.9 buf + 0.5 g
  EXPECT_EQ(ToDoubles(state.momentum_buffer),
            (std::vector<double>{0.9f * 0.5f + 0.5f * 0.5f, 0.9f * -2.0f + 0.5f * -2.0f, 0.0}));
}

TEST(SgdStepTest, BitwiseEqualAcrossInstructionSets) {
  for (const SgdOptions& options : AllVariants()) {
    for (int64_t n : {int64_t{7}, int64_t{100003}}) {
      for (DType grad_dtype : kFloatDTypes) {
        SCOPED_TRACE(::testing::Message() << options.ToString() << " n " << n << " grad "
                                          << DTypeName(grad_dtype));
        std::vector<Trajectory> runs;
        for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
          cpu::SetActiveCpuIsa(isa);
          runs.push_back(RunSteps(options, n, grad_dtype, DType::kF16, 0.5, 3));
        }
        cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
        for (size_t k = 1; k < runs.size(); ++k) {
          EXPECT_EQ(std::memcmp(runs[0].param.raw_data(), runs[k].param.raw_data(), n * 4), 0);
          EXPECT_EQ(std::memcmp(runs[0].copy.raw_data(), runs[k].copy.raw_data(), n * 2), 0);
          if (options.momentum != 0) {
            EXPECT_EQ(std::memcmp(runs[0].state.momentum_buffer.raw_data(),
                                  runs[k].state.momentum_buffer.raw_data(), n * 4), 0);
          }
        }
        // The copy is the rounded parameter (except the element in no group: never written).
        std::vector<double> want = ToDoubles(runs[0].param.To(DType::kF16).value());
        if (n >= 4) want[n / 2] = 0;
        EXPECT_EQ(ToDoubles(runs[0].copy), want);
      }
    }
  }
}

TEST(SgdStepTest, OptionAndArgumentErrors) {
  EXPECT_THAT(SgdState::Create(4, SgdOptions{.nesterov = true}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nesterov needs momentum > 0")));
  EXPECT_THAT(SgdState::Create(4, SgdOptions{.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dampening == 0")));
  EXPECT_THAT(SgdState::Create(4, SgdOptions{.momentum = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("momentum must be finite")));
  const SgdOptions options{.momentum = 0.9};
  Tensor p = Tensor::Zeros({4}, DType::kF32).value();
  Tensor g = Tensor::Zeros({4}, DType::kF32).value();
  SgdState no_buffer = SgdState::Create(4, SgdOptions{}).value();
  EXPECT_THAT(SgdStep(options, {ParamGroup::Whole(4, 0.1, 0)}, p, g, no_buffer),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("state.momentum_buffer is undefined")));
  SgdState state = SgdState::Create(4, options).value();
  EXPECT_THAT(SgdStep(options, {ParamGroup::Whole(4, -0.1, 0)}, p, g, state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr must be finite and >= 0")));
  EXPECT_THAT(SgdStep(options, {ParamGroup::Whole(4, 0.1, 0)}, p, state.momentum_buffer, state),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("grad and state.momentum_buffer share memory")));
  EXPECT_EQ(state.step, 0);
}

}  // namespace
}  // namespace zeroshard::optim
