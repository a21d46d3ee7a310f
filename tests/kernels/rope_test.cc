// The rotary embedding: the tables against their closed form (Llama 3's
// scaling against hand-computed frequencies), RopeApply against the
// rotate_half form in double on odd and strided shapes in every dtype, in
// place, the inverse as the transpose (gradient) and inverse of the forward,
// bitwise independence of threads and instruction set; errors.
//
// Tolerances (|got - want| <= atol + rtol |want|):
//   tables    rtol 2^-24 (one rounding of a double to f32), atol 1e-12 (the
//             double cos/sin of angles up to 1e4 radians: ~1e-12 absolute)
//   rotation  atol 4 2^-24 (|lo| + |hi|) (f32 tables, two products and a
//             difference, each within 2^-24 of its terms; the terms may
//             cancel), rtol RoundingRtol(out)
#include "zeroshard/kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/tests/kernels/bitwise_testing.h"
#include "zeroshard/tests/kernels/grad_check.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::Dot;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ExpectSameBitsOnEveryThreadCountAndIsa;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::NumericGradient;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff

// ---------------------------------------------------------------- tables

TEST(RopeTables, PlainFrequenciesAreTheClosedForm) {
  // theta^(-2i/D) written as exp(-(2i/D) ln theta), angles up to 1e4 radians.
  const int64_t positions = 10001, d = 10;
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables({.theta = 10000.0}, positions, d));
  EXPECT_EQ(t.cos.shape(), (Shape{positions, d / 2}));
  EXPECT_EQ(t.sin.dtype(), DType::kF32);
  std::vector<double> want_c, want_s;
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = p * std::exp(-(2.0 * i / d) * std::log(10000.0));
      want_c.push_back(std::cos(a));
      want_s.push_back(std::sin(a));
    }
  }
  ExpectClose(t.cos, want_c, 1e-12, kU, "cos");
  ExpectClose(t.sin, want_s, 1e-12, kU, "sin");
  // Row 0 is the identity rotation, exactly.
  for (int64_t i = 0; i < d / 2; ++i) {
    EXPECT_EQ(want_c[i], 1.0);
    EXPECT_EQ(ToDoubles(t.cos)[i], 1.0);
    EXPECT_EQ(ToDoubles(t.sin)[i], 0.0);
  }
}

TEST(RopeTables, Llama3ScalingMatchesHandComputedFrequencies) {
  // Llama 3.1: theta 500000, D 128, factor 8, low 1, high 4, original 8192:
  // low_freq_wavelen = 8192, high_freq_wavelen = 2048. By hand (f = theta^(-i/64),
  // wavelen = 2 pi / f):
  //   i = 0:  f = 1,                      wavelen 6.28   < 2048: kept
  //   i = 20: f = 0.016560440080994446,  wavelen 379.4  < 2048: kept
  //   i = 30: f = 0.0021311195369119653, wavelen 2948.3, smooth = (8192/2948.3 - 1)/3
  //           = 0.59284929500296590: (1 - smooth) f / 8 + smooth f = 0.0013718935677611381
  //   i = 34: f = 0.0009384738703573802, wavelen 6695.1, smooth = 0.074526564160743033:
  //           0.0001785078127679964
  //   i = 40: f = 0.0002742481756762073, wavelen 22910.6 > 8192: f / 8 = 3.428102195952591e-05
  //   i = 63: f = 2.455140791131609e-06:                        f / 8 = 3.068925988914511e-07
  const RopeOptions options{.theta = 500000.0, .llama3 = Llama3RopeScaling{}};
  ZS_ASSERT_OK_AND_ASSIGN(const std::vector<double> inv, RopeInverseFrequencies(options, 128));
  ASSERT_EQ(inv.size(), 64u);
  const std::vector<std::pair<int, double>> want = {
      {0, 1.0},
      {20, 0.016560440080994446},
      {30, 0.0013718935677611381},
      {34, 0.0001785078127679964},
      {40, 3.428102195952591e-05},
      {63, 3.068925988914511e-07}};
  for (const auto& [i, f] : want) EXPECT_NEAR(inv[i], f, 1e-14 * f) << "inv_freq[" << i << "]";
  // The scaled frequencies never increase with i (each regime is monotone and they meet).
  for (size_t i = 1; i < inv.size(); ++i) EXPECT_LE(inv[i], inv[i - 1]) << i;
  // The tables are their cos and sin, at positions past the original context.
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables(options, 9000, 128));
  const std::vector<double> c = ToDoubles(t.cos), s = ToDoubles(t.sin);
  for (int64_t p : {1, 1000, 8999}) {
    for (const auto& [i, f] : want) {
      EXPECT_NEAR(c[p * 64 + i], std::cos(p * f), 1e-12 + kU * std::fabs(std::cos(p * f))) << p << ", " << i;
      EXPECT_NEAR(s[p * 64 + i], std::sin(p * f), 1e-12 + kU * std::fabs(std::sin(p * f))) << p << ", " << i;
    }
  }
}

