// AdamWStep / Adam: against a double-precision reference of torch's semantics
// over 10 steps, for every gradient dtype, every param-copy dtype, several
// parameter groups (with a gap no group covers), odd sizes; bitwise equality
// across instruction sets; shard-by-shard stepping equal to the whole; errors.
#include "zeroshard/optim/adamw.h"

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

using ::zeroshard::testing::AdamRef;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

constexpr int kSteps = 10;
constexpr int64_t kSizes[] = {1, 7, 33, 257, 100003};

// Two groups with different lr and weight decay over [0, n), leaving the
// element at n/2 in no group (n >= 4); one group for tiny buffers.
std::vector<ParamGroup> TestGroups(int64_t n) {
  if (n < 4) return {ParamGroup::Whole(n, 1e-2, 0.1)};
  const int64_t a = n / 3, c = n / 2;
  return {ParamGroup{{{0, a}, {c + 1, n - c - 1}}, 1e-2, 0.1},
          ParamGroup{{{a, c - a}}, 3e-3, 0.0}};
}

// The gradient of step `s`: uniform in [-1, 1) with every 5th element zero,
// rounded to `dtype` (the reference reads the rounded values).
std::vector<float> StepGrad(int64_t n, int s, DType dtype) {
  std::vector<float> g = RandomValues(n, -1, 1, 100 + s);
  for (int64_t i = 0; i < n; i += 5) g[i] = 0;
  if (dtype != DType::kF32) {
    for (float& v : g) v = static_cast<float>(ConvertElement<double>(
                           dtype == DType::kBF16 ? ConvertElement<float>(BFloat16(v))
                                                 : ConvertElement<float>(Float16(v))));
  }
  return g;
}

struct Trajectory {
  Tensor param;
  AdamWState state;
  Tensor copy;
};

// Runs `steps` AdamW steps from fixed initial values under the active ISA.
Trajectory RunSteps(int64_t n, DType grad_dtype, std::optional<DType> copy_dtype, bool decoupled,
             double grad_scale, int steps) {
  Trajectory r;
  r.param = Tensor::FromVector(RandomValues(n, -2, 2, 7), {n}, DType::kF32).value();
  r.state = AdamWState::Create(n).value();
  if (copy_dtype) r.copy = Tensor::Full({n}, 1234.0, *copy_dtype).value();
  AdamWOptions options;
  options.beta2 = 0.95;
  options.decoupled_weight_decay = decoupled;
  const std::vector<ParamGroup> groups = TestGroups(n);
  for (int s = 0; s < steps; ++s) {
    const Tensor grad = Tensor::FromVector(StepGrad(n, s, grad_dtype), {n}, grad_dtype).value();
    StepOptions step;
    step.grad_scale = grad_scale;
    step.param_copy = r.copy;
    const absl::Status st = AdamWStep(options, groups, r.param, grad, r.state, step);
    EXPECT_TRUE(st.ok()) << st;
  }
  return r;
}

TEST(AdamWStepTest, MatchesDoubleReferenceOverTenSteps) {
  for (int64_t n : kSizes) {
    for (DType grad_dtype : kFloatDTypes) {
      for (bool decoupled : {true, false}) {
        for (double grad_scale : {1.0, 0.25}) {
          SCOPED_TRACE(::testing::Message() << "n " << n << " grad " << DTypeName(grad_dtype)
                                            << (decoupled ? " AdamW" : " Adam") << " grad_scale "
                                            << grad_scale);
          const Trajectory run = RunSteps(n, grad_dtype, std::nullopt, decoupled, grad_scale, kSteps);
          std::vector<double> p0;
          for (float v : RandomValues(n, -2, 2, 7)) p0.push_back(v);
          AdamRef ref(p0);
          ref.beta2 = 0.95;
          ref.decoupled = decoupled;
          const std::vector<ParamGroup> groups = TestGroups(n);
          for (int s = 0; s < kSteps; ++s) {
            std::vector<double> g;
            for (float v : StepGrad(n, s, grad_dtype)) g.push_back(v * grad_scale);
            ref.BeginStep();
            for (const ParamGroup& grp : groups) {
              for (const FlatRange& r : grp.ranges) ref.Update(g, r.offset, r.numel, grp.lr, grp.weight_decay);
            }
          }
          EXPECT_EQ(run.state.step, kSteps);
          ExpectClose(run.param, ref.p, 2e-6, 2e-6, "param");
          ExpectClose(run.state.exp_avg, ref.m, 1e-6, 1e-5, "exp_avg");
          ExpectClose(run.state.exp_avg_sq, ref.v, 1e-7, 1e-5, "exp_avg_sq");
          if (n >= 4) {  // the uncovered element kept its initial value and zero state
            EXPECT_EQ(run.param.data<float>()[n / 2], static_cast<float>(p0[n / 2]));
            EXPECT_EQ(run.state.exp_avg.data<float>()[n / 2], 0.0f);
            EXPECT_EQ(run.state.exp_avg_sq.data<float>()[n / 2], 0.0f);
          }
        }
      }
    }
  }
}

