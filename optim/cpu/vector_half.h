// float -> float16 rounding written with selects instead of branches, so that
// the optimizer loops that write an f16 copy of the parameters vectorise
// (runtime/half.h's FloatToFloat16Bits has early returns, which GCC's
// vectoriser refuses). Bitwise equal to FloatToFloat16Bits for every input,
// NaN payloads included (checked over all 2^32 inputs in
// tests/optim/vector_half_test.cc).
//
//   c[i] = Float16::FromBits(FloatToFloat16BitsVectorizable(p[i]));
//
// Method (F. Giesen's float_to_half_fast3_rtne): normal results add the
// rebias and the round-to-nearest-even increment to the bits; subnormal results
// add a magic float whose exponent lines the 10 f16 mantissa bits up with the
// float's last ones, so the FPU does the rounding; Inf/NaN are selected last.
#ifndef ZEROSHARD_OPTIM_CPU_VECTOR_HALF_H_
#define ZEROSHARD_OPTIM_CPU_VECTOR_HALF_H_

#include <cstdint>

#include "runtime/half.h"
#include "runtime/host_device.h"

namespace zeroshard::optim {

ZS_HOST_DEVICE inline uint16_t FloatToFloat16BitsVectorizable(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal range (>= 2^-14): rebias 127 -> 15 and round the 13 dropped bits to
  // nearest-even; a carry out of the mantissa correctly bumps the exponent, up
  // to 0x7c00 (Inf) from 65520 on.
  const uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;  // 0xc8000000 = -112 << 23
  // Subnormal range (< 2^-14): |f| + 0.5 has its unit in the last place at
  // 2^-24, the f16 subnormal step, so the addition rounds |f| / 2^-24 to
  // nearest-even into the low bits.
  const float magic = 0.5f;  // bits 0x3f000000
  const uint32_t sub = FloatBits(BitsToFloat(ax) + magic) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  uint32_t r = ax < 0x38800000u ? sub : normal;
  r = ax >= 0x477ff000u ? 0x7c00u : r;  // overflow and Inf
  r = ax > 0x7f800000u ? nan : r;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_CPU_VECTOR_HALF_H_
