// Gradient-norm clipping (torch.nn.utils.clip_grad_norm_ semantics) from local
// sums of squares, sharded vs unsharded, loss-scale folding; the Inf/NaN check.
#include "zeroshard/optim/grad_clip.h"

#include <cmath>
#include <limits>
#include <vector>

#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::StatusIs;

TEST(GradClipTest, NormAndCoefficientAsTorch) {
  const std::vector<float> a = RandomValues(1000, -1, 1, 1), b = RandomValues(33, -3, 3, 2);
  double ss = 0;
  for (float v : a) ss += double(v) * v;
  for (float v : b) ss += double(v) * v;
  const Tensor ta = Tensor::FromVector(a, {10, 100}).value();
  const Tensor tb = Tensor::FromVector(b, {33}).value();
  ZS_ASSERT_OK_AND_ASSIGN(GradClip clip, ClipGradNorm({ta, tb}, 1.0));
  EXPECT_NEAR(clip.norm, std::sqrt(ss), 1e-5 * std::sqrt(ss));
  EXPECT_DOUBLE_EQ(clip.clip_coef, 1.0 / (clip.norm + 1e-6));
  EXPECT_EQ(clip.grad_scale, clip.clip_coef);
  // A max_norm above the norm leaves the gradients alone.
  ZS_ASSERT_OK_AND_ASSIGN(GradClip loose, ClipGradNorm({ta, tb}, 1e6));
  EXPECT_EQ(loose.clip_coef, 1.0);
  // An undefined gradient (a parameter without one) adds nothing.
  ZS_ASSERT_OK_AND_ASSIGN(GradClip with_none, ClipGradNorm({ta, Tensor(), tb}, 1.0));
  EXPECT_EQ(with_none.norm, clip.norm);
}

TEST(GradClipTest, ShardedSumOfSquaresGivesTheUnshardedNorm) {
  const int64_t n = 100003;
  const Tensor g = Tensor::FromVector(RandomValues(n, -1, 1, 5), {n}).value();
  ZS_ASSERT_OK_AND_ASSIGN(GradClip whole, ClipGradNorm({g}, 0.5));
  double all_reduced = 0;  // what an all-reduce of the local sums gives
  const int64_t shard = (n + 3) / 4;
  for (int r = 0; r < 4; ++r) {
    const int64_t off = r * shard, len = std::min(shard, n - off);
    ZS_ASSERT_OK_AND_ASSIGN(double local, LocalSumOfSquares({g.Narrow(0, off, len).value()}));
    all_reduced += local;
  }
  const GradClip sharded = GradClipFromSumOfSquares(all_reduced, 0.5);
  // SumOfSquares adds fp32 blocks of 4096 elements in double; shard boundaries
  // move the blocks, so the sums agree to float accumulation error, not bitwise.
  EXPECT_NEAR(sharded.norm, whole.norm, 1e-6 * whole.norm);
  EXPECT_NEAR(sharded.clip_coef, whole.clip_coef, 1e-6 * whole.clip_coef);
}

TEST(GradClipTest, LossScaledGradientsAreUnscaledInTheNormAndTheStepScale) {
  const std::vector<float> v = {3, 4};  // norm 5
  const Tensor scaled = Tensor::FromVector(std::vector<float>{3 * 1024.f, 4 * 1024.f}, {2}).value();
  ZS_ASSERT_OK_AND_ASSIGN(GradClip clip, ClipGradNorm({scaled}, 1.0, 1.0 / 1024));
  EXPECT_DOUBLE_EQ(clip.norm, 5.0);
  EXPECT_DOUBLE_EQ(clip.clip_coef, 1.0 / (5.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip.grad_scale, clip.clip_coef / 1024);
}

TEST(GradClipTest, NonFiniteGradientsGiveANonFiniteNorm) {
  const Tensor inf = Tensor::FromVector(std::vector<float>{1, INFINITY, 2}, {3}).value();
  ZS_ASSERT_OK_AND_ASSIGN(GradClip c1, ClipGradNorm({inf}, 1.0));
  EXPECT_TRUE(std::isinf(c1.norm));
  EXPECT_EQ(c1.clip_coef, 0.0);
  const Tensor nan = Tensor::FromVector(std::vector<float>{1, NAN, 2}, {3}).value();
  ZS_ASSERT_OK_AND_ASSIGN(GradClip c2, ClipGradNorm({nan}, 1.0));
  EXPECT_TRUE(std::isnan(c2.norm));
  EXPECT_TRUE(std::isnan(c2.clip_coef)) << "NaN must stay visible, as torch's clamp keeps it";
}

TEST(GradClipTest, Errors) {
  const Tensor g = Tensor::Zeros({3}, DType::kF32).value();
  EXPECT_THAT(ClipGradNorm({g}, 0.0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_norm must be finite and > 0")));
  EXPECT_THAT(ClipGradNorm({Tensor::Zeros({3}, DType::kI64).value()}, 1.0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has dtype i64")));
}

TEST(HasNonFiniteTest, FindsInfAndNanInEveryDTypeAtEveryPosition) {
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{70001}}) {
      const Tensor clean = Tensor::FromVector(RandomValues(n, -60000, 60000, 3), {n}, dtype).value();
      ZS_ASSERT_OK_AND_ASSIGN(bool found, HasNonFinite(clean));
      EXPECT_FALSE(found) << DTypeName(dtype) << " n " << n;
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
          std::vector<float> v = RandomValues(n, -1, 1, 3);
          v[pos] = bad;
          const Tensor t = Tensor::FromVector(v, {n}, dtype).value();
          ZS_ASSERT_OK_AND_ASSIGN(bool f, HasNonFinite(t));
          EXPECT_TRUE(f) << DTypeName(dtype) << " n " << n << " value " << bad << " at " << pos;
        }
      }
    }
  }
  // f16 overflow from rounding: 70000 is past f16's range, so it is stored as Inf.
  const Tensor big = Tensor::FromVector(std::vector<float>{70000.0f}, {1}, DType::kF16).value();
  EXPECT_TRUE(HasNonFinite(big).value());
  // Largest finite values are finite.
  const Tensor max32 =
      Tensor::FromVector(std::vector<float>{std::numeric_limits<float>::max(), 65504.0f}, {2}).value();
  EXPECT_FALSE(HasNonFinite(max32).value());
  EXPECT_FALSE(HasNonFinite(
                   Tensor::FromVector(std::vector<float>{65504.0f, -65504.0f}, {2}, DType::kF16).value())
                   .value());
  // Non-contiguous input.
  std::vector<float> m(12, 1.0f);
  m[5] = NAN;
  const Tensor t = Tensor::FromVector(m, {3, 4}).value().Transpose(0, 1).value();
  EXPECT_TRUE(HasNonFinite(t).value());
  EXPECT_THAT(HasNonFinite(Tensor::Zeros({2}, DType::kI32).value()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected f32, bf16 or f16")));
}

}  // namespace
}  // namespace zeroshard::optim