TEST(AdamWStepTest, ParamCopyIsTheRoundedParamForEveryDType) {
  for (int64_t n : {int64_t{33}, int64_t{100003}}) {
    for (DType grad_dtype : kFloatDTypes) {
      for (DType copy_dtype : kFloatDTypes) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " grad " << DTypeName(grad_dtype)
                                          << " copy " << DTypeName(copy_dtype));
        const Trajectory with = RunSteps(n, grad_dtype, copy_dtype, true, 1.0, 3);
        const Trajectory without = RunSteps(n, grad_dtype, std::nullopt, true, 1.0, 3);
        // Writing the copy changes nothing else.
        ASSERT_EQ(std::memcmp(with.param.raw_data(), without.param.raw_data(), n * 4), 0);
        const Tensor want = with.param.To(copy_dtype).value();
        const std::vector<double> got = ToDoubles(with.copy), want_v = ToDoubles(want);
        for (int64_t i = 0; i < n; ++i) {
          if (i == n / 2) {
            EXPECT_EQ(got[i], ToDoubles(Tensor::Full({1}, 1234.0, copy_dtype).value())[0])
                << "the element in no group must not be written";
          } else {
            ASSERT_EQ(got[i], want_v[i]) << "element " << i;
          }
        }
      }
    }
  }
}

TEST(AdamWStepTest, BitwiseEqualAcrossInstructionSets) {
  for (int64_t n : {int64_t{7}, int64_t{257}, int64_t{100003}}) {
    for (DType grad_dtype : kFloatDTypes) {
      for (bool decoupled : {true, false}) {
        for (DType copy_dtype : {DType::kBF16, DType::kF16}) {
          SCOPED_TRACE(::testing::Message() << "n " << n << " grad " << DTypeName(grad_dtype)
                                            << " copy " << DTypeName(copy_dtype));
          std::vector<Trajectory> runs;
          for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
            cpu::SetActiveCpuIsa(isa);
            runs.push_back(RunSteps(n, grad_dtype, copy_dtype, decoupled, 0.5, 4));
          }
          cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
          for (size_t k = 1; k < runs.size(); ++k) {
            EXPECT_EQ(std::memcmp(runs[0].param.raw_data(), runs[k].param.raw_data(), n * 4), 0);
            EXPECT_EQ(std::memcmp(runs[0].state.exp_avg.raw_data(), runs[k].state.exp_avg.raw_data(), n * 4), 0);
            EXPECT_EQ(std::memcmp(runs[0].state.exp_avg_sq.raw_data(),
                                  runs[k].state.exp_avg_sq.raw_data(), n * 4), 0);
            EXPECT_EQ(std::memcmp(runs[0].copy.raw_data(), runs[k].copy.raw_data(), n * 2), 0);
          }
        }
      }
    }
  }
}

