// Conv2d forward and backward against a direct double-precision convolution:
// odd shapes, every combination of stride, padding, dilation and groups
// (depthwise included), rectangular kernels, 16-bit and strided inputs,
// several im2col chunks; the reference gradients against central differences;
// accumulate vs overwrite; errors naming expected and found.
//
// Tolerances (|got - want| <= atol + rtol |want|): fp32 sums of K = C/g KH KW
// products of values in [-1, 1]: atol 1e-5 (forward, dx), 1e-5 * N OH OW for
// the weight and bias gradients (sums over every output position).
#include "zeroshard/kernels/conv2d.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/conv2d.h"
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
using ::zeroshard::testing::ConvCase;
using ::zeroshard::testing::ConvDims;
using ::zeroshard::testing::ConvDimsOf;
using ::zeroshard::testing::ForEachConvTap;
using ::zeroshard::testing::RefConv2d;

struct RefGrads {
  Vec dx, dw, db;
};

RefGrads RefBackward(const ConvCase& k, const Vec& dy, const Vec& x, const Vec& w) {
  const ConvDims d = ConvDimsOf(k);
  RefGrads g{Vec(x.size(), 0.0), Vec(w.size(), 0.0), Vec(d.o, 0.0)};
  ForEachConvTap(k, [&](int64_t yi, int64_t xi, int64_t wi) {
    g.dx[xi] += dy[yi] * w[wi];
    g.dw[wi] += dy[yi] * x[xi];
  });
  for (size_t i = 0; i < dy.size(); ++i) g.db[(i / (d.oh * d.ow)) % d.o] += dy[i];
  return g;
}

Conv2dOptions Opt(int64_t s0, int64_t s1, int64_t p0, int64_t p1, int64_t d0, int64_t d1, int64_t g) {
  return Conv2dOptions{.stride = {s0, s1}, .padding = {p0, p1}, .dilation = {d0, d1}, .groups = g};
}

const std::vector<ConvCase>& Cases() {
  static const std::vector<ConvCase> cases = {
      {{2, 3, 7, 9}, {5, 3, 3, 3}, Opt(1, 1, 1, 1, 1, 1, 1), "3x3 same"},
      {{3, 4, 9, 8}, {6, 4, 3, 3}, Opt(2, 2, 1, 1, 1, 1, 1), "3x3 stride 2"},
      {{1, 3, 11, 13}, {4, 3, 7, 7}, Opt(2, 2, 3, 3, 1, 1, 1), "7x7 stride 2 (ResNet stem)"},
      {{2, 6, 6, 5}, {4, 6, 1, 1}, Opt(2, 2, 0, 0, 1, 1, 1), "1x1 stride 2 (downsample)"},
      {{2, 5, 8, 7}, {3, 5, 2, 3}, Opt(1, 2, 0, 2, 1, 1, 1), "rectangular kernel, stride, padding"},
      {{2, 2, 11, 10}, {3, 2, 3, 2}, Opt(1, 1, 2, 1, 2, 3, 1), "dilation"},
      {{2, 6, 7, 7}, {9, 2, 3, 3}, Opt(1, 1, 1, 1, 1, 1, 3), "groups 3"},
      {{3, 4, 6, 9}, {4, 1, 3, 3}, Opt(2, 1, 1, 1, 1, 1, 4), "depthwise"},
      {{2, 3, 8, 8}, {6, 1, 3, 3}, Opt(1, 1, 2, 2, 2, 2, 3), "depthwise x2 multiplier, dilated"},
      {{1, 1, 1, 1}, {1, 1, 1, 1}, Opt(1, 1, 0, 0, 1, 1, 1), "1x1 image"},
      {{2, 3, 5, 5}, {2, 3, 5, 5}, Opt(3, 3, 0, 0, 1, 1, 1), "kernel covers the image"},
      {{1, 2, 3, 3}, {2, 2, 3, 3}, Opt(1, 1, 4, 4, 1, 1, 1), "padding larger than the kernel"},
  };
  return cases;
}

