// Blockwise quantization (kernels/quantize.h): the packed bytes of small
// hand-worked cases, the error bound of Note [Quantization error] on random
// blocks, NaN and infinity, sums of chunk groups, and the argument errors.
#include "zeroshard/kernels/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

Tensor Floats(const std::vector<float>& v) { return Tensor::FromVector(v, {static_cast<int64_t>(v.size())}).value(); }

Tensor Packed(int64_t chunks, int64_t m, const QuantSpec& spec) {
  return Tensor::Zeros({chunks * PackedBytes(m, spec)}, DType::kI8).value();
}

float ScaleOf(const Tensor& packed, int64_t offset) {
  float s;
  std::memcpy(&s, static_cast<const char*>(packed.raw_data()) + offset, sizeof(float));
  return s;
}

TEST(Quantize, PackedBytesFollowTheLayout) {
  // int8: m bytes rounded up to 4, then a scale per block.
  EXPECT_EQ(PackedBytes(10, {.bits = 8, .block = 4}), 12 + 4 * 3);
  EXPECT_EQ(PackedBytes(256, {.bits = 8, .block = 256}), 256 + 4);
  // int4: ceil(m / 2) bytes rounded up to 4.
  EXPECT_EQ(PackedBytes(10, {.bits = 4, .block = 4}), 8 + 4 * 3);
  EXPECT_EQ(PackedBytes(0, {.bits = 8, .block = 4}), 0);
}

TEST(Quantize, Int8BytesOfAHandWorkedBlock) {
  // One block, max |x| = 2.54: s = 2.54 / 127 (about 0.02); q = rint(x / s),
  // 127 for the maximum; the values are padded to 8 bytes, then the scale.
  const QuantSpec spec{.bits = 8, .block = 8};
  Tensor x = Floats({2.54f, -1.27f, 0.0f, 0.25f, 0.02f});
  Tensor packed = Packed(1, 5, spec);
  ZS_ASSERT_OK(QuantizeChunks(x, 1, spec, packed));
  const float s = 2.54f / 127.0f;
  EXPECT_EQ(ScaleOf(packed, 8), s);
  const int8_t* q = packed.data<int8_t>();
  std::vector<int> want;
  for (float v : {2.54f, -1.27f, 0.0f, 0.25f, 0.02f}) want.push_back(static_cast<int>(std::rint(v / s)));
  EXPECT_EQ(want[0], 127);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q[i], want[i]) << i;
  for (int i = 5; i < 8; ++i) EXPECT_EQ(q[i], 0) << "padding " << i;
  Tensor back = Floats({0, 0, 0, 0, 0});
  ZS_ASSERT_OK(DequantizeReduce(packed, 1, 1, spec, back, 1.0f));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back.data<float>()[i], static_cast<float>(want[i]) * s) << i;
}

TEST(Quantize, Int4PacksTwoPerByteLowNibbleFirst) {
  // max 7: s = 1; values 7, -7, 3, -1, 2 -> bytes (7 | -7 << 4), (3 | -1 << 4), (2 | 0 << 4).
  const QuantSpec spec{.bits = 4, .block = 6};
  Tensor x = Floats({7, -7, 3, -1, 2});
  Tensor packed = Packed(1, 5, spec);
  ZS_ASSERT_OK(QuantizeChunks(x, 1, spec, packed));
  const uint8_t* b = static_cast<const uint8_t*>(packed.raw_data());
  EXPECT_EQ(b[0], 0x97);  // low 7, high -7 = 0x9
  EXPECT_EQ(b[1], 0xf3);  // low 3, high -1 = 0xf
  EXPECT_EQ(b[2], 0x02);  // low 2, high: nothing (odd length) = 0
  EXPECT_EQ(b[3], 0x00);  // padding
  EXPECT_EQ(ScaleOf(packed, 4), 1.0f);
  Tensor back = Floats({0, 0, 0, 0, 0});
  ZS_ASSERT_OK(DequantizeReduce(packed, 1, 1, spec, back, 1.0f));
  EXPECT_EQ(back.ToVector<float>().value(), (std::vector<float>{7, -7, 3, -1, 2}));
}

// Note [Quantization error]: |x - q s| <= s / 2 + 2^-22 m per element, m the
// block's max |x|, s = m / qmax.
TEST(Quantize, ErrorWithinTheNotesBoundOnRandomBlocks) {
  std::mt19937 gen(7);
  for (int bits : {8, 4}) {
    for (int64_t block : {2, 64, 256}) {
      const QuantSpec spec{.bits = bits, .block = block};
      const int64_t chunks = 3, m = 1000;  // a short last block when block does not divide m
      std::vector<float> v(chunks * m);
      // Magnitudes spread over 12 binades so blocks differ in scale.
      std::uniform_real_distribution<float> u(-1, 1), e(-6, 6);
      for (float& a : v) a = u(gen) * std::exp2(e(gen));
      Tensor x = Floats(v);
      Tensor packed = Packed(chunks, m, spec);
      ZS_ASSERT_OK(QuantizeChunks(x, chunks, spec, packed));
      Tensor back = Tensor::Zeros({chunks * m}, DType::kF32).value();
      ZS_ASSERT_OK(DequantizeReduce(packed, chunks, 1, spec, back, 1.0f));
      const float* y = back.data<float>();
      double worst_ratio = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        for (int64_t lo = 0; lo < m; lo += block) {
          const int64_t hi = std::min(m, lo + block);
          double mx = 0;
          for (int64_t i = lo; i < hi; ++i) mx = std::max(mx, std::fabs(double{v[c * m + i]}));
          const double bound = mx / spec.qmax() / 2 + std::ldexp(mx, -22);
          for (int64_t i = lo; i < hi; ++i) {
            const double err = std::fabs(double{v[c * m + i]} - double{y[c * m + i]});
            ASSERT_LE(err, bound) << "bits " << bits << " block " << block << " chunk " << c << " element " << i;
            if (mx > 0) worst_ratio = std::max(worst_ratio, err / (mx / spec.qmax()));
          }
        }
      }
      // The bound is reached: some element is nearly half a step off.
      EXPECT_GT(worst_ratio, 0.45) << "bits " << bits << " block " << block;
    }
  }
}

