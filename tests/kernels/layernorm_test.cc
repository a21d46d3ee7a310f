// LayerNorm forward and backward against double-precision references on odd
// shapes, every dtype, optional tensors left out, strided and in-place views;
// the reference gradients against central differences; accumulate vs
// overwrite; bitwise independence of thread count and instruction set; errors.
//
// Tolerances (|got - want| <= atol + rtol |want|, want from the stored inputs):
//   out       atol 1e-5, rtol 1e-5 + RoundingRtol(out dtype)
//   mean      atol 1e-6, rtol 1e-6;   rstd  rtol 1e-5
//   dx        atol 2e-5, rtol 1e-4 + RoundingRtol(dx dtype)
//   dw, db    atol 2e-6 * rows (an fp32 sum over rows), rtol 1e-5 + RoundingRtol
#include "zeroshard/kernels/layernorm.h"

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
  std::vector<double> y, mean, rstd;
};

RefOut RefForward(const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& b, int64_t cols, double eps = kEps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  RefOut o{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < cols; ++i) m += x[r * cols + i];
    m /= cols;
    for (int64_t i = 0; i < cols; ++i) v += (x[r * cols + i] - m) * (x[r * cols + i] - m);
    v /= cols;
    const double rs = 1 / std::sqrt(v + eps);
    for (int64_t i = 0; i < cols; ++i) o.y[r * cols + i] = (x[r * cols + i] - m) * rs * w[i] + b[i];
    o.mean[r] = m;
    o.rstd[r] = rs;
  }
  return o;
}

struct RefGrads {
  std::vector<double> dx, dw, db;
};

// The analytic gradient of sum(dy * y) given the saved mean and rstd.
RefGrads RefBackward(const std::vector<double>& dy, const std::vector<double>& x,
                     const std::vector<double>& w, const std::vector<double>& mean,
                     const std::vector<double>& rstd, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  RefGrads g{std::vector<double>(x.size()), std::vector<double>(cols), std::vector<double>(cols)};
  for (int64_t r = 0; r < rows; ++r) {
    double mg = 0, mgx = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const double xhat = (x[r * cols + i] - mean[r]) * rstd[r];
      mg += dy[r * cols + i] * w[i];
      mgx += dy[r * cols + i] * w[i] * xhat;
      g.dw[i] += dy[r * cols + i] * xhat;
      g.db[i] += dy[r * cols + i];
    }
    mg /= cols;
    mgx /= cols;
    for (int64_t i = 0; i < cols; ++i) {
      const double xhat = (x[r * cols + i] - mean[r]) * rstd[r];
      g.dx[r * cols + i] = rstd[r] * (dy[r * cols + i] * w[i] - mg - xhat * mgx);
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

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  uint64_t seed = 1;
  for (const Shape& shape : OddShapes()) {
    const int64_t c = shape.back();
    for (DType in : kFloatDTypes) {
      for (DType out_dtype : {in, DType::kF32}) {
        for (bool affine : {true, false}) {
          Tensor x = RandomTensor(shape, in, -2, 3, seed++);
          Tensor w = affine ? RandomTensor({c}, DType::kBF16, 0.5, 1.5, seed++) : Tensor();
          Tensor b = affine ? RandomTensor({c}, DType::kF32, -1, 1, seed++) : Tensor();
          ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, out_dtype));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty(Lead(shape), DType::kF32));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({Rows(shape)}, DType::kF32));
          ZS_ASSERT_OK(LayerNormForward(x, w, b, kEps, out, mean, rstd));
          const RefOut ref = RefForward(ToDoubles(x), affine ? ToDoubles(w) : std::vector<double>(c, 1.0),
                                        affine ? ToDoubles(b) : std::vector<double>(c, 0.0), c);
          const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(in), " -> ",
                                                DTypeName(out_dtype), affine ? "" : " no affine");
          ExpectClose(out, ref.y, 1e-5, 1e-5 + RoundingRtol(out_dtype), "out " + what);
          ExpectClose(mean, ref.mean, 1e-6, 1e-6, "mean " + what);
          ExpectClose(rstd, ref.rstd, 0, 1e-5, "rstd " + what);
        }
      }
    }
  }
}

