// RMSNorm forward and backward against double-precision references on odd
// shapes, every dtype, the weight left out, strided and in-place views; the
// reference gradients against central differences; accumulate vs overwrite;
// bitwise independence of thread count and instruction set; errors.
//
// Tolerances (|got - want| <= atol + rtol |want|, want from the stored inputs;
// u = 2^-24, the fp32 unit roundoff):
//   rstd      rtol 2e-6: the sum of C positive squares in 16 lanes is within
//             (C/16 + 16) u relative (1.9e-6 for C = 257, the widest here),
//             halved by the square root, plus two roundings (sqrt, 1/x)
//   out       rtol 4e-6 + RoundingRtol(out): rstd's, plus two products
//   dx        atol 2e-5, rtol 1e-4 + RoundingRtol(dx): rstd (g - xhat mean(g xhat))
//             from the saved rstd (its 1.1e-6 enters the second term cubed),
//             terms up to ~2 that may cancel (LayerNorm's bound)
//   dweight   atol 4e-6 * rows: fp32 sums of |dy xhat| <= 2 over the rows, each
//             off by rstd's relative error; rtol 1e-5 + RoundingRtol
#include "zeroshard/kernels/rmsnorm.h"

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

constexpr double kEps = 1e-5;

// ---------------------------------------------------------------- references

struct RefOut {
  std::vector<double> y, rstd;
};

// transformers' LlamaRMSNorm in double: x rsqrt(mean(x^2) + eps) w.
RefOut RefForward(const std::vector<double>& x, const std::vector<double>& w, int64_t cols,
                  double eps = kEps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  RefOut o{std::vector<double>(x.size()), std::vector<double>(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < cols; ++i) ms += x[r * cols + i] * x[r * cols + i];
    const double rs = 1 / std::sqrt(ms / cols + eps);
    for (int64_t i = 0; i < cols; ++i) o.y[r * cols + i] = x[r * cols + i] * rs * w[i];
    o.rstd[r] = rs;
  }
  return o;
}

struct RefGrads {
  std::vector<double> dx, dw;
};

// The analytic gradient of sum(dy * y) given the saved rstd.
RefGrads RefBackward(const std::vector<double>& dy, const std::vector<double>& x,
                     const std::vector<double>& w, const std::vector<double>& rstd, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  RefGrads g{std::vector<double>(x.size()), std::vector<double>(cols)};
  for (int64_t r = 0; r < rows; ++r) {
    double mgx = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const double xhat = x[r * cols + i] * rstd[r];
      mgx += dy[r * cols + i] * w[i] * xhat;
      g.dw[i] += dy[r * cols + i] * xhat;
    }
    mgx /= cols;
    for (int64_t i = 0; i < cols; ++i) {
      const double xhat = x[r * cols + i] * rstd[r];
      g.dx[r * cols + i] = rstd[r] * (dy[r * cols + i] * w[i] - xhat * mgx);
    }
  }
  return g;
}

const std::vector<Shape>& OddShapes() {
  static const std::vector<Shape> shapes = {{1}, {7}, {1, 33}, {7, 257}, {33, 7}, {3, 5, 33}, {257, 1}};
  return shapes;
}

Shape Lead(const Shape& s) { return Shape(s.begin(), s.end() - 1); }
int64_t Rows(const Shape& s) { return NumElements(s) / s.back(); }

// ---------------------------------------------------------------- forward

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  uint64_t seed = 1;
  for (const Shape& shape : OddShapes()) {
    const int64_t c = shape.back();
    for (DType in : kFloatDTypes) {
      for (DType out_dtype : {in, DType::kF32}) {
        for (bool weighted : {true, false}) {
          Tensor x = RandomTensor(shape, in, -2, 3, seed++);
          Tensor w = weighted ? RandomTensor({c}, DType::kBF16, 0.5, 1.5, seed++) : Tensor();
          ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, out_dtype));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty(Lead(shape), DType::kF32));
          ZS_ASSERT_OK(RmsNormForward(x, w, kEps, out, rstd));
          const RefOut ref = RefForward(ToDoubles(x), weighted ? ToDoubles(w) : std::vector<double>(c, 1.0), c);
          const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(in), " -> ",
                                                DTypeName(out_dtype), weighted ? "" : " no weight");
          ExpectClose(out, ref.y, 0, 4e-6 + RoundingRtol(out_dtype), "out " + what);
          ExpectClose(rstd, ref.rstd, 0, 2e-6, "rstd " + what);
        }
      }
    }
  }
}

