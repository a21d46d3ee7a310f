// The branch-free float -> f16 rounding used by the optimizer kernels equals
// runtime/half.h's FloatToFloat16Bits for all 2^32 inputs.
#include "optim/cpu/vector_half.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "runtime/half.h"

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

}  // namespace
}  // namespace zeroshard::optim