TEST(LayerNorm, ForwardLargeOffsetKeepsTheVariance) {
  // Mean 300, spread +-1: E[x^2] - mean^2 in fp32 would be off by ~ulp(9e4) =
  // 0.008 against a variance of 0.33 (1% in rstd); the two-pass variance is
  // limited only by the fp32 mean (ulp(300) / 2 = 1.5e-5, times rstd ~ 1.7).
  Tensor x = RandomTensor({5, 257}, DType::kF32, 299, 301, 7);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({5, 257}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({5}, DType::kF32));
  ZS_ASSERT_OK(LayerNormForward(x, Tensor(), Tensor(), kEps, out, Tensor(), rstd));
  const RefOut ref = RefForward(ToDoubles(x), std::vector<double>(257, 1.0), std::vector<double>(257, 0.0), 257);
  ExpectClose(rstd, ref.rstd, 0, 1e-4, "rstd near a large mean");
  ExpectClose(out, ref.y, 1e-4, 1e-4, "out near a large mean");
}

TEST(LayerNorm, ForwardStridedAndInPlace) {
  // Transposed x; out a column slice of a bigger buffer; mean and rstd strided
  // views into bigger buffers.
  Tensor base = RandomTensor({33, 7}, DType::kF16, -2, 2, 20);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, base.Transpose(0, 1));  // [7, 33]
  Tensor w = RandomTensor({66}, DType::kF32, 0.5, 1.5, 21);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ws, w.Slice(0, 0, 66, 2));  // [33], stride 2
  Tensor b = RandomTensor({33}, DType::kF16, -1, 1, 22);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({7, 40}, 9.0, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, big.Narrow(1, 4, 33));
  // (Two interleaved views of one buffer would count as overlapping: the
  // overlap check compares address ranges.)
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean_buf, Tensor::Full({7, 2}, 9.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd_buf, Tensor::Full({7, 3}, 9.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, mean_buf.Select(1, 0));  // [7], stride 2
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, rstd_buf.Select(1, 2));  // [7], stride 3
  ZS_ASSERT_OK(LayerNormForward(x, ws, b, kEps, out, mean, rstd));
  const RefOut ref = RefForward(ToDoubles(x), ToDoubles(ws), ToDoubles(b), 33);
  ExpectClose(out, ref.y, 1e-5, 1e-5 + RoundingRtol(DType::kBF16), "strided out");
  ExpectClose(mean, ref.mean, 1e-6, 1e-6, "strided mean");
  ExpectClose(rstd, ref.rstd, 0, 1e-5, "strided rstd");
  const std::vector<double> bv = ToDoubles(big);
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t c : {0, 3, 37, 39}) ASSERT_EQ(bv[r * 40 + c], 9.0);
  }
  // In place: out is x.
  Tensor y = RandomTensor({3, 5, 33}, DType::kBF16, -2, 2, 23);
  const RefOut ref2 = RefForward(ToDoubles(y), ToDoubles(ws), ToDoubles(b), 33);
  ZS_ASSERT_OK(LayerNormForward(y, ws, b, kEps, y, Tensor(), Tensor()));
  ExpectClose(y, ref2.y, 1e-5, 1e-5 + RoundingRtol(DType::kBF16), "in place");
}

// ---------------------------------------------------------------- backward

TEST(LayerNorm, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  const std::vector<double> x = ToDoubles(RandomTensor({rows, cols}, DType::kF32, -2, 2, 30));
  const std::vector<double> w = ToDoubles(RandomTensor({cols}, DType::kF32, 0.5, 1.5, 31));
  const std::vector<double> b = ToDoubles(RandomTensor({cols}, DType::kF32, -1, 1, 32));
  const std::vector<double> dy = ToDoubles(RandomTensor({rows, cols}, DType::kF32, -1, 1, 33));
  const RefOut f = RefForward(x, w, b, cols);
  const RefGrads g = RefBackward(dy, x, w, f.mean, f.rstd, cols);
  ExpectClose(g.dx, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(v, w, b, cols).y); }, x),
              1e-7, 1e-6, "dx vs finite differences");
  ExpectClose(g.dw, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(x, v, b, cols).y); }, w),
              1e-7, 1e-6, "dweight vs finite differences");
  ExpectClose(g.db, NumericGradient([&](const std::vector<double>& v) { return Dot(dy, RefForward(x, w, v, cols).y); }, b),
              1e-7, 1e-6, "dbias vs finite differences");
}

