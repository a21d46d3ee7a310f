// The SwiGLU gate (silu(gate) * up) forward and backward against double
// references on odd shapes, every dtype, strided and in-place operands, gates
// far past the sigmoid's saturation; the reference gradient against central
// differences; SiLU and its backward in the elementwise family; errors.
//
// Tolerances (|got - want| <= atol + rtol |want|, want from the stored inputs):
//   out, dup, silu  rtol 1e-6 + RoundingRtol: ExpF is within 2 ulp (2.4e-7,
//                   tests/kernels/fast_math_test.cc), then 1 + e, the division
//                   and one or two products round once each (6e-8): 4.8e-7;
//                   atol 2^-25 for f16 subnormal results
//   dgate, silu'    atol 2e-6 (times |dy up| <= 2, as here), rtol 1e-6: silu'(g)
//                   = s (1 + g (1 - s)) with s and 1 - s = sigmoid(-g) each
//                   within 4.2e-7; near its zero (g = -1.28) the sum cancels
//                   and the error follows its terms, s (1 + |g| (1 - s)) <= 1.1
#include "zeroshard/kernels/silu_gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/kernels/elementwise.h"
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

constexpr double kRtol = 1e-6;
constexpr double kGradAtol = 2e-6;
// f16 results below its smallest normal (6.1e-5) are subnormals 2^-24 apart:
// rounding one is off by up to 2^-25 absolute, whatever the relative error.
constexpr double kSubnormalAtol = 1.0 / (1 << 25);

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }
double SiluGrad(double x) { return Sigmoid(x) * (1 + x * (1 - Sigmoid(x))); }

std::vector<double> RefForward(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> y(g.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = Silu(g[i]) * u[i];
  return y;
}

struct RefGrads {
  std::vector<double> dgate, dup;
};

RefGrads RefBackward(const std::vector<double>& dy, const std::vector<double>& g, const std::vector<double>& u) {
  RefGrads r{std::vector<double>(g.size()), std::vector<double>(g.size())};
  for (size_t i = 0; i < g.size(); ++i) {
    r.dgate[i] = dy[i] * u[i] * SiluGrad(g[i]);
    r.dup[i] = dy[i] * Silu(g[i]);
  }
  return r;
}

const std::vector<Shape>& OddShapes() {
  static const std::vector<Shape> shapes = {{1}, {7}, {33, 7}, {3, 5, 257}, {2, 1, 3, 11}, {0, 4}};
  return shapes;
}

TEST(SiluGate, ReferenceGradientMatchesFiniteDifferences) {
  const std::vector<double> g = ToDoubles(RandomTensor({19}, DType::kF32, -8, 8, 1));
  const std::vector<double> u = ToDoubles(RandomTensor({19}, DType::kF32, -2, 2, 2));
  const std::vector<double> dy = ToDoubles(RandomTensor({19}, DType::kF32, -1, 1, 3));
  const RefGrads r = RefBackward(dy, g, u);
  ExpectClose(r.dgate, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(v, u)); }, g),
              1e-8, 1e-6, "dgate vs finite differences");
  ExpectClose(r.dup, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(g, v)); }, u),
              1e-8, 1e-6, "dup vs finite differences");
}

TEST(SiluGate, ForwardAndBackwardMatchDoubleReference) {
  uint64_t seed = 10;
  for (const Shape& shape : OddShapes()) {
    for (DType in : kFloatDTypes) {
      for (DType out_dtype : {in, DType::kF32}) {
        const Tensor g = RandomTensor(shape, in, -8, 8, ++seed);
        const Tensor u = RandomTensor(shape, in, -2, 2, ++seed);
        const Tensor dy = RandomTensor(shape, in, -1, 1, ++seed);
        const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(in), " -> ", DTypeName(out_dtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, out_dtype));
        ZS_ASSERT_OK(SiluGateForward(g, u, out));
        const double rt = RoundingRtol(out_dtype);
        ExpectClose(out, RefForward(ToDoubles(g), ToDoubles(u)), kSubnormalAtol, kRtol + rt, "out " + what);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dg, Tensor::Empty(shape, out_dtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor du, Tensor::Empty(shape, out_dtype));
        ZS_ASSERT_OK(SiluGateBackward(dy, g, u, dg, du));
        const RefGrads r = RefBackward(ToDoubles(dy), ToDoubles(g), ToDoubles(u));
        ExpectClose(dg, r.dgate, kGradAtol, kRtol + rt, "dgate " + what);
        ExpectClose(du, r.dup, kSubnormalAtol, kRtol + rt, "dup " + what);
      }
    }
  }
}