TEST(Quantize, ZerosAreExactAndNanOrInfinityPoisonsItsBlockOnly) {
  const QuantSpec spec{.bits = 8, .block = 4};
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Floats({0, 0, 0, 0, 1, inf, 2, 3, 4, std::nanf(""), 5, 6, 1, 2, 3, 4});
  Tensor packed = Packed(1, 16, spec);
  ZS_ASSERT_OK(QuantizeChunks(x, 1, spec, packed));
  Tensor back = Tensor::Zeros({16}, DType::kF32).value();
  ZS_ASSERT_OK(DequantizeReduce(packed, 1, 1, spec, back, 1.0f));
  const std::vector<float> y = back.ToVector<float>().value();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  for (int i = 4; i < 12; ++i) EXPECT_TRUE(std::isnan(y[i])) << i << ": " << y[i];
  const float s = 4.0f / 127.0f;
  for (int i = 12; i < 16; ++i) EXPECT_EQ(y[i], std::rint(static_cast<float>(i - 11) / s) * s) << i;
}

TEST(Quantize, DequantizeReduceSumsGroupsInChunkOrderAndDivides) {
  // Values that quantize exactly (multiples of s = max / 127 with max 127 * 2^-4).
  const QuantSpec spec{.bits = 8, .block = 3};
  const int64_t m = 5;
  std::vector<float> v;
  for (int c = 0; c < 6; ++c) {
    for (int i = 0; i < m; ++i) v.push_back((i == 0 ? 127.0f : static_cast<float>(c * 7 - i * 3)) / 16.0f);
  }
  // Each block's max is 127 / 16 only in the first block; make the second's too.
  for (int c = 0; c < 6; ++c) v[c * m + 3] = -127.0f / 16.0f;
  Tensor x = Floats(v);
  Tensor packed = Packed(6, m, spec);
  ZS_ASSERT_OK(QuantizeChunks(x, 6, spec, packed));
  Tensor out = Tensor::Zeros({2 * m}, DType::kF32).value();
  ZS_ASSERT_OK(DequantizeReduce(packed, /*groups=*/2, /*per_group=*/3, spec, out, 3.0f));
  const std::vector<float> y = out.ToVector<float>().value();
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < m; ++i) {
      float sum = v[(3 * g) * m + i];
      for (int c = 1; c < 3; ++c) sum += v[(3 * g + c) * m + i];
      EXPECT_EQ(y[g * m + i], sum / 3.0f) << g << " " << i;
    }
  }
}

TEST(Quantize, BF16InAndOutRoundOnceIntoTheDtype) {
  const QuantSpec spec{.bits = 8, .block = 4};
  Tensor x = Floats({1.0f, -0.5f, 0.25f, 0.125f}).To(DType::kBF16).value();
  Tensor packed = Packed(1, 4, spec);
  ZS_ASSERT_OK(QuantizeChunks(x, 1, spec, packed));
  Tensor out = Tensor::Zeros({4}, DType::kBF16).value();
  ZS_ASSERT_OK(DequantizeReduce(packed, 1, 1, spec, out, 1.0f));
  const float s = 1.0f / 127.0f;
  const std::vector<float> y = out.To(DType::kF32).value().ToVector<float>().value();
  for (int i = 0; i < 4; ++i) {
    const float want = static_cast<float>(BFloat16(std::rint(std::ldexp(1.0f, -i) * (i == 1 ? -1 : 1) / s) * s));
    EXPECT_EQ(y[i], want) << i;
  }
}

TEST(Quantize, ArgumentErrorsSayWhatWasExpected) {
  Tensor x = Floats({1, 2, 3, 4});
  EXPECT_THAT(QuantizeChunks(x, 1, {.bits = 3}, Packed(1, 4, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 8 or 4")));
  EXPECT_THAT(QuantizeChunks(x, 1, {.bits = 4, .block = 3}, Packed(1, 4, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected an even number")));
  EXPECT_THAT(QuantizeChunks(x, 3, {}, Packed(1, 4, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not split into 3 equal chunks")));
  EXPECT_THAT(QuantizeChunks(x, 1, {}, Tensor::Zeros({3}, DType::kI8).value()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 1 chunks of 8")));
  EXPECT_THAT(QuantizeChunks(x, 1, {}, Floats({0, 0})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("contiguous i8")));
  EXPECT_THAT(QuantizeChunks(Tensor::Zeros({4}, DType::kI32).value(), 1, {}, Packed(1, 4, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f32/bf16/f16")));
  EXPECT_THAT(DequantizeReduce(Packed(2, 4, {}), 1, 2, {}, x, 0.0f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("divisor 0")));
  EXPECT_THAT(DequantizeReduce(Packed(2, 4, {}), 1, 3, {}, x, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 3 chunks")));
}

}  // namespace
}  // namespace zeroshard