TEST(LayerNorm, BackwardMatchesDoubleReference) {
  uint64_t seed = 100;
  for (const Shape& shape : OddShapes()) {
    const int64_t c = shape.back(), rows = Rows(shape);
    for (DType in : kFloatDTypes) {
      for (DType out_dtype : {in, DType::kF32}) {
        for (bool affine : {true, false}) {
          Tensor x = RandomTensor(shape, in, -2, 3, seed++);
          Tensor dy = RandomTensor(shape, in, -1, 1, seed++);
          Tensor w = affine ? RandomTensor({c}, in, 0.5, 1.5, seed++) : Tensor();
          ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, in));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty(Lead(shape), DType::kF32));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty(Lead(shape), DType::kF32));
          ZS_ASSERT_OK(LayerNormForward(x, w, Tensor(), kEps, out, mean, rstd));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, out_dtype));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty({c}, out_dtype));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({c}, out_dtype));
          ZS_ASSERT_OK(LayerNormBackward(dy, x, mean, rstd, w, dx, dw, db, GradMode::kOverwrite));
          const RefGrads g = RefBackward(ToDoubles(dy), ToDoubles(x),
                                         affine ? ToDoubles(w) : std::vector<double>(c, 1.0),
                                         ToDoubles(mean), ToDoubles(rstd), c);
          const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(in), " -> ",
                                                DTypeName(out_dtype), affine ? "" : " no weight");
          const double rt = RoundingRtol(out_dtype);
          ExpectClose(dx, g.dx, 2e-5, 1e-4 + rt, "dx " + what);
          ExpectClose(dw, g.dw, 2e-6 * rows, 1e-5 + rt, "dweight " + what);
          ExpectClose(db, g.db, 2e-6 * rows, 1e-5 + rt, "dbias " + what);
        }
      }
    }
  }
}

TEST(LayerNorm, BackwardOptionalOutputsStridesAndInPlace) {
  const Shape shape = {9, 33};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 40);
  Tensor w = RandomTensor({33}, DType::kF32, 0.5, 1.5, 41);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({9}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({9}, DType::kF32));
  ZS_ASSERT_OK(LayerNormForward(x, w, Tensor(), kEps, out, mean, rstd));
  Tensor dyb = RandomTensor({33, 9}, DType::kBF16, -1, 1, 42);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy, dyb.Transpose(0, 1));  // strided, and another dtype than x
  const RefGrads g = RefBackward(ToDoubles(dy), ToDoubles(x), ToDoubles(w), ToDoubles(mean), ToDoubles(rstd), 33);
  // Only dweight, into a strided slice of a flat gradient buffer.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Zeros({100}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, flat.Slice(0, 10, 76, 2));  // [33], stride 2
  ZS_ASSERT_OK(LayerNormBackward(dy, x, mean, rstd, w, Tensor(), dw, Tensor(), GradMode::kOverwrite));
  ExpectClose(dw, g.dw, 2e-6 * 9, 1e-5, "dweight only");
  const std::vector<double> fv = ToDoubles(flat);
  for (int64_t i = 0; i < 100; ++i) {
    if (i < 10 || i >= 76 || i % 2 == 1) {
      ASSERT_EQ(fv[i], 0.0) << i;
    }
  }
  // Everything, with dx in place over dy (an f32 copy of it, same values).
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy32, dy.To(DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw2, Tensor::Empty({33}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor db2, Tensor::Empty({33}, DType::kF32));
  ZS_ASSERT_OK(LayerNormBackward(dy32, x, mean, rstd, w, dy32, dw2, db2, GradMode::kOverwrite));
  ExpectClose(dy32, g.dx, 2e-5, 1e-4, "dx in place over dy");
  ExpectClose(dw2, g.dw, 2e-6 * 9, 1e-5, "dweight beside an in-place dx");
  ExpectClose(db2, g.db, 2e-6 * 9, 1e-5, "dbias beside an in-place dx");
  // Only dx, in place over x.
  ZS_ASSERT_OK(LayerNormBackward(dy, x, mean, rstd, w, x, Tensor(), Tensor(), GradMode::kOverwrite));
  ExpectClose(x, g.dx, 2e-5, 1e-4, "dx in place over x");
}

