// Elementwise kernels against double-precision references: every op, every
// float dtype, odd shapes, broadcasting, strided views, in place, integers,
// every instruction set (bitwise equal to each other), and the errors.
#include "zeroshard/kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

double GeluRef(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double GeluGradRef(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  const double u = c * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

struct UnaryCase {
  UnaryOp op;
  float lo, hi;
  std::function<double(double)> ref;
};

std::vector<UnaryCase> UnaryCases() {
  return {
      {UnaryOp::kNeg, -5, 5, [](double x) { return -x; }},
      {UnaryOp::kExp, -10, 10,  // e^10 < 65504, the f16 maximum
       [](double x) { return std::exp(x); }},
      {UnaryOp::kLog, 1e-3f, 100, [](double x) { return std::log(x); }},
      {UnaryOp::kTanh, -6, 6, [](double x) { return std::tanh(x); }},
      {UnaryOp::kSqrt, 0, 100, [](double x) { return std::sqrt(x); }},
      {UnaryOp::kRsqrt, 1e-2f, 100, [](double x) { return 1 / std::sqrt(x); }},
      {UnaryOp::kRelu, -5, 5, [](double x) { return x > 0 ? x : 0; }},
      {UnaryOp::kGelu, -6, 6, GeluRef},
      {UnaryOp::kSigmoid, -10, 10, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {UnaryOp::kAbs, -5, 5, [](double x) { return std::fabs(x); }},
      {UnaryOp::kSquare, -5, 5, [](double x) { return x * x; }},
  };
}

const std::vector<Shape>& OddShapes() {
  static const std::vector<Shape> shapes = {{1}, {7}, {33}, {257}, {7, 33}, {3, 1, 257}};
  return shapes;
}

TEST(Elementwise, UnaryOpsMatchDoubleReference) {
  uint64_t seed = 1;
  for (const UnaryCase& c : UnaryCases()) {
    for (DType dtype : kFloatDTypes) {
      for (const Shape& shape : OddShapes()) {
        Tensor x = RandomTensor(shape, dtype, c.lo, c.hi, seed++);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Unary(c.op, x));
        std::vector<double> want;
        for (double v : ToDoubles(x)) want.push_back(c.ref(v));
        // fp32 math is accurate to a few ulp; 16-bit outputs add one rounding.
        ExpectClose(y, want, 1e-6, 4e-7 + RoundingRtol(dtype),
                    std::string(UnaryOpName(c.op)) + " " + std::string(DTypeName(dtype)) + " " +
                        ShapeToString(shape));
      }
    }
  }
}

TEST(Elementwise, UnaryOnNonContiguousViewsAndIntoBF16) {
  Tensor x = RandomTensor({33, 7}, DType::kF32, -3, 3, 11);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xt, x.Transpose(0, 1));  // [7, 33] strided
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({7, 33}, DType::kBF16));
  ZS_ASSERT_OK(Gelu(xt, out));
  std::vector<double> want;
  std::vector<double> xv = ToDoubles(x);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 33; ++j) want.push_back(GeluRef(xv[j * 7 + i]));
  ExpectClose(out, want, 1e-6, RoundingRtol(DType::kBF16), "gelu f32 -> bf16 strided");
  // Writing into a strided view of a larger buffer touches only the view.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({7, 66}, 100.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor even_cols, big.Slice(1, 0, 66, 2));
  ZS_ASSERT_OK(Relu(xt, even_cols));
  std::vector<double> bv = ToDoubles(big);
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 66; ++j) {
      const double expect = j % 2 == 1 ? 100.0 : std::max(0.0, xv[(j / 2) * 7 + i]);
      ASSERT_EQ(bv[i * 66 + j], expect) << i << "," << j;
    }
  }
}

struct BinaryCase {
  BinaryOp op;
  float lo, hi;
  std::function<double(double, double)> ref;
};

