// Reductions against double references on odd shapes and every axis, NaN
// handling, SumToShape, whole-buffer sums, and determinism across threads.
#include "zeroshard/kernels/reduce.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

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

// Reference reduction of a contiguous [outer, r, inner] view.
std::vector<double> RefReduce(const std::vector<double>& x, int64_t outer, int64_t r,
                              int64_t inner, ReduceKind kind) {
  std::vector<double> out(outer * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double acc = kind == ReduceKind::kMax ? -INFINITY : 0;
      for (int64_t i = 0; i < r; ++i) {
        const double v = x[(o * r + i) * inner + j];
        acc = kind == ReduceKind::kMax ? std::max(acc, v) : acc + v;
      }
      out[o * inner + j] = kind == ReduceKind::kMean ? acc / r : acc;
    }
  return out;
}

TEST(Reduce, EveryAxisKindAndDType) {
  const Shape shape = {7, 33, 5};
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    Tensor x = RandomTensor(shape, dtype, -2, 2, seed++);
    const std::vector<double> xv = ToDoubles(x);
    for (int64_t dim = 0; dim < 3; ++dim) {
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
      for (int64_t d = dim + 1; d < 3; ++d) inner *= shape[d];
      for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax}) {
        ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Reduce(kind, x, dim));
        EXPECT_EQ(y.dtype(), dtype);
        ExpectClose(y, RefReduce(xv, outer, shape[dim], inner, kind), 1e-5,
                    1e-6 + RoundingRtol(dtype),
                    absl::StrCat(DTypeName(dtype), " dim ", dim, " kind ", static_cast<int>(kind)));
      }
    }
  }
}

TEST(Reduce, LongRowsAndKeepdimAndStridedInput) {
  Tensor x = RandomTensor({3, 100003}, DType::kF32, -1, 1, 5);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, Sum(x, -1, /*keepdim=*/true));
  EXPECT_EQ(s.shape(), (Shape{3, 1}));
  ExpectClose(s, RefReduce(ToDoubles(x), 3, 100003, 1, ReduceKind::kSum), 1e-3, 1e-5, "long rows");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xt, x.Transpose(0, 1));  // [100003, 3], strided
  ZS_ASSERT_OK_AND_ASSIGN(Tensor m, Max(xt, 0));
  ExpectClose(m, RefReduce(ToDoubles(x), 3, 100003, 1, ReduceKind::kMax), 0, 0, "strided max");
}

TEST(Reduce, IntegersSumInInt64) {
  ZS_ASSERT_OK_AND_ASSIGN(
      Tensor x, Tensor::FromVector(std::vector<int32_t>{2000000000, 2000000000, -5, 7}, {2, 2}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, Sum(x, 0));
  EXPECT_EQ(s.dtype(), DType::kI64);
  EXPECT_EQ(s.ToVector<int64_t>().value(), (std::vector<int64_t>{1999999995, 2000000007}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mx, Max(x, 1));
  EXPECT_EQ(mx.ToVector<int32_t>().value(), (std::vector<int32_t>{2000000000, 7}));
  EXPECT_THAT(Mean(x, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("Mean: expected a float tensor, got i32")));
}

TEST(Reduce, ArgMaxFirstMaximumAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ZS_ASSERT_OK_AND_ASSIGN(
      Tensor x, Tensor::FromVector(std::vector<float>{1, 5, 5, 2, nan, 3, -1, nan, 9}, {3, 3}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor am, ArgMax(x, 1));
  EXPECT_EQ(am.ToVector<int64_t>().value(), (std::vector<int64_t>{1, 1, 1}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mx, Max(x, 1));
  const std::vector<double> m = ToDoubles(mx);
  EXPECT_EQ(m[0], 5);
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_TRUE(std::isnan(m[2]));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor am0, ArgMax(x, 0));
  EXPECT_EQ(am0.ToVector<int64_t>().value(), (std::vector<int64_t>{1, 1, 2}));
}

TEST(Reduce, SumToShapeUndoesBroadcast) {
  Tensor g = RandomTensor({4, 7, 33}, DType::kF32, -1, 1, 9);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({7, 1}, DType::kF32));
  ZS_ASSERT_OK(SumToShape(g, out));
  const std::vector<double> gv = ToDoubles(g);
  std::vector<double> want(7, 0.0);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 7; ++b)
      for (int c = 0; c < 33; ++c) want[b] += gv[(a * 7 + b) * 33 + c];
  ExpectClose(out, want, 1e-5, 1e-5, "sum to [7, 1]");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bad, Tensor::Empty({5}, DType::kF32));
  EXPECT_THAT(SumToShape(g, bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("is not a broadcast of the output shape [5]")));
}

TEST(Reduce, WholeBufferSumsAreExactEnoughAndThreadIndependent) {
  Tensor x = RandomTensor({1000003}, DType::kF32, -1, 1, 10);
  double want = 0, want_sq = 0;
  for (double v : ToDoubles(x)) {
    want += v;
    want_sq += v * v;
  }
  ZS_ASSERT_OK_AND_ASSIGN(double s, SumAll(x));
  ZS_ASSERT_OK_AND_ASSIGN(double ss, SumOfSquares(x));
  EXPECT_NEAR(s, want, 1e-6 * 1000003);
  EXPECT_NEAR(ss, want_sq, 1e-6 * want_sq);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  ZS_ASSERT_OK_AND_ASSIGN(double ss1, SumOfSquares(x));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor head, x.Narrow(0, 0, 1009 * 991));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor matrix, head.View({1009, 991}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor r1, Sum(matrix, 0));
  omp_set_num_threads(threads);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor r2, Sum(matrix, 0));
  EXPECT_EQ(ss1, ss);  // bitwise, whatever the thread count
  EXPECT_EQ(ToDoubles(r1), ToDoubles(r2));
  Tensor h = RandomTensor({4097}, DType::kBF16, -1, 1, 11);
  double want_h = 0;
  for (double v : ToDoubles(h)) want_h += v * v;
  ZS_ASSERT_OK_AND_ASSIGN(double sh, SumOfSquares(h));
  EXPECT_NEAR(sh, want_h, 1e-5 * want_h);
}

TEST(Reduce, Errors) {
  Tensor x = RandomTensor({3, 4}, DType::kF32, -1, 1, 1);
  EXPECT_THAT(Sum(x, 2), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("dimension 2 is out of range")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({4}, DType::kF32));
  EXPECT_THAT(Sum(x, 1, out), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("output has shape [4], expected [3] or [3, 1]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor fo, Tensor::Empty({3}, DType::kF32));
  EXPECT_THAT(ArgMax(x, 1, fo), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("expected i64 or i32")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor empty, Tensor::Empty({3, 0}, DType::kF32));
  EXPECT_THAT(Sum(empty, 1), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("cannot reduce dimension 1 of size 0")));
}

}  // namespace
}  // namespace zeroshard
