// Softmax and log-softmax, forward and backward, against double-precision
// references on odd shapes, every dtype pair, strided and in-place views; the
// reference gradients against central differences; stability on large logits;
// bitwise independence from thread count and instruction set; every error.
//
// Tolerances (|got - want| <= atol + rtol |want|, want from the stored inputs):
//   softmax     f32 out: atol 1e-7, rtol 1e-5;  16-bit out: + RoundingRtol(out)
//   log-softmax f32 out: atol 2e-6 (values up to ~20 in size), rtol 2e-6; 16-bit: + RoundingRtol
//   backward    f32 out: atol 1e-6, rtol 1e-5 (scaled by the row's |dy| size); 16-bit: + RoundingRtol
#include "zeroshard/kernels/softmax.h"

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

// ---------------------------------------------------------------- references

std::vector<double> RefForward(const std::vector<double>& x, int64_t cols, bool log) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const double* xr = &x[r * cols];
    double m = -INFINITY;
    for (int64_t i = 0; i < cols; ++i) m = std::max(m, xr[i]);
    double s = 0;
    for (int64_t i = 0; i < cols; ++i) s += std::exp(xr[i] - m);
    for (int64_t i = 0; i < cols; ++i) {
      y[r * cols + i] = log ? xr[i] - m - std::log(s) : std::exp(xr[i] - m) / s;
    }
  }
  return y;
}

// From the forward output y and dy: y (dy - sum(dy y)) or dy - exp(y) sum(dy).
std::vector<double> RefBackward(const std::vector<double>& y, const std::vector<double>& dy,
                                int64_t cols, bool log) {
  std::vector<double> dx(y.size());
  for (size_t r = 0; r * cols < y.size(); ++r) {
    double s = 0;
    for (int64_t i = 0; i < cols; ++i) s += log ? dy[r * cols + i] : dy[r * cols + i] * y[r * cols + i];
    for (int64_t i = 0; i < cols; ++i) {
      const size_t k = r * cols + i;
      dx[k] = log ? dy[k] - std::exp(y[k]) * s : y[k] * (dy[k] - s);
    }
  }
  return dx;
}

const std::vector<Shape>& OddShapes() {
  static const std::vector<Shape> shapes = {{1}, {7}, {1, 33}, {7, 257}, {33, 7}, {3, 5, 33}, {257, 1}};
  return shapes;
}

double ForwardAtol(bool log) { return log ? 2e-6 : 1e-7; }
double ForwardRtol(bool log, DType out) { return (log ? 2e-6 : 1e-5) + RoundingRtol(out); }

absl::Status Forward(bool log, const Tensor& x, const Tensor& out) {
  return log ? LogSoftmax(x, out) : Softmax(x, out);
}
absl::Status Backward(bool log, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  return log ? LogSoftmaxBackward(y, dy, dx) : SoftmaxBackward(y, dy, dx);
}

// ---------------------------------------------------------------- forward

TEST(Softmax, ForwardMatchesDoubleReferenceForEveryShapeAndDTypePair) {
  uint64_t seed = 1;
  for (bool log : {false, true}) {
    for (const Shape& shape : OddShapes()) {
      for (DType in : kFloatDTypes) {
        for (DType out_dtype : kFloatDTypes) {
          Tensor x = RandomTensor(shape, in, -8, 8, seed++);
          ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, out_dtype));
          ZS_ASSERT_OK(Forward(log, x, out));
          ExpectClose(out, RefForward(ToDoubles(x), shape.back(), log), ForwardAtol(log),
                      ForwardRtol(log, out_dtype),
                      absl::StrCat(log ? "log-softmax " : "softmax ", ShapeToString(shape), " ",
                                   DTypeName(in), " -> ", DTypeName(out_dtype)));
        }
      }
    }
  }
}

TEST(Softmax, LargeLogitsStayFiniteAndSpecialValuesPropagate) {
  const float inf = INFINITY, nan = NAN;
  // Row 0: huge logits (exp would overflow without the max shift); row 1 holds
  // -Inf (probability 0); row 2 a NaN (all NaN); row 3 only -Inf (NaN, 0/0).
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromVector(std::vector<float>{1000, 999, 990, 1000,  //
                                                                          -inf, 1, 2, 3,        //
                                                                          1, nan, 2, 3,         //
                                                                          -inf, -inf, -inf, -inf},
                                                       {4, 4}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Softmax(x));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ly, LogSoftmax(x));
  const std::vector<double> yv = ToDoubles(y), lv = ToDoubles(ly);
  const std::vector<double> want = RefForward(ToDoubles(x), 4, false);
  const std::vector<double> lwant = RefForward(ToDoubles(x), 4, true);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(yv[i], want[i], 1e-7 + 1e-5 * want[i]) << i;
    if (std::isinf(lwant[i])) {
      EXPECT_EQ(lv[i], lwant[i]) << i;
    } else {
      EXPECT_NEAR(lv[i], lwant[i], 2e-6) << i;
    }
  }
  EXPECT_EQ(yv[4], 0.0);
  for (int i = 8; i < 16; ++i) {
    EXPECT_TRUE(std::isnan(yv[i])) << i;
    EXPECT_TRUE(std::isnan(lv[i])) << i;
  }
}