std::vector<BinaryCase> BinaryCases() {
  return {
      {BinaryOp::kAdd, -5, 5, [](double a, double b) { return a + b; }},
      {BinaryOp::kSub, -5, 5, [](double a, double b) { return a - b; }},
      {BinaryOp::kMul, -5, 5, [](double a, double b) { return a * b; }},
      {BinaryOp::kDiv, 0.5f, 5, [](double a, double b) { return a / b; }},
      {BinaryOp::kPow, 0.5f, 3, [](double a, double b) { return std::pow(a, b); }},
      {BinaryOp::kMax, -5, 5, [](double a, double b) { return std::max(a, b); }},
      {BinaryOp::kMin, -5, 5, [](double a, double b) { return std::min(a, b); }},
      {BinaryOp::kGeluBackward, -5, 5, [](double x, double dy) { return dy * GeluGradRef(x); }},
      {BinaryOp::kReluBackward, -5, 5, [](double x, double dy) { return x > 0 ? dy : 0; }},
  };
}

// out[i, j] from a [7, 1] and b [1, 33] (and every other broadcast pattern below).
TEST(Elementwise, BinaryOpsBroadcastAndMatchReference) {
  const std::vector<std::pair<Shape, Shape>> patterns = {
      {{257}, {257}}, {{7, 1}, {1, 33}}, {{7, 33}, {33}}, {{1}, {257}}, {{7, 33}, {1}},
      {{3, 1, 5}, {4, 1}}};
  uint64_t seed = 100;
  for (const BinaryCase& c : BinaryCases()) {
    for (DType dtype : kFloatDTypes) {
      for (const auto& [sa, sb] : patterns) {
        Tensor a = RandomTensor(sa, dtype, c.lo, c.hi, seed++);
        Tensor b = RandomTensor(sb, dtype, c.lo, c.hi, seed++);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Binary(c.op, a, b));
        ZS_ASSERT_OK_AND_ASSIGN(Shape shape, BroadcastShapes(sa, sb));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor ae, a.Expand(shape));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor be, b.Expand(shape));
        const std::vector<double> av = ToDoubles(ae), bv = ToDoubles(be);
        std::vector<double> want(av.size());
        for (size_t i = 0; i < av.size(); ++i) want[i] = c.ref(av[i], bv[i]);
        ExpectClose(out, want, 1e-6, 1e-6 + RoundingRtol(dtype),
                    std::string(BinaryOpName(c.op)) + " " + std::string(DTypeName(dtype)) + " " +
                        ShapeToString(sa) + " x " + ShapeToString(sb));
      }
    }
  }
}

TEST(Elementwise, MixedFloatDTypesComputeInFp32AndRoundOnce) {
  Tensor a = RandomTensor({33}, DType::kBF16, -4, 4, 7);
  Tensor b = RandomTensor({33}, DType::kF32, -4, 4, 8);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({33}, DType::kF16));
  ZS_ASSERT_OK(Mul(a, b, out));
  const std::vector<double> av = ToDoubles(a), bv = ToDoubles(b), got = ToDoubles(out);
  for (int i = 0; i < 33; ++i) {
    const float exact = static_cast<float>(av[i]) * static_cast<float>(bv[i]);
    EXPECT_EQ(got[i], static_cast<float>(Float16(exact))) << i;  // one rounding
  }
  // Allocating form with mixed inputs gives f32.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, Binary(BinaryOp::kAdd, a, b));
  EXPECT_EQ(s.dtype(), DType::kF32);
}

TEST(Elementwise, InPlaceAndAffine) {
  Tensor x = RandomTensor({257}, DType::kF32, -2, 2, 3);
  const std::vector<double> before = ToDoubles(x);
  ZS_ASSERT_OK(Add(x, x, x));
  ZS_ASSERT_OK(Scale(x, 0.25, x));
  ZS_ASSERT_OK(Affine(x, 2.0, 1.0, x));
  std::vector<double> want;
  for (double v : before) want.push_back(2 * (v * 2 * 0.25) + 1);
  ExpectClose(x, want, 1e-6, 1e-6, "in place");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sq, Tensor::EmptyLike(x));
  ZS_ASSERT_OK(PowScalar(x, 2.0, sq));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor cube, Tensor::EmptyLike(x));
  Tensor pos = RandomTensor({257}, DType::kF32, 0.1f, 3, 4);
  ZS_ASSERT_OK(PowScalar(pos, 3.0, cube));
  std::vector<double> wsq, wcube;
  for (double v : ToDoubles(x)) wsq.push_back(v * v);
  for (double v : ToDoubles(pos)) wcube.push_back(v * v * v);
  ExpectClose(sq, wsq, 1e-6, 1e-6, "x^2");
  ExpectClose(cube, wcube, 1e-6, 1e-6, "x^3");
}