TEST(RopeTables, Errors) {
  using absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(MakeRopeTables({}, 8, 7).status(),
              StatusIs(kInvalidArgument, HasSubstr("MakeRopeTables: head_dim = 7, expected an even value > 0")));
  EXPECT_THAT(MakeRopeTables({.theta = -1.0}, 8, 8).status(),
              StatusIs(kInvalidArgument, HasSubstr("theta = -1, expected a finite value > 0")));
  EXPECT_THAT(MakeRopeTables({}, 0, 8).status(),
              StatusIs(kInvalidArgument, HasSubstr("max_positions = 0, expected >= 1")));
  EXPECT_THAT(MakeRopeTables({.llama3 = Llama3RopeScaling{.low_freq_factor = 4, .high_freq_factor = 4}}, 8, 8).status(),
              StatusIs(kInvalidArgument, HasSubstr("expected 0 < low < high")));
  EXPECT_THAT(MakeRopeTables({.llama3 = Llama3RopeScaling{.factor = 0}}, 8, 8).status(),
              StatusIs(kInvalidArgument, HasSubstr("llama3.factor = 0, expected a finite value > 0")));
  EXPECT_THAT(
      MakeRopeTables({.llama3 = Llama3RopeScaling{.original_max_position_embeddings = 0}}, 8, 8).status(),
      StatusIs(kInvalidArgument, HasSubstr("original_max_position_embeddings = 0, expected > 0")));
}

// ---------------------------------------------------------------- the rotation

// The rotate_half form in double, position t of x [B, T, H, D] (row-major
// values) with the tables' stored (f32) cos and sin: sign -1 is the inverse.
std::vector<double> RefRope(const std::vector<double>& x, const Shape& s, const std::vector<double>& cos,
                            const std::vector<double>& sin, double sign = 1) {
  const int64_t half = s[3] / 2;
  std::vector<double> y(x.size());
  for (int64_t v = 0; v < s[0] * s[1] * s[2]; ++v) {
    const int64_t t = (v / s[2]) % s[1];
    for (int64_t i = 0; i < half; ++i) {
      const double c = cos[t * half + i], sn = sign * sin[t * half + i];
      const double lo = x[v * s[3] + i], hi = x[v * s[3] + i + half];
      y[v * s[3] + i] = lo * c - hi * sn;
      y[v * s[3] + i + half] = hi * c + lo * sn;
    }
  }
  return y;
}

// 4 u (|lo| + |hi|) <= 8 u max|x| for every element.
double RotationAtol(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return 8 * kU * m;
}

TEST(Rope, MatchesRotateHalfInDoubleOnOddShapes) {
  uint64_t seed = 1;
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables({.theta = 10000.0}, 40, 34));
  for (const Shape& shape : std::vector<Shape>{{1, 1, 1, 34}, {2, 5, 3, 34}, {3, 40, 1, 34}, {1, 7, 5, 34}}) {
    for (DType in : kFloatDTypes) {
      for (DType out_dtype : {in, DType::kF32}) {
        const Tensor x = RandomTensor(shape, in, -3, 3, ++seed);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, out_dtype));
        ZS_ASSERT_OK(RopeApply(x, t, out));
        const std::vector<double> xv = ToDoubles(x);
        const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(in), " -> ", DTypeName(out_dtype));
        ExpectClose(out, RefRope(xv, shape, ToDoubles(t.cos), ToDoubles(t.sin)), RotationAtol(xv),
                    RoundingRtol(out_dtype), what);
      }
    }
  }
  // D = 2 (one pair) and fewer positions than the table holds.
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t2, MakeRopeTables({.theta = 10.0}, 9, 2));
  const Tensor x = RandomTensor({2, 3, 4, 2}, DType::kF32, -1, 1, 99);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({2, 3, 4, 2}, DType::kF32));
  ZS_ASSERT_OK(RopeApply(x, t2, out));
  ExpectClose(out, RefRope(ToDoubles(x), {2, 3, 4, 2}, ToDoubles(t2.cos), ToDoubles(t2.sin)),
              RotationAtol(ToDoubles(x)), 0, "D = 2");
}

TEST(Rope, StridedViewsAndInPlace) {
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables({.theta = 500.0}, 6, 8));
  // x: [B, H, T, D] permuted to [B, T, H, D]; out: a slice of a fused qkv-like buffer.
  const Tensor base = RandomTensor({2, 3, 6, 8}, DType::kBF16, -2, 2, 10);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, base.Permute({0, 2, 1, 3}));  // [2, 6, 3, 8]
  ZS_ASSERT_OK_AND_ASSIGN(Tensor fused, Tensor::Full({2, 6, 3, 24}, 5.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, fused.Narrow(3, 8, 8));
  ZS_ASSERT_OK(RopeApply(x, t, out));
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<double> want = RefRope(xv, {2, 6, 3, 8}, ToDoubles(t.cos), ToDoubles(t.sin));
  ExpectClose(out, want, RotationAtol(xv), 0, "permuted x into a narrowed out");
  const std::vector<double> fv = ToDoubles(fused);
  for (size_t k = 0; k < fv.size(); ++k) {
    if (k % 24 < 8 || k % 24 >= 16) { ASSERT_EQ(fv[k], 5.0) << k; }
  }
  // A strided last dimension (every other element).
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wide, Tensor::Empty({1, 6, 3, 16}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor every_other, wide.Slice(3, 0, 16, 2));
  ZS_ASSERT_OK(every_other.CopyFrom(x.Narrow(0, 0, 1).value()));
  ZS_ASSERT_OK(RopeApply(every_other, t, every_other));
  ExpectClose(every_other, std::vector<double>(want.begin(), want.begin() + 6 * 3 * 8), RotationAtol(xv), 0,
              "in place, last stride 2");
  // In place on the permuted bf16 view.
  ZS_ASSERT_OK(RopeApply(x, t, x));
  ExpectClose(x, want, RotationAtol(xv), RoundingRtol(DType::kBF16), "in place, permuted bf16");
}