TEST(Conv2d, ForwardMatchesDoubleReference) {
  uint64_t seed = 1;
  for (const ConvCase& k : Cases()) {
    for (bool bias : {true, false}) {
      Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, seed++);
      Tensor w = RandomTensor(k.w, DType::kF32, -1, 1, seed++);
      Tensor b = bias ? RandomTensor({k.w[0]}, DType::kF32, -1, 1, seed++) : Tensor();
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Conv2dForward(x, w, b, k.o));
      const ConvDims d = ConvDimsOf(k);
      ASSERT_EQ(y.shape(), (Shape{d.n, d.o, d.oh, d.ow})) << k.name;
      ExpectClose(y, RefConv2d(k, ToDoubles(x), ToDoubles(w), bias ? ToDoubles(b) : Vec()), 1e-5,
                  1e-5, k.name + (bias ? "" : " no bias"));
    }
  }
}

TEST(Conv2d, ReferenceGradientMatchesFiniteDifferences) {
  uint64_t seed = 50;
  for (const ConvCase& k : Cases()) {
    const Vec x = ToDoubles(RandomTensor(k.x, DType::kF32, -1, 1, seed++));
    const Vec w = ToDoubles(RandomTensor(k.w, DType::kF32, -1, 1, seed++));
    const Vec b = ToDoubles(RandomTensor({k.w[0]}, DType::kF32, -1, 1, seed++));
    const Vec y = RefConv2d(k, x, w, b);
    const Vec dy = ToDoubles(RandomTensor({static_cast<int64_t>(y.size())}, DType::kF32, -1, 1, seed++));
    const RefGrads g = RefBackward(k, dy, x, w);
    ExpectClose(g.dx, NumericGradient([&](const Vec& v) { return Dot(dy, RefConv2d(k, v, w, b)); }, x),
                1e-7, 1e-6, k.name + " dx vs finite differences");
    ExpectClose(g.dw, NumericGradient([&](const Vec& v) { return Dot(dy, RefConv2d(k, x, v, b)); }, w),
                1e-7, 1e-6, k.name + " dweight vs finite differences");
    ExpectClose(g.db, NumericGradient([&](const Vec& v) { return Dot(dy, RefConv2d(k, x, w, v)); }, b),
                1e-7, 1e-6, k.name + " dbias vs finite differences");
  }
}

TEST(Conv2d, BackwardMatchesDoubleReference) {
  uint64_t seed = 100;
  for (const ConvCase& k : Cases()) {
    Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, seed++);
    Tensor w = RandomTensor(k.w, DType::kF32, -1, 1, seed++);
    const ConvDims d = ConvDimsOf(k);
    Tensor dy = RandomTensor({d.n, d.o, d.oh, d.ow}, DType::kF32, -1, 1, seed++);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Full(k.x, 7.0, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full(k.w, 7.0, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({d.o}, 7.0, DType::kF32));
    ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx, dw, db, GradMode::kOverwrite));
    const RefGrads g = RefBackward(k, ToDoubles(dy), ToDoubles(x), ToDoubles(w));
    const double sum_atol = 1e-5 * (1 + d.n * d.oh * d.ow);
    ExpectClose(dx, g.dx, 1e-5, 1e-5, k.name + " dx");
    ExpectClose(dw, g.dw, sum_atol, 1e-5, k.name + " dweight");
    ExpectClose(db, g.db, sum_atol, 1e-5, k.name + " dbias");
    // Accumulate adds to what is there (7); dx is always overwritten.
    ZS_ASSERT_OK(dw.Fill(7.0));
    ZS_ASSERT_OK(db.Fill(7.0));
    ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx, dw, db, GradMode::kAccumulate));
    Vec dw7 = g.dw, db7 = g.db;
    for (double& v : dw7) v += 7;
    for (double& v : db7) v += 7;
    ExpectClose(dx, g.dx, 1e-5, 1e-5, k.name + " dx again");
    ExpectClose(dw, dw7, sum_atol, 1e-5, k.name + " dweight accumulated");
    ExpectClose(db, db7, sum_atol, 1e-5, k.name + " dbias accumulated");
    // Any subset of the gradients.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx_only, Tensor::Empty(k.x, DType::kF32));
    ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx_only, Tensor(), Tensor(), GradMode::kOverwrite));
    ExpectClose(dx_only, g.dx, 1e-5, 1e-5, k.name + " dx only");
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dw_only, Tensor::Empty(k.w, DType::kF32));
    ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, Tensor(), dw_only, Tensor(), GradMode::kOverwrite));
    ExpectClose(dw_only, g.dw, sum_atol, 1e-5, k.name + " dweight only");
  }
}