TEST(Elementwise, IntegerOps) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::FromVector(std::vector<int64_t>{-3, 5, 7, 1 << 20}, {4}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::FromVector(std::vector<int64_t>{2}, {1}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, Binary(BinaryOp::kMul, a, b));
  EXPECT_EQ(s.dtype(), DType::kI64);
  EXPECT_EQ(s.ToVector<int64_t>().value(), (std::vector<int64_t>{-6, 10, 14, 1 << 21}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor r, Unary(UnaryOp::kRelu, a));
  EXPECT_EQ(r.ToVector<int64_t>().value(), (std::vector<int64_t>{0, 5, 7, 1 << 20}));
}

TEST(Elementwise, EveryInstructionSetGivesTheSameBits) {
  Tensor x = RandomTensor({4099}, DType::kF32, -8, 8, 21);
  Tensor y = RandomTensor({4099}, DType::kBF16, -8, 8, 22);
  std::vector<std::vector<double>> results;
  for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
    cpu::SetActiveCpuIsa(isa);
    std::vector<double> r;
    for (const UnaryCase& c : UnaryCases()) {
      ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Unary(c.op, x));
      for (double v : ToDoubles(out)) r.push_back(v);
    }
    ZS_ASSERT_OK_AND_ASSIGN(Tensor g, Binary(BinaryOp::kGeluBackward, y, x));
    for (double v : ToDoubles(g)) r.push_back(v);
    results.push_back(r);
  }
  cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(results[i].size(), results[0].size());
    for (size_t j = 0; j < results[0].size(); ++j) {
      if (std::isnan(results[0][j]) && std::isnan(results[i][j])) continue;
      ASSERT_EQ(results[i][j], results[0][j]) << "isa #" << i << " element " << j;
    }
  }
}

TEST(Elementwise, LargeTensorsUseEveryThreadAndStayExact) {
  Tensor a = RandomTensor({1 << 20}, DType::kF32, -1, 1, 5);
  Tensor b = RandomTensor({1 << 20}, DType::kF32, -1, 1, 6);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor c, Binary(BinaryOp::kSub, a, b));
  const std::vector<double> av = ToDoubles(a), bv = ToDoubles(b), cv = ToDoubles(c);
  for (size_t i = 0; i < cv.size(); i += 1021) {
    ASSERT_EQ(cv[i], static_cast<float>(av[i]) - static_cast<float>(bv[i]));
  }
}

TEST(Elementwise, Errors) {
  Tensor a = RandomTensor({4, 3}, DType::kF32, -1, 1, 1);
  Tensor b = RandomTensor({2, 3}, DType::kF32, -1, 1, 2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({4, 3}, DType::kF32));
  EXPECT_THAT(Add(a, b, out), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("do not broadcast")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wrong, Tensor::Empty({4, 1}, DType::kF32));
  EXPECT_THAT(Add(a, a, wrong),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Add: inputs of shapes [4, 3] and [4, 3] broadcast to [4, 3] but "
                                 "the output is [4, 1]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor shifted, a.Narrow(0, 1, 3));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor head, a.Narrow(0, 0, 3));
  EXPECT_THAT(Exp(head, shifted), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("partially overlaps")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({4, 3}, DType::kI32));
  EXPECT_THAT(Exp(ints, ints), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("Exp: not defined for integer dtype i32")));
  EXPECT_THAT(Add(ints, a, out), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("integer tensors must all share one dtype")));
  EXPECT_THAT(Exp(Tensor(), out), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("undefined input")));
}

}  // namespace
}  // namespace zeroshard