TEST(SiluGate, SaturatedGatesStayFinite) {
  // sigmoid(-1000) = 1 / (1 + e^1000): e^1000 overflows to +Inf in fp32 and
  // the quotient is 0, never NaN; at +1000 silu is the gate itself.
  const std::vector<float> gv = {-1000, -100, -88.5f, -30, 30, 88.5f, 100, 1000};
  ZS_ASSERT_OK_AND_ASSIGN(Tensor g, Tensor::FromVector(gv, {8}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u, Tensor::Full({8}, 1.5, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy, Tensor::Full({8}, 1.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({8}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dg, Tensor::Empty({8}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor du, Tensor::Empty({8}, DType::kF32));
  ZS_ASSERT_OK(SiluGateForward(g, u, out));
  ZS_ASSERT_OK(SiluGateBackward(dy, g, u, dg, du));
  const RefGrads r = RefBackward(ToDoubles(dy), ToDoubles(g), ToDoubles(u));
  // Values below the f32 range (e^-88 ~ 6e-39 is subnormal) come out as 0 or
  // a subnormal: an absolute 1e-37 beside them.
  ExpectClose(out, RefForward(ToDoubles(g), ToDoubles(u)), 1e-37, kRtol, "saturated out");
  ExpectClose(dg, r.dgate, 1e-35, kRtol, "saturated dgate");
  ExpectClose(du, r.dup, 1e-37, kRtol, "saturated dup");
}

TEST(SiluGate, StridedMixedAndInPlace) {
  // gate transposed, up a narrowed view of another dtype, out a strided slice.
  const Tensor gbase = RandomTensor({33, 9}, DType::kBF16, -6, 6, 30);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor g, gbase.Transpose(0, 1));  // [9, 33]
  const Tensor ubase = RandomTensor({9, 40}, DType::kF32, -2, 2, 31);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u, ubase.Narrow(1, 3, 33));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({9, 66}, 7.0, DType::kF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, big.Slice(1, 0, 66, 2));  // [9, 33], stride 2
  ZS_ASSERT_OK(SiluGateForward(g, u, out));
  const std::vector<double> want = RefForward(ToDoubles(g), ToDoubles(u));
  ExpectClose(out, want, kSubnormalAtol, kRtol + RoundingRtol(DType::kF16), "strided, mixed dtypes");
  const std::vector<double> bv = ToDoubles(big);
  for (int64_t i = 1; i < 9 * 66; i += 2) ASSERT_EQ(bv[i], 7.0) << i;

  // Backward: dgate in place over gate, dup in place over up (f32 copies).
  const Tensor dy = RandomTensor({9, 33}, DType::kF32, -1, 1, 32);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor g32, g.To(DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u32, u.Contiguous());
  const RefGrads r = RefBackward(ToDoubles(dy), ToDoubles(g32), ToDoubles(u32));
  ZS_ASSERT_OK(SiluGateBackward(dy, g32, u32, g32, u32));
  ExpectClose(g32, r.dgate, kGradAtol, kRtol, "dgate in place over gate");
  ExpectClose(u32, r.dup, 0, kRtol, "dup in place over up");
  // Only dup, into a transposed view; only dgate in place over dy.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor g2, g.To(DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dup_base, Tensor::Empty({33, 9}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dup, dup_base.Transpose(0, 1));
  ZS_ASSERT_OK(SiluGateBackward(dy, g2, u, Tensor(), dup));
  ExpectClose(dup, r.dup, 0, kRtol, "dup only, transposed");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy2, dy.Clone());
  ZS_ASSERT_OK(SiluGateBackward(dy2, g2, u, dy2, Tensor()));
  ExpectClose(dy2, r.dgate, kGradAtol, kRtol, "dgate only, in place over dy");
  // Forward in place over up.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u2, u.Contiguous());
  ZS_ASSERT_OK(SiluGateForward(g2, u2, u2));
  ExpectClose(u2, want, 0, kRtol, "out in place over up");
}

TEST(SiluGate, SiluIsAnElementwiseUnaryOp) {
  for (DType dtype : kFloatDTypes) {
    const Tensor x = RandomTensor({7, 33}, dtype, -10, 10, 40);
    const Tensor dy = RandomTensor({7, 33}, dtype, -1, 1, 41);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Unary(UnaryOp::kSilu, x));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({7, 33}, dtype));
    ZS_ASSERT_OK(SiluBackward(x, dy, dx));
    const std::vector<double> xv = ToDoubles(x), dv = ToDoubles(dy);
    std::vector<double> want(xv.size()), want_dx(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      want[i] = Silu(xv[i]);
      want_dx[i] = dv[i] * SiluGrad(xv[i]);
    }
    ExpectClose(y, want, kSubnormalAtol, kRtol + RoundingRtol(dtype), absl::StrCat("silu ", DTypeName(dtype)));
    // |dy| <= 1 here: half the gate's atol would do; the same bound is simpler.
    ExpectClose(dx, want_dx, kGradAtol, kRtol + RoundingRtol(dtype), absl::StrCat("silu' ", DTypeName(dtype)));
  }
}