TEST(Conv2d, SeveralIm2ColChunks) {
  // 27 taps x 48 x 48 outputs = 62208 floats per sample: 67 samples per chunk,
  // so 150 samples take 3 chunks (the last one short).
  const ConvCase k{{150, 3, 48, 48}, {2, 3, 3, 3}, Opt(1, 1, 1, 1, 1, 1, 1), "chunks"};
  Conv2dGeometry g{};
  g.n = 150, g.c = 3, g.o = 2, g.kh = 3, g.kw = 3, g.oh = 48, g.ow = 48, g.groups = 1;
  ASSERT_EQ(cpu::Conv2dChunkSamples(g), cpu::kConvColBudget / (27 * 48 * 48));
  ASSERT_LT(cpu::Conv2dChunkSamples(g) * 2, 150);
  Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, 200);
  Tensor w = RandomTensor(k.w, DType::kF32, -1, 1, 201);
  Tensor b = RandomTensor({2}, DType::kF32, -1, 1, 202);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Conv2dForward(x, w, b, k.o));
  ExpectClose(y, RefConv2d(k, ToDoubles(x), ToDoubles(w), ToDoubles(b)), 1e-5, 1e-5, "forward");
  Tensor dy = RandomTensor(y.shape(), DType::kF32, -1, 1, 203);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(k.x, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty(k.w, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({2}, DType::kF32));
  ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx, dw, db, GradMode::kOverwrite));
  const RefGrads r = RefBackward(k, ToDoubles(dy), ToDoubles(x), ToDoubles(w));
  ExpectClose(dx, r.dx, 1e-5, 1e-5, "dx");
  ExpectClose(dw, r.dw, 1e-5 * 150 * 48 * 48 / 100, 1e-4, "dweight");
  ExpectClose(db, r.db, 1e-5 * 150 * 48 * 48 / 100, 1e-4, "dbias");
  // Deterministic: a second run gives the same bits.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw2, Tensor::Empty(k.w, DType::kF32));
  ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, Tensor(), dw2, Tensor(), GradMode::kOverwrite));
  EXPECT_EQ(dw.ToVector<float>().value(), dw2.ToVector<float>().value());
}

TEST(Conv2d, BitwiseTheSameForAnyThreadCount) {
  const ConvCase k{{6, 32, 20, 20}, {48, 16, 3, 3}, Opt(1, 1, 1, 1, 1, 1, 2), "threads"};
  Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, 600), w = RandomTensor(k.w, DType::kF32, -1, 1, 601);
  Tensor b = RandomTensor({48}, DType::kF32, -1, 1, 602);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<float>> runs;
  for (int n : {1, 2, 3}) {
    omp_set_num_threads(n);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Conv2dForward(x, w, b, k.o));
    Tensor dy = RandomTensor(y.shape(), DType::kF32, -1, 1, 603);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(k.x, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty(k.w, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({48}, DType::kF32));
    ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx, dw, db, GradMode::kOverwrite));
    std::vector<float> all;
    for (const Tensor* t : {&y, &dx, &dw, &db}) {
      const std::vector<float> v = t->ToVector<float>().value();
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(all);
  }
  omp_set_num_threads(threads);
  EXPECT_TRUE(runs[0] == runs[1]) << "1 vs 2 threads";
  EXPECT_TRUE(runs[0] == runs[2]) << "1 vs 3 threads";
}