TEST(RmsNorm, LargeAndTinyRowsStayFinite) {
  // |x| ~ 1e18: x^2 ~ 1e36 stays below the f32 maximum (3.4e38) after the
  // mean; |x| ~ 1e-20: x^2 underflows to 0 and rstd = 1/sqrt(eps).
  for (float scale : {1e18f, 1e-20f}) {
    Tensor x = RandomTensor({3, 40}, DType::kF32, -scale, scale, 5);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({3, 40}, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({3}, DType::kF32));
    ZS_ASSERT_OK(RmsNormForward(x, Tensor(), kEps, out, rstd));
    const RefOut ref = RefForward(ToDoubles(x), std::vector<double>(40, 1.0), 40);
    // Squares near 1e-40 are subnormal in f32 (flushed or not): the sum is
    // then off by up to 1e-38 absolute, nothing beside eps.
    ExpectClose(rstd, ref.rstd, 0, 2e-6, absl::StrCat("rstd at scale ", scale));
    ExpectClose(out, ref.y, 1e-30, 4e-6, absl::StrCat("out at scale ", scale));
  }
}

TEST(RmsNorm, ForwardStridedAndInPlace) {
  // Transposed x; out a column slice of a bigger buffer; rstd a strided view;
  // a strided weight.
  Tensor base = RandomTensor({33, 7}, DType::kF16, -2, 2, 20);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, base.Transpose(0, 1));  // [7, 33]
  Tensor w = RandomTensor({66}, DType::kF32, 0.5, 1.5, 21);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ws, w.Slice(0, 0, 66, 2));  // [33], stride 2
  ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({7, 40}, 9.0, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, big.Narrow(1, 4, 33));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd_buf, Tensor::Full({7, 3}, 9.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, rstd_buf.Select(1, 2));  // [7], stride 3
  ZS_ASSERT_OK(RmsNormForward(x, ws, kEps, out, rstd));
  const RefOut ref = RefForward(ToDoubles(x), ToDoubles(ws), 33);
  ExpectClose(out, ref.y, 0, 4e-6 + RoundingRtol(DType::kBF16), "strided out");
  ExpectClose(rstd, ref.rstd, 0, 2e-6, "strided rstd");
  const std::vector<double> bv = ToDoubles(big), rv = ToDoubles(rstd_buf);
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t c : {0, 3, 37, 39}) ASSERT_EQ(bv[r * 40 + c], 9.0);
    ASSERT_EQ(rv[r * 3], 9.0);
    ASSERT_EQ(rv[r * 3 + 1], 9.0);
  }
  // In place: out is x.
  Tensor y = RandomTensor({3, 5, 33}, DType::kBF16, -2, 2, 23);
  const RefOut ref2 = RefForward(ToDoubles(y), ToDoubles(ws), 33);
  ZS_ASSERT_OK(RmsNormForward(y, ws, kEps, y, Tensor()));
  ExpectClose(y, ref2.y, 0, 4e-6 + RoundingRtol(DType::kBF16), "in place");
}

// ---------------------------------------------------------------- backward

TEST(RmsNorm, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  const std::vector<double> x = ToDoubles(RandomTensor({rows, cols}, DType::kF32, -2, 2, 30));
  const std::vector<double> w = ToDoubles(RandomTensor({cols}, DType::kF32, 0.5, 1.5, 31));
  const std::vector<double> dy = ToDoubles(RandomTensor({rows, cols}, DType::kF32, -1, 1, 33));
  const RefOut f = RefForward(x, w, cols);
  const RefGrads g = RefBackward(dy, x, w, f.rstd, cols);
  ExpectClose(g.dx, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(v, w, cols).y); }, x),
              1e-7, 1e-6, "dx vs finite differences");
  ExpectClose(g.dw, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(x, v, cols).y); }, w),
              1e-7, 1e-6, "dweight vs finite differences");
}

TEST(RmsNorm, BackwardMatchesDoubleReference) {
  uint64_t seed = 100;
  for (const Shape& shape : OddShapes()) {
    const int64_t c = shape.back(), rows = Rows(shape);
    for (DType in : kFloatDTypes) {
      for (DType out_dtype : {in, DType::kF32}) {
        for (bool weighted : {true, false}) {
          Tensor x = RandomTensor(shape, in, -2, 3, seed++);
          Tensor dy = RandomTensor(shape, in, -1, 1, seed++);
          Tensor w = weighted ? RandomTensor({c}, in, 0.5, 1.5, seed++) : Tensor();
          ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, in));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty(Lead(shape), DType::kF32));
          ZS_ASSERT_OK(RmsNormForward(x, w, kEps, out, rstd));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, out_dtype));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty({c}, out_dtype));
          ZS_ASSERT_OK(RmsNormBackward(dy, x, rstd, w, dx, dw, GradMode::kOverwrite));
          const RefGrads g = RefBackward(ToDoubles(dy), ToDoubles(x),
                                         weighted ? ToDoubles(w) : std::vector<double>(c, 1.0),
                                         ToDoubles(rstd), c);
          const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(in), " -> ",
                                                DTypeName(out_dtype), weighted ? "" : " no weight");
          const double rt = RoundingRtol(out_dtype);
          ExpectClose(dx, g.dx, 2e-5, 1e-4 + rt, "dx " + what);
          ExpectClose(dw, g.dw, 4e-6 * rows, 1e-5 + rt, "dweight " + what);
        }
      }
    }
  }
}