TEST(Softmax, StridedInputsAndOutputs) {
  for (bool log : {false, true}) {
    // A transposed input (last stride != 1: copied) into a column slice of a
    // bigger buffer (rows written in place); the rest of the buffer is untouched.
    Tensor base = RandomTensor({33, 7}, DType::kF32, -4, 4, 40);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor x, base.Transpose(0, 1));  // [7, 33]
    ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({7, 40}, 5.0, DType::kBF16));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out, big.Narrow(1, 3, 33));
    ZS_ASSERT_OK(Forward(log, x, out));
    ExpectClose(out, RefForward(ToDoubles(x), 33, log), ForwardAtol(log),
                ForwardRtol(log, DType::kBF16), "transposed in, sliced out");
    const std::vector<double> bv = ToDoubles(big);
    for (int64_t r = 0; r < 7; ++r) {
      for (int64_t c : {0, 1, 2, 36, 37, 38, 39}) ASSERT_EQ(bv[r * 40 + c], 5.0) << r << "," << c;
    }
    // Leading dims permuted (rows unevenly spaced) into a transposed output.
    Tensor x3 = RandomTensor({5, 3, 7}, DType::kF16, -4, 4, 41);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor xp, x3.Permute({1, 0, 2}));  // [3, 5, 7]
    ZS_ASSERT_OK_AND_ASSIGN(Tensor ob, Tensor::Empty({7, 5, 3}, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor ot, ob.Permute({2, 1, 0}));  // [3, 5, 7], last stride 15
    ZS_ASSERT_OK(Forward(log, xp, ot));
    ExpectClose(ot, RefForward(ToDoubles(xp), 7, log), ForwardAtol(log), ForwardRtol(log, DType::kF32),
                "permuted in, transposed out");
    // A broadcast input (stride 0 along the leading dimension): every batch the same rows.
    Tensor xb = RandomTensor({1, 7, 33}, DType::kF32, -4, 4, 42);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor xe, xb.Expand({3, 7, 33}));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor oe, Tensor::Empty({3, 7, 33}, DType::kF32));
    ZS_ASSERT_OK(Forward(log, xe, oe));
    ExpectClose(oe, RefForward(ToDoubles(xe), 33, log), ForwardAtol(log), ForwardRtol(log, DType::kF32),
                "broadcast in");
  }
}

TEST(Softmax, InPlace) {
  for (bool log : {false, true}) {
    Tensor x = RandomTensor({7, 257}, DType::kBF16, -8, 8, 50);
    const std::vector<double> want = RefForward(ToDoubles(x), 257, log);
    ZS_ASSERT_OK(Forward(log, x, x));
    ExpectClose(x, want, ForwardAtol(log), ForwardRtol(log, DType::kBF16), "in place");
  }
}

// ---------------------------------------------------------------- backward

TEST(Softmax, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  const std::vector<double> x = ToDoubles(RandomTensor({rows, cols}, DType::kF32, -3, 3, 60));
  const std::vector<double> dy = ToDoubles(RandomTensor({rows, cols}, DType::kF32, -1, 1, 61));
  for (bool log : {false, true}) {
    auto loss = [&](const std::vector<double>& v) { return Dot(dy, RefForward(v, cols, log)); };
    ExpectClose(RefBackward(RefForward(x, cols, log), dy, cols, log), NumericGradient(loss, x), 1e-8,
                1e-7, log ? "log-softmax reference gradient" : "softmax reference gradient");
  }
}

TEST(Softmax, BackwardMatchesDoubleReference) {
  uint64_t seed = 100;
  for (bool log : {false, true}) {
    for (const Shape& shape : OddShapes()) {
      for (DType in : kFloatDTypes) {
        for (DType out_dtype : {in, DType::kF32}) {
          // y: a real forward output (probabilities / log-probabilities).
          Tensor x = RandomTensor(shape, DType::kF32, -4, 4, seed++);
          ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(shape, in));
          ZS_ASSERT_OK(Forward(log, x, y));
          Tensor dy = RandomTensor(shape, in, -1, 1, seed++);
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, out_dtype));
          ZS_ASSERT_OK(Backward(log, y, dy, dx));
          ExpectClose(dx, RefBackward(ToDoubles(y), ToDoubles(dy), shape.back(), log), 1e-6,
                      1e-5 + RoundingRtol(out_dtype),
                      absl::StrCat(log ? "log-softmax backward " : "softmax backward ",
                                   ShapeToString(shape), " ", DTypeName(in), " -> ",
                                   DTypeName(out_dtype)));
        }
      }
    }
  }
}