TEST(SiluGate, BitwiseIndependentOfThreadsAndInstructionSet) {
  const Tensor g = RandomTensor({300, 257}, DType::kF32, -8, 8, 50);
  const Tensor u = RandomTensor({300, 257}, DType::kF32, -2, 2, 51);
  auto run = [&]() {
    Tensor out = Tensor::Empty({300, 257}, DType::kF32).value();
    Tensor dg = Tensor::Empty({300, 257}, DType::kF32).value();
    Tensor du = Tensor::Empty({300, 257}, DType::kF32).value();
    EXPECT_TRUE(SiluGateForward(g, u, out).ok());
    EXPECT_TRUE(SiluGateBackward(u, g, u, dg, du).ok());
    std::vector<double> all = ToDoubles(out);
    for (const Tensor* t : {&dg, &du}) {
      for (double v : ToDoubles(*t)) all.push_back(v);
    }
    return all;
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

TEST(SiluGate, Errors) {
  using absl::StatusCode::kInvalidArgument;
  const Tensor g = RandomTensor({3, 4}, DType::kF32, -1, 1, 1);
  const Tensor u = RandomTensor({3, 4}, DType::kF32, -1, 1, 2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u5, Tensor::Zeros({3, 5}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({3, 4}, DType::kI32));
  EXPECT_THAT(SiluGateForward(g, u5, out),
              StatusIs(kInvalidArgument, HasSubstr("SiluGateForward: up has shape [3, 5], expected [3, 4] (the shape of gate)")));
  EXPECT_THAT(SiluGateForward(ints, u, out),
              StatusIs(kInvalidArgument, HasSubstr("gate has dtype i32, expected f32, bf16 or f16")));
  EXPECT_THAT(SiluGateForward(g, u, Tensor()), StatusIs(kInvalidArgument, HasSubstr("out is undefined")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor row, Tensor::Zeros({4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor expanded, row.Expand({3, 4}));
  EXPECT_THAT(SiluGateForward(g, u, expanded),
              StatusIs(kInvalidArgument, HasSubstr("has a broadcast (stride 0) dimension")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, g.Narrow(0, 0, 2));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, g.Narrow(0, 1, 2));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u2, u.Narrow(0, 0, 2));
  EXPECT_THAT(SiluGateForward(a, u2, b), StatusIs(kInvalidArgument, HasSubstr("only exact in-place is allowed")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dg, Tensor::Empty({3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor du16, Tensor::Empty({3, 4}, DType::kF16));
  EXPECT_THAT(SiluGateBackward(u, g, u, dg, dg), StatusIs(kInvalidArgument, HasSubstr("overlap")));
  EXPECT_THAT(SiluGateBackward(u, g, u, dg, du16),
              StatusIs(kInvalidArgument, HasSubstr("dgate is f32 and dup f16, expected one dtype")));
  EXPECT_THAT(SiluGateBackward(u5, g, u, dg, Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("dy has shape [3, 5], expected [3, 4]")));
}

}  // namespace
}  // namespace zeroshard