TEST(Conv2d, SixteenBitAndStridedTensors) {
  const ConvCase& k = Cases()[6];  // groups 3
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Tensor x = RandomTensor(k.x, dtype, -1, 1, 300);
    Tensor w = RandomTensor(k.w, dtype, -1, 1, 301);
    Tensor b = RandomTensor({k.w[0]}, DType::kF32, -1, 1, 302);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Conv2dForward(x, w, b, k.o));
    EXPECT_EQ(y.dtype(), dtype);
    const Vec want = RefConv2d(k, ToDoubles(x), ToDoubles(w), ToDoubles(b));
    ExpectClose(y, want, 1e-5, 1e-5 + RoundingRtol(dtype), std::string(DTypeName(dtype)));
    // x and weight of different dtypes: an f32 result.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor x32, x.To(DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y32, Conv2dForward(x32, w, b, k.o));
    EXPECT_EQ(y32.dtype(), DType::kF32);
    ExpectClose(y32, want, 1e-5, 1e-5, std::string(DTypeName(dtype)) + " weight, f32 x");
  }
  // A transposed (non-contiguous) x and an output that is a slice of a bigger buffer.
  Tensor xt_base = RandomTensor({k.x[0], k.x[1], k.x[3], k.x[2]}, DType::kF32, -1, 1, 310);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xt, xt_base.Transpose(2, 3));
  Tensor w = RandomTensor(k.w, DType::kF32, -1, 1, 311);
  const ConvDims d = ConvDimsOf(k);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({d.n, d.o + 2, d.oh, d.ow}, 5.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, big.Narrow(1, 1, d.o));
  ZS_ASSERT_OK(Conv2dForward(xt, w, Tensor(), k.o, y));
  ExpectClose(y, RefConv2d(k, ToDoubles(xt), ToDoubles(w), Vec()), 1e-5, 1e-5, "strided");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor edge, big.Narrow(1, 0, 1));
  for (double v : ToDoubles(edge)) ASSERT_EQ(v, 5.0);
  // bf16 gradients: one rounding of the fp32 result.
  Tensor dy = RandomTensor(y.shape(), DType::kF32, -1, 1, 312);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(k.x, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty(k.w, DType::kBF16));
  ZS_ASSERT_OK(Conv2dBackward(dy, xt, w, k.o, dx, dw, Tensor(), GradMode::kOverwrite));
  const RefGrads r = RefBackward(k, ToDoubles(dy), ToDoubles(xt), ToDoubles(w));
  ExpectClose(dx, r.dx, 1e-5, 1e-5 + RoundingRtol(DType::kBF16), "bf16 dx");
  ExpectClose(dw, r.dw, 1e-4, 1e-5 + RoundingRtol(DType::kBF16), "bf16 dweight");
}

TEST(Conv2d, EmptyBatch) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::Empty({0, 3, 5, 5}, DType::kF32));
  Tensor w = RandomTensor({4, 3, 3, 3}, DType::kF32, -1, 1, 400);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Conv2dForward(x, w, Tensor(), {}));
  EXPECT_EQ(y.shape(), (Shape{0, 4, 3, 3}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({4, 3, 3, 3}, 1.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({4}, 1.0, DType::kF32));
  ZS_ASSERT_OK(Conv2dBackward(y, x, w, {}, Tensor(), dw, db, GradMode::kOverwrite));
  for (double v : ToDoubles(dw)) ASSERT_EQ(v, 0.0);
  for (double v : ToDoubles(db)) ASSERT_EQ(v, 0.0);
}

TEST(Conv2d, ErrorsSayWhatWasExpected) {
  Tensor x = RandomTensor({2, 6, 5, 5}, DType::kF32, -1, 1, 500);
  Tensor w = RandomTensor({4, 3, 3, 3}, DType::kF32, -1, 1, 501);
  EXPECT_THAT(Conv2dForward(x, w, Tensor(), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected weight.size(1) == C / groups = 6")));
  EXPECT_THAT(Conv2dForward(x, w, Tensor(), {.groups = 4}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a divisor of both")));
  EXPECT_THAT(Conv2dForward(x, w, Tensor(), {.stride = {0, 1}, .groups = 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stride and dilation >= 1")));
  EXPECT_THAT(Conv2dForward(x, w, Tensor(), {.dilation = {3, 3}, .groups = 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit the 5x5 input")));
  Tensor b = RandomTensor({3}, DType::kF32, -1, 1, 502);
  EXPECT_THAT(Conv2dForward(x, w, b, {.groups = 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected [4]")));
  Tensor x3 = RandomTensor({6, 5, 5}, DType::kF32, -1, 1, 503);
  EXPECT_THAT(Conv2dForward(x3, w, Tensor(), {.groups = 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 4 dimensions")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty({2, 4, 5, 5}, DType::kF32));
  EXPECT_THAT(Conv2dForward(x, w, Tensor(), {.groups = 2}, y),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected [2, 4, 3, 3]")));
}

}  // namespace
}  // namespace zeroshard