TEST(Rope, InverseIsTheTransposeAndUndoesTheForward) {
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables({.theta = 10000.0, .llama3 = Llama3RopeScaling{.original_max_position_embeddings = 16}}, 5, 6));
  const Shape shape = {2, 5, 2, 6};
  const std::vector<double> x = ToDoubles(RandomTensor(shape, DType::kF32, -2, 2, 20));
  const std::vector<double> dy = ToDoubles(RandomTensor(shape, DType::kF32, -1, 1, 21));
  const std::vector<double> c = ToDoubles(t.cos), s = ToDoubles(t.sin);
  // The gradient of <dy, rope(x)> is the inverse rotation of dy (the rotation is orthogonal).
  const std::vector<double> numeric =
      NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefRope(v, shape, c, s)); }, x);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dyt, Tensor::FromVector(std::vector<float>(dy.begin(), dy.end()), shape));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK(RopeApply(dyt, t, dx, /*inverse=*/true));
  // The f32 tables are orthogonal to within 2^-24, and the rotation's error as above.
  ExpectClose(dx, numeric, 1e-7 + RotationAtol(dy) + 2 * kU, 0, "inverse vs finite differences");
  // Forward then inverse: the identity within two rotations' error.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xt, Tensor::FromVector(std::vector<float>(x.begin(), x.end()), shape));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK(RopeApply(xt, t, y));
  ZS_ASSERT_OK(RopeApply(y, t, y, /*inverse=*/true));
  ExpectClose(y, x, 2 * RotationAtol(x) + 4 * kU, 0, "inverse(forward(x))");
}

TEST(Rope, BitwiseIndependentOfThreadsAndInstructionSet) {
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables({.theta = 10000.0}, 128, 64));
  const Tensor x = RandomTensor({2, 128, 8, 64}, DType::kF32, -2, 2, 30);
  auto run = [&]() {
    Tensor out = Tensor::Empty({2, 128, 8, 64}, DType::kF32).value();
    EXPECT_TRUE(RopeApply(x, t, out).ok());
    return ToDoubles(out);
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

TEST(Rope, Errors) {
  using absl::StatusCode::kInvalidArgument;
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables t, MakeRopeTables({}, 4, 8));
  const Tensor x = RandomTensor({1, 4, 2, 8}, DType::kF32, -1, 1, 1);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({1, 4, 2, 8}, DType::kF32));
  const Tensor x3 = RandomTensor({4, 2, 8}, DType::kF32, -1, 1, 2);
  EXPECT_THAT(RopeApply(x3, t, x3),
              StatusIs(kInvalidArgument, HasSubstr("RopeApply: x has shape [4, 2, 8], expected [B, T, H, D] with D even")));
  const Tensor x5 = RandomTensor({1, 5, 2, 8}, DType::kF32, -1, 1, 3);
  EXPECT_THAT(RopeApply(x5, t, x5),
              StatusIs(kInvalidArgument, HasSubstr("the table cos has shape [4, 4], expected [>= 5, 4]")));
  const Tensor x6 = RandomTensor({1, 4, 2, 6}, DType::kF32, -1, 1, 4);
  EXPECT_THAT(RopeApply(x6, t, x6), StatusIs(kInvalidArgument, HasSubstr("expected [>= 4, 3]")));
  EXPECT_THAT(RopeApply(x, t, x6),
              StatusIs(kInvalidArgument, HasSubstr("out has shape [1, 4, 2, 6], expected [1, 4, 2, 8]")));
  EXPECT_THAT(RopeApply(x, RopeTables{t.cos, Tensor()}, out),
              StatusIs(kInvalidArgument, HasSubstr("the table sin is undefined")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bf16_cos, t.cos.To(DType::kBF16));
  EXPECT_THAT(RopeApply(x, RopeTables{bf16_cos, t.sin}, out),
              StatusIs(kInvalidArgument, HasSubstr("expected a contiguous f32 [max_positions, D/2]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, x.Narrow(1, 0, 3));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, x.Narrow(1, 1, 3));
  EXPECT_THAT(RopeApply(a, t, b), StatusIs(kInvalidArgument, HasSubstr("only exact in-place is allowed")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({1, 4, 2, 8}, DType::kI32));
  EXPECT_THAT(RopeApply(ints, t, out), StatusIs(kInvalidArgument, HasSubstr("x has dtype i32")));
}

}  // namespace
}  // namespace zeroshard
