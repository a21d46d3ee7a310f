// Max, average and adaptive average pooling against double references on odd
// shapes (stride, padding, dilation, count_include_pad, non-dividing adaptive
// sizes), the backward passes against central differences of the reference,
// 16-bit and strided tensors, errors.
#include "zeroshard/kernels/pool2d.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

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
using ::zeroshard::testing::RefAdaptive;
using ::zeroshard::testing::RefAvg;
using ::zeroshard::testing::RefMax;

struct PoolCase {
  Shape x;
  Pool2dOptions o;
  std::string name;
};

const std::vector<PoolCase>& MaxCases() {
  static const std::vector<PoolCase> c = {
      {{2, 3, 9, 9}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, "ResNet stem 3/2/1"},
      {{1, 2, 7, 8}, {.kernel = {2, 2}}, "2x2 default stride"},
      {{2, 1, 8, 7}, {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}}, "rectangular"},
      {{1, 2, 9, 10}, {.kernel = {2, 3}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {2, 2}}, "dilated"},
      {{3, 2, 1, 1}, {.kernel = {1, 1}}, "1x1"},
  };
  return c;
}

TEST(MaxPool2d, ForwardBackwardMatchReference) {
  uint64_t seed = 1;
  for (const PoolCase& k : MaxCases()) {
    Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Shape ys, Pool2dOutputShape(k.x, k.o));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(ys, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor idx, Tensor::Empty(ys, DType::kI64));
    ZS_ASSERT_OK(MaxPool2dForward(x, k.o, y, idx));
    std::vector<int64_t> arg;
    const Vec xv = ToDoubles(x);
    ExpectClose(y, RefMax(k.x, xv, k.o, &arg), 0, 0, k.name);
    EXPECT_EQ(idx.ToVector<int64_t>().value(), arg) << k.name;
    Tensor dy = RandomTensor(ys, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Full(k.x, 9.0, DType::kF32));
    ZS_ASSERT_OK(MaxPool2dBackward(dy, idx, k.o, dx));
    const Vec dyv = ToDoubles(dy);
    ExpectClose(dx, NumericGradient([&](const Vec& v) { return Dot(dyv, RefMax(k.x, v, k.o)); }, xv, 1e-6),
                1e-6, 1e-6, k.name + " dx vs finite differences");
  }
}

TEST(AvgPool2d, ForwardBackwardMatchReference) {
  const std::vector<PoolCase> cases = {
      {{2, 3, 9, 9}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, "3/2/1"},
      {{2, 3, 9, 9}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false}, "3/2/1 exclude pad"},
      {{1, 2, 7, 8}, {.kernel = {2, 2}}, "2x2"},
      {{2, 1, 8, 7}, {.kernel = {4, 3}, .stride = {3, 1}, .padding = {2, 1}}, "rectangular"},
      {{2, 1, 5, 6}, {.kernel = {4, 2}, .stride = {1, 3}, .padding = {2, 1}, .count_include_pad = false}, "rectangular exclude pad"},
  };
  uint64_t seed = 20;
  for (const PoolCase& k : cases) {
    Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Shape ys, Pool2dOutputShape(k.x, k.o));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(ys, DType::kF32));
    ZS_ASSERT_OK(AvgPool2dForward(x, k.o, y));
    const Vec xv = ToDoubles(x);
    ExpectClose(y, RefAvg(k.x, xv, k.o), 1e-6, 1e-6, k.name);
    Tensor dy = RandomTensor(ys, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Full(k.x, 9.0, DType::kF32));
    ZS_ASSERT_OK(AvgPool2dBackward(dy, k.o, dx));
    const Vec dyv = ToDoubles(dy);
    ExpectClose(dx, NumericGradient([&](const Vec& v) { return Dot(dyv, RefAvg(k.x, v, k.o)); }, xv),
                1e-6, 1e-6, k.name + " dx vs finite differences");
  }
}

TEST(AdaptiveAvgPool2d, ForwardBackwardMatchReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4, 4}, {2, 3, 1, 1}},  // global average (ResNet's avgpool)
      {{1, 2, 7, 9}, {1, 2, 3, 4}},  // windows overlap
      {{2, 1, 5, 3}, {2, 1, 5, 3}},  // identity
      {{1, 1, 3, 2}, {1, 1, 5, 4}},  // upsampling: output larger than input
  };
  uint64_t seed = 40;
  for (const auto& [xs, ys] : cases) {
    const std::string what = ShapeToString(xs) + " -> " + ShapeToString(ys);
    Tensor x = RandomTensor(xs, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(ys, DType::kF32));
    ZS_ASSERT_OK(AdaptiveAvgPool2dForward(x, y));
    const Vec xv = ToDoubles(x);
    ExpectClose(y, RefAdaptive(xs, xv, ys[2], ys[3]), 1e-6, 1e-6, what);
    Tensor dy = RandomTensor(ys, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(xs, DType::kF32));
    ZS_ASSERT_OK(AdaptiveAvgPool2dBackward(dy, dx));
    const Vec dyv = ToDoubles(dy);
    ExpectClose(dx, NumericGradient([&](const Vec& v) { return Dot(dyv, RefAdaptive(xs, v, ys[2], ys[3])); }, xv),
                1e-6, 1e-6, what + " dx vs finite differences");
  }
}

TEST(Pool2d, SixteenBitAndStridedTensors) {
  Tensor base = RandomTensor({2, 3, 9, 8}, DType::kBF16, -1, 1, 60);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, base.Transpose(2, 3));  // [2, 3, 8, 9]
  const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  ZS_ASSERT_OK_AND_ASSIGN(Shape ys, Pool2dOutputShape(x.shape(), o));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(ys, DType::kBF16));
  ZS_ASSERT_OK(MaxPool2dForward(x, o, y, Tensor()));
  ExpectClose(y, RefMax(x.shape(), ToDoubles(x), o), 0, 0, "bf16 max (exact)");
  ZS_ASSERT_OK(AvgPool2dForward(x, o, y));
  ExpectClose(y, RefAvg(x.shape(), ToDoubles(x), o), 1e-6, 1e-6 + RoundingRtol(DType::kBF16), "bf16 avg");
}

TEST(Pool2d, ErrorsSayWhatWasExpected) {
  Tensor x = RandomTensor({1, 1, 4, 4}, DType::kF32, -1, 1, 70);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty({1, 1, 2, 2}, DType::kF32));
  EXPECT_THAT(MaxPool2dForward(x, {.kernel = {2, 2}, .padding = {2, 2}}, y, Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("padding at most half the kernel")));
  EXPECT_THAT(MaxPool2dForward(x, {.kernel = {5, 5}}, y, Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit the 4x4 input")));
  EXPECT_THAT(MaxPool2dForward(x, {.kernel = {3, 3}}, y, Tensor()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected [1, 1, 1, 1]")));
  EXPECT_THAT(AvgPool2dForward(x, {.kernel = {2, 2}, .dilation = {2, 2}}, y),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected dilation 1")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor idx32, Tensor::Empty({1, 1, 2, 2}, DType::kI32));
  EXPECT_THAT(MaxPool2dForward(x, {.kernel = {2, 2}}, y, idx32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a contiguous i64")));
}

}  // namespace
}  // namespace zeroshard
