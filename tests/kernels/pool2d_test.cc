// Max, average and adaptive average pooling against double references on odd
// shapes (stride, padding, dilation, count_include_pad, non-dividing adaptive
// sizes), the backward passes against central differences of the reference,
// 16-bit and strided tensors, errors.
#include "kernels/pool2d.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/kernels/grad_check.h"
#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

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

int64_t Out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// Max pooling reference; also returns each output's argmax (ih W + iw).
Vec RefMax(const Shape& x_shape, const Vec& x, const Pool2dOptions& o, std::vector<int64_t>* arg = nullptr) {
  const int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
  const int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const int64_t oh = Out(h, o.kernel[0], sh, o.padding[0], o.dilation[0]);
  const int64_t ow = Out(w, o.kernel[1], sw, o.padding[1], o.dilation[1]);
  Vec y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int64_t a = 0; a < o.kernel[0]; ++a)
          for (int64_t b = 0; b < o.kernel[1]; ++b) {
            const int64_t ih = i * sh - o.padding[0] + a * o.dilation[0];
            const int64_t iw = j * sw - o.padding[1] + b * o.dilation[1];
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            if (x[(p * h + ih) * w + iw] > best) {
              best = x[(p * h + ih) * w + iw];
              bi = ih * w + iw;
            }
          }
        y.push_back(best);
        if (arg) arg->push_back(bi);
      }
  return y;
}

// Average over explicit windows [r0, r1) x [c0, c1) with a divisor.
struct Win {
  int64_t r0, r1, c0, c1, div;
};

Vec RefAvgWindows(const Shape& x_shape, const Vec& x, int64_t oh, int64_t ow,
                  const std::function<Win(int64_t, int64_t)>& win) {
  const int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
  Vec y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const Win v = win(i, j);
        double s = 0;
        for (int64_t a = v.r0; a < v.r1; ++a)
          for (int64_t b = v.c0; b < v.c1; ++b) s += x[(p * h + a) * w + b];
        y.push_back(s / v.div);
      }
  return y;
}

Vec RefAvg(const Shape& xs, const Vec& x, const Pool2dOptions& o) {
  const int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const int64_t oh = Out(xs[2], o.kernel[0], sh, o.padding[0], 1), ow = Out(xs[3], o.kernel[1], sw, o.padding[1], 1);
  return RefAvgWindows(xs, x, oh, ow, [&](int64_t i, int64_t j) {
    // torch: hstart = i s - p, hend = min(hstart + k, H + p), pool = (hend - hstart)(wend - wstart),
    // then clip to [0, H).
    int64_t r0 = i * sh - o.padding[0], r1 = std::min(r0 + o.kernel[0], xs[2] + o.padding[0]);
    int64_t c0 = j * sw - o.padding[1], c1 = std::min(c0 + o.kernel[1], xs[3] + o.padding[1]);
    const int64_t pool = (r1 - r0) * (c1 - c0);
    r0 = std::max<int64_t>(r0, 0), c0 = std::max<int64_t>(c0, 0);
    r1 = std::min(r1, xs[2]), c1 = std::min(c1, xs[3]);
    return Win{r0, r1, c0, c1, o.count_include_pad ? pool : (r1 - r0) * (c1 - c0)};
  });
}

Vec RefAdaptive(const Shape& xs, const Vec& x, int64_t oh, int64_t ow) {
  return RefAvgWindows(xs, x, oh, ow, [&](int64_t i, int64_t j) {
    const int64_t r0 = static_cast<int64_t>(std::floor(double(i) * xs[2] / oh));
    const int64_t r1 = static_cast<int64_t>(std::ceil(double(i + 1) * xs[2] / oh));
    const int64_t c0 = static_cast<int64_t>(std::floor(double(j) * xs[3] / ow));
    const int64_t c1 = static_cast<int64_t>(std::ceil(double(j + 1) * xs[3] / ow));
    return Win{r0, r1, c0, c1, (r1 - r0) * (c1 - c0)};
  });
}

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
