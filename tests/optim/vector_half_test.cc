// The branch-free f16 conversions used by the optimizer kernels equal
// runtime/half.h's for every input (all 2^32 floats, all 2^16 halves).
#include "zeroshard/optim/cpu/vector_half.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "zeroshard/runtime/half.h"

namespace zeroshard::optim {
namespace {

TEST(VectorHalfTest, EqualsFloatToFloat16BitsForEveryFloat) {
  int64_t mismatches = 0;
  uint32_t first_bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : mismatches)
  for (int64_t hi = 0; hi < (int64_t{1} << 16); ++hi) {
    for (uint32_t lo = 0; lo < (1u << 16); ++lo) {
      const uint32_t bits = static_cast<uint32_t>(hi << 16) | lo;
      const float f = BitsToFloat(bits);
      if (FloatToFloat16BitsVectorizable(f) != FloatToFloat16Bits(f)) {
        if (mismatches++ == 0) {
#pragma omp critical
          first_bad = bits;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "e.g. input bits 0x" << std::hex << first_bad << ": got 0x"
                           << FloatToFloat16BitsVectorizable(BitsToFloat(first_bad)) << ", want 0x"
                           << FloatToFloat16Bits(BitsToFloat(first_bad));
}

TEST(VectorHalfTest, WideningEqualsFloat16BitsToFloatForEveryHalf) {
  for (uint32_t h = 0; h < (1u << 16); ++h) {
    const float got = Float16BitsToFloatVectorizable(static_cast<uint16_t>(h));
    const float want = Float16BitsToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatBits(got), FloatBits(want)) << "half bits 0x" << std::hex << h;
  }
}

}  // namespace
}  // namespace zeroshard::optim
