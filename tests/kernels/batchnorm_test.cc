// BatchNorm forward (training and eval) and backward against a double
// reference on odd shapes ([N, C], [N, C, L], [N, C, H, W]), 16-bit data,
// running-statistics updates (momentum, unbiased variance), the reference
// gradients against central differences, accumulate vs overwrite, errors.
#include "zeroshard/kernels/batchnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/tests/kernels/grad_check.h"
#include "zeroshard/tests/kernels/image_reference.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::Dot;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::NumericGradient;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;
using Vec = std::vector<double>;
using ::zeroshard::testing::BnDims;
using ::zeroshard::testing::BnDimsOf;
using ::zeroshard::testing::kBnEps;
using ::zeroshard::testing::RefBatchNorm;
using ::zeroshard::testing::RefBnOut;


struct RefGrads {
  Vec dx, dw, db;
};

// Training mode: through the batch statistics.
RefGrads RefBackward(const Shape& shape, const Vec& dy, const Vec& x, const Vec& w) {
  const BnDims d = BnDimsOf(shape);
  const RefBnOut f = RefBatchNorm(shape, x, w, Vec(d.c, 0.0));
  RefGrads g{Vec(x.size()), Vec(d.c), Vec(d.c)};
  const double m = d.n * d.l;
  for (int64_t c = 0; c < d.c; ++c) {
    const double rs = 1 / std::sqrt(f.var[c] + kBnEps);
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.l; ++i) {
        const int64_t k = (n * d.c + c) * d.l + i;
        sdy += dy[k];
        sdyx += dy[k] * (x[k] - f.mean[c]) * rs;
      }
    g.dw[c] = sdyx;
    g.db[c] = sdy;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.l; ++i) {
        const int64_t k = (n * d.c + c) * d.l + i;
        const double xhat = (x[k] - f.mean[c]) * rs;
        g.dx[k] = w[c] * rs * (dy[k] - sdy / m - xhat * sdyx / m);
      }
  }
  return g;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> s = {{2, 3}, {5, 1, 7}, {3, 4, 5, 7}, {1, 2, 3, 1}, {4, 6, 1, 1}, {2, 5, 9, 11}};
  return s;
}

TEST(BatchNorm, ReferenceGradientMatchesFiniteDifferences) {
  const Shape shape = {3, 2, 2, 3};
  const Vec x = ToDoubles(RandomTensor(shape, DType::kF32, -2, 2, 1));
  const Vec w = ToDoubles(RandomTensor({2}, DType::kF32, 0.5, 1.5, 2));
  const Vec b = ToDoubles(RandomTensor({2}, DType::kF32, -1, 1, 3));
  const Vec dy = ToDoubles(RandomTensor(shape, DType::kF32, -1, 1, 4));
  const RefGrads g = RefBackward(shape, dy, x, w);
  ExpectClose(g.dx, NumericGradient([&](const Vec& v) { return Dot(dy, RefBatchNorm(shape, v, w, b).y); }, x),
              1e-7, 1e-6, "dx vs finite differences");
  ExpectClose(g.dw, NumericGradient([&](const Vec& v) { return Dot(dy, RefBatchNorm(shape, x, v, b).y); }, w),
              1e-7, 1e-6, "dweight vs finite differences");
  ExpectClose(g.db, NumericGradient([&](const Vec& v) { return Dot(dy, RefBatchNorm(shape, x, w, v).y); }, b),
              1e-7, 1e-6, "dbias vs finite differences");
}

