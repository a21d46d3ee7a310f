// bf16 / f16 conversions: exhaustive round trips, a reference rounding in
// double, the compiler's own _Float16 as a second oracle, and edge values.
#include "zeroshard/runtime/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace zeroshard {
namespace {

bool IsNanBits16(uint16_t h, bool bf16) {
  return bf16 ? ((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0)
              : ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
}

TEST(Half, Float16RoundTripsEveryBitPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = Float16BitsToFloat(h);
    if (IsNanBits16(h, /*bf16=*/false)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << b;
      EXPECT_TRUE(IsNanBits16(FloatToFloat16Bits(f), false)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(FloatToFloat16Bits(f), h) << "bits 0x" << std::hex << b << " value " << f;
  }
}

TEST(Half, BFloat16RoundTripsEveryBitPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = BFloat16BitsToFloat(h);
    if (IsNanBits16(h, /*bf16=*/true)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(IsNanBits16(FloatToBFloat16Bits(f), true));
      continue;
    }
    ASSERT_EQ(FloatToBFloat16Bits(f), h) << "bits 0x" << std::hex << b;
  }
}

// Reference: the representable neighbours of x, and the nearest with ties to even.
uint16_t ReferenceBFloat16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  const uint32_t u = FloatBits(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // toward zero
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // away from zero (may reach Inf)
  const double dx = std::fabs(static_cast<double>(x));
  const double dlo = std::fabs(static_cast<double>(BFloat16BitsToFloat(lo)));
  const double dhi = std::fabs(static_cast<double>(BFloat16BitsToFloat(hi)));
  if (dx - dlo < dhi - dx) return lo;
  if (dx - dlo > dhi - dx) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Half, BFloat16MatchesReferenceRounding) {
  // Every 65537th float bit pattern plus every tie neighbourhood near 1.0.
  for (uint64_t b = 0; b <= 0xffffffffull; b += 65537) {
    const float x = BitsToFloat(static_cast<uint32_t>(b));
    if (std::isnan(x)) continue;
    if (std::isinf(x)) continue;
    const uint16_t got = FloatToBFloat16Bits(x);
    // Past the largest finite bf16 the upper neighbour is Inf, whose "value"
    // is not a distance; RNE still rounds to it only past the midpoint.
    if ((static_cast<uint32_t>(b) & 0x7fffffff) >= 0x7f7f8000u) continue;
    ASSERT_EQ(got, ReferenceBFloat16(x)) << "bits 0x" << std::hex << b;
  }
  for (uint32_t low = 0x7fff; low <= 0x8001; ++low) {
    const float x = BitsToFloat(0x3f800000u | low);
    EXPECT_EQ(FloatToBFloat16Bits(x), ReferenceBFloat16(x)) << std::hex << low;
  }
}

TEST(Half, Float16MatchesCompilerConversion) {
  // GCC's _Float16 conversion is IEEE round-to-nearest-even in software.
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) {
    const float x = BitsToFloat(static_cast<uint32_t>(b));
    const _Float16 ref = static_cast<_Float16>(x);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    const uint16_t got = FloatToFloat16Bits(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(IsNanBits16(got, false));
      continue;
    }
    ASSERT_EQ(got, ref_bits) << "float bits 0x" << std::hex << b << " value " << x;
  }
}

TEST(Half, Float16EdgeValues) {
  EXPECT_EQ(FloatToFloat16Bits(0.0f), 0x0000);
  EXPECT_EQ(FloatToFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFloat16Bits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFloat16Bits(65504.0f), 0x7bff);              // largest finite
  EXPECT_EQ(FloatToFloat16Bits(65519.99f), 0x7bff);             // just below the midpoint
  EXPECT_EQ(FloatToFloat16Bits(65520.0f), 0x7c00);              // midpoint: ties to even = Inf
  EXPECT_EQ(FloatToFloat16Bits(-1e9f), 0xfc00);                 // -Inf
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: ties to 0
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp rounds up
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: ties to even (2)
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp: ties to even (2)
  EXPECT_EQ(FloatToFloat16Bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(IsNanBits16(FloatToFloat16Bits(std::nanf("")), false));
  EXPECT_EQ(FloatToFloat16Bits(-std::nanf("")) & 0x8000, 0x8000);  // sign kept
  EXPECT_EQ(Float16BitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16BitsToFloat(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(Float16BitsToFloat(0x7c00)));
}

TEST(Half, BFloat16EdgeValues) {
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to Inf
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x7f7f7fffu)), 0x7f7f);  // stays finite
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16Bits(-std::numeric_limits<float>::infinity()), 0xff80);
  // NaN with payload only in the low 16 bits must not become Inf.
  EXPECT_TRUE(IsNanBits16(FloatToBFloat16Bits(BitsToFloat(0x7f800001u)), true));
  EXPECT_TRUE(IsNanBits16(FloatToBFloat16Bits(BitsToFloat(0xffffffffu)), true));
  // Subnormal floats are bf16 subnormals, kept (no flush to zero).
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x00010000u)), 0x0001);
  EXPECT_EQ(BFloat16BitsToFloat(0x0001), BitsToFloat(0x00010000u));
}

TEST(Half, StorageTypes) {
  EXPECT_EQ(static_cast<float>(BFloat16(3.14159f)), 3.140625f);
  EXPECT_EQ(Float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(static_cast<float>(Float16::FromBits(0x3555)), 0.333251953125f);
}

}  // namespace
}  // namespace zeroshard