TEST(RmsNorm, BackwardOptionalOutputsStridesAndInPlace) {
  const Shape shape = {9, 33};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 40);
  Tensor w = RandomTensor({33}, DType::kF32, 0.5, 1.5, 41);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({9}, DType::kF32));
  ZS_ASSERT_OK(RmsNormForward(x, w, kEps, out, rstd));
  Tensor dyb = RandomTensor({33, 9}, DType::kBF16, -1, 1, 42);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy, dyb.Transpose(0, 1));  // strided, and another dtype than x
  const RefGrads g = RefBackward(ToDoubles(dy), ToDoubles(x), ToDoubles(w), ToDoubles(rstd), 33);
  // Only dweight, into a strided slice of a flat gradient buffer.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Zeros({100}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, flat.Slice(0, 10, 76, 2));  // [33], stride 2
  ZS_ASSERT_OK(RmsNormBackward(dy, x, rstd, w, Tensor(), dw, GradMode::kOverwrite));
  ExpectClose(dw, g.dw, 4e-6 * 9, 1e-5, "dweight only");
  const std::vector<double> fv = ToDoubles(flat);
  for (int64_t i = 0; i < 100; ++i) {
    if (i < 10 || i >= 76 || i % 2 == 1) {
      ASSERT_EQ(fv[i], 0.0) << i;
    }
  }
  // dx in place over dy (an f32 copy of it, same values), beside dweight.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy32, dy.To(DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw2, Tensor::Empty({33}, DType::kF32));
  ZS_ASSERT_OK(RmsNormBackward(dy32, x, rstd, w, dy32, dw2, GradMode::kOverwrite));
  ExpectClose(dy32, g.dx, 2e-5, 1e-4, "dx in place over dy");
  ExpectClose(dw2, g.dw, 4e-6 * 9, 1e-5, "dweight beside an in-place dx");
  // Only dx, in place over x.
  ZS_ASSERT_OK(RmsNormBackward(dy, x, rstd, w, x, Tensor(), GradMode::kOverwrite));
  ExpectClose(x, g.dx, 2e-5, 1e-4, "dx in place over x");
}

TEST(RmsNorm, AccumulateAddsToTheWeightGradient) {
  const Shape shape = {7, 33};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 50);
  Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, 51);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({7}, DType::kF32));
  ZS_ASSERT_OK(RmsNormForward(x, Tensor(), kEps, out, rstd));
  const RefGrads g = RefBackward(ToDoubles(dy), ToDoubles(x), std::vector<double>(33, 1.0), ToDoubles(rstd), 33);
  for (DType dtype : kFloatDTypes) {
    Tensor dw = RandomTensor({33}, dtype, -5, 5, 52);
    const std::vector<double> dw0 = ToDoubles(dw);
    ZS_ASSERT_OK(RmsNormBackward(dy, x, rstd, Tensor(), Tensor(), dw, GradMode::kAccumulate));
    std::vector<double> want(33);
    for (int i = 0; i < 33; ++i) want[i] = dw0[i] + g.dw[i];
    ExpectClose(dw, want, 4e-6 * 7, 1e-5 + RoundingRtol(dtype),
                absl::StrCat("accumulated dweight ", DTypeName(dtype)));
    ZS_ASSERT_OK(RmsNormBackward(dy, x, rstd, Tensor(), Tensor(), dw, GradMode::kOverwrite));
    ExpectClose(dw, g.dw, 4e-6 * 7, 1e-5 + RoundingRtol(dtype), "overwritten dweight");
  }
  // No rows: overwrite writes the empty sum, accumulate leaves the gradient.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x0, Tensor::Zeros({0, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor r0, Tensor::Zeros({0}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw4, Tensor::Full({4}, 2.0, DType::kF32));
  ZS_ASSERT_OK(RmsNormBackward(x0, x0, r0, Tensor(), Tensor(), dw4, GradMode::kAccumulate));
  EXPECT_EQ(ToDoubles(dw4), std::vector<double>(4, 2.0));
  ZS_ASSERT_OK(RmsNormBackward(x0, x0, r0, Tensor(), Tensor(), dw4, GradMode::kOverwrite));
  EXPECT_EQ(ToDoubles(dw4), std::vector<double>(4, 0.0));
}

// ---------------------------------------------------------------- determinism