TEST(BatchNorm, TrainingForwardUpdatesRunningStatistics) {
  uint64_t seed = 10;
  for (const Shape& shape : Shapes()) {
    for (DType dtype : kFloatDTypes) {
      const BnDims d = BnDimsOf(shape);
      const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(dtype));
      Tensor x = RandomTensor(shape, dtype, -2, 3, seed++);
      Tensor w = RandomTensor({d.c}, dtype, 0.5, 1.5, seed++);
      Tensor b = RandomTensor({d.c}, DType::kF32, -1, 1, seed++);
      Tensor rm = RandomTensor({d.c}, DType::kF32, -1, 1, seed++);
      Tensor rv = RandomTensor({d.c}, DType::kF32, 0.5, 2, seed++);
      const Vec rm0 = ToDoubles(rm), rv0 = ToDoubles(rv);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(shape, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor sm, Tensor::Empty({d.c}, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor sr, Tensor::Empty({d.c}, DType::kF32));
      const BatchNormOptions o{.training = true, .momentum = 0.25, .eps = kBnEps};
      ZS_ASSERT_OK(BatchNormForward(x, w, b, rm, rv, o, y, sm, sr));
      const RefBnOut ref = RefBatchNorm(shape, ToDoubles(x), ToDoubles(w), ToDoubles(b));
      ExpectClose(y, ref.y, 2e-5, 2e-5 + RoundingRtol(dtype), "y " + what);
      ExpectClose(sm, ref.mean, 1e-6, 1e-5, "save_mean " + what);
      Vec want_rstd(d.c), want_rm(d.c), want_rv(d.c);
      const double count = d.n * d.l;
      for (int64_t c = 0; c < d.c; ++c) {
        want_rstd[c] = 1 / std::sqrt(ref.var[c] + kBnEps);
        want_rm[c] = 0.75 * rm0[c] + 0.25 * ref.mean[c];
        want_rv[c] = 0.75 * rv0[c] + 0.25 * ref.var[c] * count / (count - 1);
      }
      ExpectClose(sr, want_rstd, 1e-5, 1e-5, "save_rstd " + what);
      ExpectClose(rm, want_rm, 1e-6, 1e-5, "running_mean " + what);
      ExpectClose(rv, want_rv, 1e-6, 1e-5, "running_var " + what);
    }
  }
}

TEST(BatchNorm, EvalForwardUsesRunningStatistics) {
  const Shape shape = {3, 4, 5, 7};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 3, 40);
  Tensor w = RandomTensor({4}, DType::kF32, 0.5, 1.5, 41);
  Tensor b = RandomTensor({4}, DType::kF32, -1, 1, 42);
  Tensor rm = RandomTensor({4}, DType::kF32, -1, 1, 43);
  Tensor rv = RandomTensor({4}, DType::kF32, 0.5, 2, 44);
  const Vec rm0 = ToDoubles(rm), rv0 = ToDoubles(rv);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sm, Tensor::Empty({4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sr, Tensor::Empty({4}, DType::kF32));
  ZS_ASSERT_OK(BatchNormForward(x, w, b, rm, rv, {.training = false}, y, sm, sr));
  ExpectClose(y, RefBatchNorm(shape, ToDoubles(x), ToDoubles(w), ToDoubles(b), rm0, rv0).y, 1e-5, 1e-5, "eval y");
  EXPECT_EQ(ToDoubles(rm), rm0);  // untouched
  EXPECT_EQ(ToDoubles(rv), rv0);
  ExpectClose(sm, rm0, 0, 0, "save_mean = running_mean");
  // Eval backward: constants, dx = dy w rstd.
  Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, 45);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty({4}, DType::kF32));
  ZS_ASSERT_OK(BatchNormBackward(dy, x, sm, sr, w, /*training=*/false, dx, dw, Tensor(), GradMode::kOverwrite));
  const Vec dyv = ToDoubles(dy), xv = ToDoubles(x), wv = ToDoubles(w);
  const Vec bzero(4, 0.0);
  ExpectClose(dx, NumericGradient([&](const Vec& v) { return Dot(dyv, RefBatchNorm(shape, v, wv, bzero, rm0, rv0).y); }, xv),
              1e-5, 1e-4, "eval dx vs finite differences");
  ExpectClose(dw, NumericGradient([&](const Vec& v) { return Dot(dyv, RefBatchNorm(shape, xv, v, bzero, rm0, rv0).y); }, wv),
              1e-4, 1e-4, "eval dweight vs finite differences");
}