TEST(Softmax, BackwardMixedDTypesStridedAndInPlace) {
  for (bool log : {false, true}) {
    Tensor x = RandomTensor({33, 9}, DType::kF32, -4, 4, 70);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y32, Tensor::Empty({33, 9}, DType::kF32));
    ZS_ASSERT_OK(Forward(log, x, y32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor yt, y32.Transpose(0, 1));  // [9, 33] strided f32
    Tensor dy = RandomTensor({9, 33}, DType::kBF16, -1, 1, 71);  // another dtype
    const std::vector<double> want = RefBackward(ToDoubles(yt), ToDoubles(dy), 33, log);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({9, 33}, DType::kF16));
    ZS_ASSERT_OK(Backward(log, yt, dy, dx));
    ExpectClose(dx, want, 1e-6, 1e-5 + RoundingRtol(DType::kF16), "mixed dtypes, strided y");
    ZS_ASSERT_OK(Backward(log, yt, dy, dy));  // dx written over dy
    ExpectClose(dy, want, 1e-6, 1e-5 + RoundingRtol(DType::kBF16), "in place over dy");
  }
}

// ---------------------------------------------------------------- determinism

TEST(Softmax, BitwiseIndependentOfThreadsAndInstructionSet) {
  Tensor x = RandomTensor({301, 257}, DType::kF32, -8, 8, 80);  // past the parallel threshold
  Tensor dy = RandomTensor({301, 257}, DType::kF32, -1, 1, 81);
  auto run = [&]() {
    std::vector<double> all;
    for (bool log : {false, true}) {
      Tensor y = Tensor::Empty({301, 257}, DType::kF32).value();
      Tensor dx = Tensor::Empty({301, 257}, DType::kF32).value();
      EXPECT_TRUE(Forward(log, x, y).ok());
      EXPECT_TRUE(Backward(log, y, dy, dx).ok());
      for (const Tensor* t : {&y, &dx}) {
        for (double v : ToDoubles(*t)) all.push_back(v);
      }
    }
    return all;
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

// ---------------------------------------------------------------- errors

TEST(Softmax, Errors) {
  Tensor x = RandomTensor({3, 4}, DType::kF32, -1, 1, 1);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({3, 4}, DType::kI32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wrong, Tensor::Empty({3, 5}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor scalar, Tensor::Zeros({}, DType::kF32));
  EXPECT_THAT(Softmax(ints, out), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("Softmax: x has dtype i32, expected f32, bf16 or f16")));
  EXPECT_THAT(LogSoftmax(x, ints), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("LogSoftmax: out has dtype i32")));
  EXPECT_THAT(Softmax(x, wrong), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("out has shape [3, 5], expected [3, 4] (the shape of x)")));
  EXPECT_THAT(Softmax(scalar, scalar), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("x is 0-dimensional, expected at least 1 dimension")));
  EXPECT_THAT(Softmax(Tensor(), out), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x is undefined")));
  // Partial overlap: out is x shifted by one element.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor buf, Tensor::Zeros({13}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, buf.Narrow(0, 0, 12));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, buf.Narrow(0, 1, 12));
  EXPECT_THAT(Softmax(a.View({3, 4}).value(), b.View({3, 4}).value()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only exact in-place is allowed")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor row, Tensor::Zeros({4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bcast, row.Expand({3, 4}));
  EXPECT_THAT(Softmax(x, bcast), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("has a broadcast (stride 0) dimension")));
  EXPECT_THAT(SoftmaxBackward(x, wrong, out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SoftmaxBackward: dy has shape [3, 5], expected [3, 4] (the shape of y)")));
  EXPECT_THAT(LogSoftmaxBackward(x, x, wrong),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LogSoftmaxBackward: dx has shape [3, 5], expected [3, 4]")));
  // CUDA tensors over host memory: without a device the launch fails cleanly
  // (tests/kernels/cuda_rows_test.cc checks the CUDA kernel on a GPU).
  std::vector<float> host(12);
  const Tensor gx = Tensor::Wrap(host.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  std::vector<float> host2(12);
  const Tensor gy = Tensor::Wrap(host2.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) {
    EXPECT_FALSE(Softmax(gx, gy).ok());
    EXPECT_FALSE(LogSoftmaxBackward(gx, gx, gy).ok());
  }
  EXPECT_THAT(Softmax(gx, out), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("tensors on different devices")));
}

}  // namespace
}  // namespace zeroshard