TEST(AdamWStepTest, ThreadCountDoesNotChangeTheResult) {
  const int64_t n = 300001;
  const std::vector<ParamGroup> groups = TestGroups(n);
  std::vector<Tensor> params;
  for (int threads : {1, 2, 3}) {
    Tensor p = Tensor::FromVector(RandomValues(n, -1, 1, 3), {n}, DType::kF32).value();
    AdamWState state = AdamWState::Create(n).value();
    const Tensor g = Tensor::FromVector(RandomValues(n, -1, 1, 4), {n}, DType::kF32).value();
    StepOptions step;
    step.num_threads = threads;
    for (int s = 0; s < 2; ++s) ZS_ASSERT_OK(AdamWStep(AdamWOptions{}, groups, p, g, state, step));
    params.push_back(p);
  }
  EXPECT_EQ(std::memcmp(params[0].raw_data(), params[1].raw_data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(params[0].raw_data(), params[2].raw_data(), n * 4), 0);
  StepOptions bad;
  bad.num_threads = -1;
  AdamWState state = AdamWState::Create(n).value();
  EXPECT_THAT(AdamWStep(AdamWOptions{}, groups, params[0], params[1], state, bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_threads must be >= 0")));
}

TEST(AdamWStepTest, WithoutWeightDecayAdamAndAdamWAgreeBitwise) {
  const int64_t n = 1001;
  Tensor p1 = Tensor::FromVector(RandomValues(n, -1, 1, 3), {n}, DType::kF32).value();
  Tensor p2 = p1.Clone().value();
  AdamWState s1 = AdamWState::Create(n).value(), s2 = AdamWState::Create(n).value();
  const std::vector<ParamGroup> groups = {ParamGroup::Whole(n, 1e-3, 0.0)};
  AdamWOptions adamw, adam;
  adam.decoupled_weight_decay = false;
  for (int s = 0; s < 3; ++s) {
    const Tensor g = Tensor::FromVector(RandomValues(n, -1, 1, 50 + s), {n}, DType::kF32).value();
    ZS_ASSERT_OK(AdamWStep(adamw, groups, p1, g, s1));
    ZS_ASSERT_OK(AdamWStep(adam, groups, p2, g, s2));
  }
  EXPECT_EQ(std::memcmp(p1.raw_data(), p2.raw_data(), n * 4), 0);
}

// Each rank steps its shard with its own state and ShardParamGroups: the
// result is bitwise the unsharded step (the state of a shard is the slice).
TEST(AdamWStepTest, ShardedStepsEqualTheWholeBitwise) {
  const int64_t n = 100003;
  const std::vector<ParamGroup> groups = TestGroups(n);
  for (int world : {2, 3, 4}) {
    const int64_t shard_numel = (n + world - 1) / world;
    const Trajectory whole = RunSteps(n, DType::kBF16, DType::kBF16, true, 1.0, 3);
    Tensor param = Tensor::FromVector(RandomValues(n, -2, 2, 7), {n}, DType::kF32).value();
    Tensor copy = Tensor::Full({n}, 1234.0, DType::kBF16).value();
    for (int r = 0; r < world; ++r) {
      const int64_t off = r * shard_numel;
      const int64_t len = std::min(shard_numel, n - off);
      AdamWState state = AdamWState::Create(len).value();
      const std::vector<ParamGroup> mine = ShardParamGroups(groups, off, len);
      AdamWOptions options;
      options.beta2 = 0.95;
      for (int s = 0; s < 3; ++s) {
        const Tensor grad_full = Tensor::FromVector(StepGrad(n, s, DType::kBF16), {n}, DType::kBF16).value();
        StepOptions step;
        step.param_copy = copy.Narrow(0, off, len).value();
        ZS_ASSERT_OK(AdamWStep(options, mine, param.Narrow(0, off, len).value(),
                               grad_full.Narrow(0, off, len).value(), state, step));
      }
      EXPECT_EQ(std::memcmp(state.exp_avg.raw_data(),
                            whole.state.exp_avg.data<float>() + off, len * 4), 0)
          << "world " << world << " rank " << r;
      EXPECT_EQ(std::memcmp(state.exp_avg_sq.raw_data(),
                            whole.state.exp_avg_sq.data<float>() + off, len * 4), 0);
    }
    EXPECT_EQ(std::memcmp(param.raw_data(), whole.param.raw_data(), n * 4), 0) << "world " << world;
    EXPECT_EQ(std::memcmp(copy.raw_data(), whole.copy.raw_data(), n * 2), 0) << "world " << world;
  }
}

TEST(AdamWStepTest, ErrorsSayWhatWasExpectedAndChangeNothing) {
  const int64_t n = 12;
  Tensor param = Tensor::Zeros({n}, DType::kF32).value();
  Tensor grad = Tensor::Zeros({n}, DType::kF32).value();
  AdamWState state = AdamWState::Create(n).value();
  const std::vector<ParamGroup> groups = {ParamGroup::Whole(n, 1e-3, 0.0)};
  const AdamWOptions options;

  EXPECT_THAT(AdamWStep(options, groups, param, Tensor::Zeros({10}, DType::kF32).value(), state),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("grad has 10 elements (shape [10]), expected 12")));
  EXPECT_THAT(AdamWStep(options, groups, param.To(DType::kBF16).value(), grad, state),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("param has dtype bf16, expected f32")));
  EXPECT_THAT(AdamWStep(options, groups, param, Tensor::Zeros({n}, DType::kI32).value(), state),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("grad has dtype i32, expected f32 or bf16 or f16")));
  const Tensor t = Tensor::Zeros({3, 4}, DType::kF32).value().Transpose(0, 1).value();
  EXPECT_THAT(AdamWStep(options, groups, param, t, state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad must be contiguous")));
  EXPECT_THAT(AdamWStep(options, groups, param, param, state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("param and grad share memory")));
  AdamWState small = AdamWState::Create(n - 1).value();
  EXPECT_THAT(AdamWStep(options, groups, param, grad, small),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state.exp_avg has 11 elements")));
  EXPECT_THAT(AdamWStep(options, {ParamGroup::Whole(n + 1, 1e-3, 0)}, param, grad, state),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outside the flat buffer of 12")));
  EXPECT_THAT(AdamWStep(options, {ParamGroup{{{0, 6}}, 1e-3, 0}, ParamGroup{{{5, 7}}, 1e-3, 0}},
                        param, grad, state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("param groups overlap")));
  AdamWOptions bad;
  bad.beta1 = 1.0;
  EXPECT_THAT(AdamWStep(bad, groups, param, grad, state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("betas must be in [0, 1)")));
  StepOptions neg;
  neg.grad_scale = -1;
  EXPECT_THAT(AdamWStep(options, groups, param, grad, state, neg),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad_scale must be finite")));
  StepOptions short_copy;
  short_copy.param_copy = Tensor::Zeros({n - 2}, DType::kBF16).value();
  EXPECT_THAT(AdamWStep(options, groups, param, grad, state, short_copy),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("param_copy has 10 elements")));
  EXPECT_EQ(state.step, 0) << "a failed step must not count";
  ZS_EXPECT_OK(AdamWStep(options, groups, param, grad, state));
  EXPECT_EQ(state.step, 1);
}

TEST(AdamWStepTest, EmptyBuffersStep) {
  Tensor param = Tensor::Zeros({0}, DType::kF32).value();
  Tensor grad = Tensor::Zeros({0}, DType::kBF16).value();
  ZS_ASSERT_OK_AND_ASSIGN(AdamWState state, AdamWState::Create(0));
  ZS_ASSERT_OK(AdamWStep(AdamWOptions{}, {ParamGroup::Whole(0, 1e-3, 0.1)}, param, grad, state));
  EXPECT_EQ(state.step, 1);
}

TEST(AdamWStepTest, EmptyGroupsStillCountTheStep) {
  Tensor param = Tensor::Full({5}, 1.0, DType::kF32).value();
  Tensor grad = Tensor::Full({5}, 1.0, DType::kF32).value();
  AdamWState state = AdamWState::Create(5).value();
  ZS_ASSERT_OK(AdamWStep(AdamWOptions{}, {ParamGroup{{}, 1e-3, 0.1}}, param, grad, state));
  EXPECT_EQ(state.step, 1);
  EXPECT_EQ(ToDoubles(param), std::vector<double>(5, 1.0));
}

}  // namespace
}  // namespace zeroshard::optim