TEST(BatchNorm, BackwardMatchesDoubleReference) {
  uint64_t seed = 100;
  for (const Shape& shape : Shapes()) {
    for (DType dtype : kFloatDTypes) {
      const BnDims d = BnDimsOf(shape);
      const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(dtype));
      Tensor x = RandomTensor(shape, dtype, -2, 3, seed++);
      Tensor w = RandomTensor({d.c}, DType::kF32, 0.5, 1.5, seed++);
      Tensor dy = RandomTensor(shape, dtype, -1, 1, seed++);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(shape, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor sm, Tensor::Empty({d.c}, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor sr, Tensor::Empty({d.c}, DType::kF32));
      ZS_ASSERT_OK(BatchNormForward(x, w, Tensor(), Tensor(), Tensor(), {}, y, sm, sr));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({d.c}, 3.0, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({d.c}, 3.0, DType::kF32));
      ZS_ASSERT_OK(BatchNormBackward(dy, x, sm, sr, w, true, dx, dw, db, GradMode::kAccumulate));
      const RefGrads g = RefBackward(shape, ToDoubles(dy), ToDoubles(x), ToDoubles(w));
      Vec dw3 = g.dw, db3 = g.db;
      for (double& v : dw3) v += 3;
      for (double& v : db3) v += 3;
      const double count = d.n * d.l;
      ExpectClose(dx, g.dx, 1e-4, 1e-4 + RoundingRtol(dtype), "dx " + what);
      ExpectClose(dw, dw3, 1e-5 * count, 1e-5, "dweight " + what);
      ExpectClose(db, db3, 1e-5 * count, 1e-5, "dbias " + what);
    }
  }
}

TEST(BatchNorm, InPlaceAndNoAffine) {
  const Shape shape = {4, 3, 5, 5};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 2, 200);
  const RefBnOut ref = RefBatchNorm(shape, ToDoubles(x), Vec(3, 1.0), Vec(3, 0.0));
  ZS_ASSERT_OK(BatchNormForward(x, Tensor(), Tensor(), Tensor(), Tensor(), {}, x, Tensor(), Tensor()));
  ExpectClose(x, ref.y, 1e-5, 1e-5, "in place, no affine");
}

TEST(BatchNorm, ErrorsSayWhatWasExpected) {
  Tensor x = RandomTensor({2, 3, 4, 4}, DType::kF32, -1, 1, 300);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty({2, 3, 4, 4}, DType::kF32));
  Tensor w = RandomTensor({4}, DType::kF32, -1, 1, 301);
  EXPECT_THAT(BatchNormForward(x, w, Tensor(), Tensor(), Tensor(), {}, y, Tensor(), Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected [3]")));
  Tensor rm16 = RandomTensor({3}, DType::kBF16, -1, 1, 302);
  EXPECT_THAT(BatchNormForward(x, Tensor(), Tensor(), rm16, Tensor(), {}, y, Tensor(), Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected f32")));
  EXPECT_THAT(BatchNormForward(x, Tensor(), Tensor(), Tensor(), Tensor(), {.training = false}, y, Tensor(), Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected running_mean and running_var")));
  Tensor one = RandomTensor({1, 3, 1, 1}, DType::kF32, -1, 1, 303);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y1, Tensor::Empty({1, 3, 1, 1}, DType::kF32));
  EXPECT_THAT(BatchNormForward(one, Tensor(), Tensor(), Tensor(), Tensor(), {}, y1, Tensor(), Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected more than 1 when training")));
  EXPECT_THAT(BatchNormForward(x, Tensor(), Tensor(), Tensor(), Tensor(), {.momentum = 1.5}, y, Tensor(), Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("momentum in [0, 1]")));
}

}  // namespace
}  // namespace zeroshard