TEST(RmsNorm, BitwiseIndependentOfThreadsAndInstructionSet) {
  // 1001 rows: past the parallel threshold, 32 row blocks for dweight.
  const Shape shape = {1001, 65};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 60);
  Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, 61);
  Tensor w = RandomTensor({65}, DType::kF32, 0.5, 1.5, 62);
  auto run = [&]() {
    Tensor out = Tensor::Empty(shape, DType::kF32).value();
    Tensor rstd = Tensor::Empty({1001}, DType::kF32).value();
    Tensor dx = Tensor::Empty(shape, DType::kF32).value();
    Tensor dw = Tensor::Empty({65}, DType::kF32).value();
    EXPECT_TRUE(RmsNormForward(x, w, kEps, out, rstd).ok());
    EXPECT_TRUE(RmsNormBackward(dy, x, rstd, w, dx, dw, GradMode::kOverwrite).ok());
    std::vector<double> all;
    for (const Tensor* t : {&out, &rstd, &dx, &dw}) {
      for (double v : ToDoubles(*t)) all.push_back(v);
    }
    return all;
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

// ---------------------------------------------------------------- errors

TEST(RmsNorm, Errors) {
  using absl::StatusCode::kInvalidArgument;
  Tensor x = RandomTensor({3, 4}, DType::kF32, -1, 1, 1);
  Tensor w = RandomTensor({4}, DType::kF32, -1, 1, 2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({3}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({3, 4}, DType::kI32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor w5, Tensor::Zeros({5}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor empty_c, Tensor::Zeros({3, 0}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd_bf16, Tensor::Zeros({3}, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd4, Tensor::Zeros({4}, DType::kF32));
  EXPECT_THAT(RmsNormForward(ints, w, kEps, out, rstd),
              StatusIs(kInvalidArgument, HasSubstr("RmsNormForward: x has dtype i32, expected f32, bf16 or f16")));
  EXPECT_THAT(RmsNormForward(empty_c, Tensor(), kEps, empty_c, Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("x has shape [3, 0], expected a last dimension C >= 1")));
  EXPECT_THAT(RmsNormForward(x, w5, kEps, out, rstd),
              StatusIs(kInvalidArgument, HasSubstr("weight has shape [5], expected [4] (C, the last dimension of x)")));
  EXPECT_THAT(RmsNormForward(x, w, std::nan(""), out, rstd),
              StatusIs(kInvalidArgument, HasSubstr("expected a finite value >= 0")));
  EXPECT_THAT(RmsNormForward(x, w, kEps, w5, rstd),
              StatusIs(kInvalidArgument, HasSubstr("out has shape [5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(RmsNormForward(x, w, kEps, out, rstd_bf16),
              StatusIs(kInvalidArgument, HasSubstr("rstd has dtype bf16, expected f32")));
  EXPECT_THAT(RmsNormForward(x, w, kEps, out, rstd4),
              StatusIs(kInvalidArgument, HasSubstr("rstd has shape [4], expected [3] (one value per row of [3, 4])")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x_rows, x.Narrow(0, 0, 2));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x_rows2, x.Narrow(0, 1, 2));
  EXPECT_THAT(RmsNormForward(x_rows, Tensor(), kEps, x_rows2, Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("only exact in-place is allowed")));
  // Backward.
  EXPECT_THAT(RmsNormBackward(out, x, Tensor(), w, out, Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument,
                       HasSubstr("RmsNormBackward: rstd is undefined; expected the one RmsNormForward saved")));
  EXPECT_THAT(RmsNormBackward(w5, x, rstd, w, Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dy has shape [5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(RmsNormBackward(out, x, rstd, w, w5, Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dx has shape [5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(RmsNormBackward(out, x, rstd_bf16, w, Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("rstd has dtype bf16, expected f32")));
  EXPECT_THAT(RmsNormBackward(out, x, rstd, w, Tensor(), w5, GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dweight has shape [5], expected [4]")));
  EXPECT_THAT(RmsNormBackward(out, x, rstd, w, Tensor(), w, GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("the output dweight")));
  // CUDA tensors over host memory: without a device the launch fails cleanly.
  std::vector<float> h1(12), h2(12), h3(3);
  const Tensor gx = Tensor::Wrap(h1.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  const Tensor gy = Tensor::Wrap(h2.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  const Tensor gr = Tensor::Wrap(h3.data(), {3}, DType::kF32, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) {
    EXPECT_FALSE(RmsNormForward(gx, Tensor(), kEps, gy, gr).ok());
    EXPECT_FALSE(RmsNormBackward(gy, gx, gr, Tensor(), Tensor(), Tensor(), GradMode::kOverwrite).ok());
  }
  EXPECT_THAT(RmsNormForward(gx, w, kEps, gy, Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("tensors on different devices")));
}

}  // namespace
}  // namespace zeroshard