TEST(LayerNorm, AccumulateAddsToTheParameterGradients) {
  const Shape shape = {7, 33};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 50);
  Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, 51);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({7}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({7}, DType::kF32));
  ZS_ASSERT_OK(LayerNormForward(x, Tensor(), Tensor(), kEps, out, mean, rstd));
  const RefGrads g = RefBackward(ToDoubles(dy), ToDoubles(x), std::vector<double>(33, 1.0),
                                 ToDoubles(mean), ToDoubles(rstd), 33);
  for (DType dtype : kFloatDTypes) {
    Tensor dw = RandomTensor({33}, dtype, -5, 5, 52);
    Tensor db = RandomTensor({33}, dtype, -5, 5, 53);
    const std::vector<double> dw0 = ToDoubles(dw), db0 = ToDoubles(db);
    ZS_ASSERT_OK(LayerNormBackward(dy, x, mean, rstd, Tensor(), Tensor(), dw, db, GradMode::kAccumulate));
    std::vector<double> want_w(33), want_b(33);
    for (int i = 0; i < 33; ++i) {
      want_w[i] = dw0[i] + g.dw[i];
      want_b[i] = db0[i] + g.db[i];
    }
    ExpectClose(dw, want_w, 2e-5, 1e-5 + RoundingRtol(dtype), absl::StrCat("accumulated dweight ", DTypeName(dtype)));
    ExpectClose(db, want_b, 2e-5, 1e-5 + RoundingRtol(dtype), absl::StrCat("accumulated dbias ", DTypeName(dtype)));
    ZS_ASSERT_OK(LayerNormBackward(dy, x, mean, rstd, Tensor(), Tensor(), dw, db, GradMode::kOverwrite));
    ExpectClose(dw, g.dw, 2e-5, 1e-5 + RoundingRtol(dtype), "overwritten dweight");
    ExpectClose(db, g.db, 2e-5, 1e-5 + RoundingRtol(dtype), "overwritten dbias");
  }
}

// ---------------------------------------------------------------- determinism

TEST(LayerNorm, BitwiseIndependentOfThreadsAndInstructionSet) {
  // 1001 rows: past the parallel threshold, 32 row blocks for dweight/dbias.
  const Shape shape = {1001, 65};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 60);
  Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, 61);
  Tensor w = RandomTensor({65}, DType::kF32, 0.5, 1.5, 62);
  Tensor b = RandomTensor({65}, DType::kF32, -1, 1, 63);
  auto run = [&]() {
    Tensor out = Tensor::Empty(shape, DType::kF32).value();
    Tensor mean = Tensor::Empty({1001}, DType::kF32).value();
    Tensor rstd = Tensor::Empty({1001}, DType::kF32).value();
    Tensor dx = Tensor::Empty(shape, DType::kF32).value();
    Tensor dw = Tensor::Empty({65}, DType::kF32).value();
    Tensor db = Tensor::Empty({65}, DType::kF32).value();
    EXPECT_TRUE(LayerNormForward(x, w, b, kEps, out, mean, rstd).ok());
    EXPECT_TRUE(LayerNormBackward(dy, x, mean, rstd, w, dx, dw, db, GradMode::kOverwrite).ok());
    std::vector<double> all;
    for (const Tensor* t : {&out, &mean, &rstd, &dx, &dw, &db}) {
      for (double v : ToDoubles(*t)) all.push_back(v);
    }
    return all;
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

// ---------------------------------------------------------------- errors

TEST(LayerNorm, Errors) {
  using absl::StatusCode::kInvalidArgument;
  Tensor x = RandomTensor({3, 4}, DType::kF32, -1, 1, 1);
  Tensor w = RandomTensor({4}, DType::kF32, -1, 1, 2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({3}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({3}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({3, 4}, DType::kI32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor w5, Tensor::Zeros({5}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor empty_c, Tensor::Zeros({3, 0}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean_bf16, Tensor::Zeros({3}, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean4, Tensor::Zeros({4}, DType::kF32));
  EXPECT_THAT(LayerNormForward(ints, w, Tensor(), kEps, out, mean, rstd),
              StatusIs(kInvalidArgument, HasSubstr("LayerNormForward: x has dtype i32, expected f32, bf16 or f16")));
  EXPECT_THAT(LayerNormForward(empty_c, Tensor(), Tensor(), kEps, empty_c, Tensor(), Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("x has shape [3, 0], expected a last dimension C >= 1")));
  EXPECT_THAT(LayerNormForward(x, w5, Tensor(), kEps, out, mean, rstd),
              StatusIs(kInvalidArgument, HasSubstr("weight has shape [5], expected [4] (C, the last dimension of x)")));
  EXPECT_THAT(LayerNormForward(x, w, w5, kEps, out, mean, rstd),
              StatusIs(kInvalidArgument, HasSubstr("bias has shape [5], expected [4]")));
  EXPECT_THAT(LayerNormForward(x, w, Tensor(), -1.0, out, mean, rstd),
              StatusIs(kInvalidArgument, HasSubstr("eps = -1, expected a finite value >= 0")));
  EXPECT_THAT(LayerNormForward(x, w, Tensor(), kEps, w5, mean, rstd),
              StatusIs(kInvalidArgument, HasSubstr("out has shape [5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(LayerNormForward(x, w, Tensor(), kEps, out, mean_bf16, rstd),
              StatusIs(kInvalidArgument, HasSubstr("mean has dtype bf16, expected f32")));
  EXPECT_THAT(LayerNormForward(x, w, Tensor(), kEps, out, mean, mean4),
              StatusIs(kInvalidArgument, HasSubstr("rstd has shape [4], expected [3] (one value per row of [3, 4])")));
  EXPECT_THAT(LayerNormForward(x, w, Tensor(), kEps, out, mean, mean),
              StatusIs(kInvalidArgument, HasSubstr("the output rstd")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xt, x.Transpose(0, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xt_again, xt.Transpose(0, 1));  // same elements, another view object
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x_rows, x.Narrow(0, 0, 2));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x_rows2, x.Narrow(0, 1, 2));
  EXPECT_THAT(LayerNormForward(x_rows, Tensor(), Tensor(), kEps, x_rows2, Tensor(), Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("only exact in-place is allowed")));
  ZS_EXPECT_OK(LayerNormForward(x, Tensor(), Tensor(), kEps, xt_again, Tensor(), Tensor()));  // exact in place
  // Backward.
  EXPECT_THAT(LayerNormBackward(out, x, Tensor(), rstd, w, out, Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("LayerNormBackward: mean is undefined; expected the one "
                                                   "LayerNormForward saved")));
  EXPECT_THAT(LayerNormBackward(w5, x, mean, rstd, w, Tensor(), Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dy has shape [5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, rstd, w, w5, Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dx has shape [5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(LayerNormBackward(ints, x, mean, rstd, w, out, Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("LayerNormBackward: dy has dtype i32")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, rstd, ints.Select(0, 0).value(), Tensor(), Tensor(), Tensor(),
                                GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("weight has dtype i32, expected f32, bf16 or f16")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, mean_bf16, w, Tensor(), Tensor(), Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("rstd has dtype bf16, expected f32")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, rstd, w, Tensor(), w5, Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dweight has shape [5], expected [4]")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, rstd, w, Tensor(), Tensor(), ints, GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dbias has dtype i32")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, rstd, w, Tensor(), w, Tensor(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("the output dweight")));
  EXPECT_THAT(LayerNormBackward(out, x, mean, rstd, w, Tensor(), w5.Narrow(0, 0, 4).value(),
                                w5.Narrow(0, 1, 4).value(), GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("the output dbias")));
  // CUDA tensors over host memory: without a device the launch fails cleanly
  // (tests/kernels/cuda_rows_test.cc checks the CUDA kernel on a GPU).
  std::vector<float> h1(12), h2(12), h3(3), h4(3);
  const Tensor gx = Tensor::Wrap(h1.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  const Tensor gy = Tensor::Wrap(h2.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  const Tensor gm = Tensor::Wrap(h3.data(), {3}, DType::kF32, Device::Cuda(0));
  const Tensor gr = Tensor::Wrap(h4.data(), {3}, DType::kF32, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) {
    EXPECT_FALSE(LayerNormForward(gx, Tensor(), Tensor(), kEps, gy, gm, gr).ok());
    EXPECT_FALSE(LayerNormBackward(gy, gx, gm, gr, Tensor(), Tensor(), Tensor(), Tensor(),
                                   GradMode::kOverwrite).ok());
  }
  EXPECT_THAT(LayerNormForward(gx, w, Tensor(), kEps, gy, Tensor(), Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("tensors on different devices")));
}

}  // namespace
}  // namespace zeroshard
