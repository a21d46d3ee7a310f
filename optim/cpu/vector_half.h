// float16 <-> float conversions written with selects instead of branches, so
// that the optimizer loops that read f16 gradients and write an f16 copy of the
// parameters vectorise well (runtime/half.h's versions have early returns:
// GCC refuses to vectorise FloatToFloat16Bits and if-converts
// Float16BitsToFloat expensively). Bitwise equal to runtime/half.h for every
// input, NaN payloads included (checked over all 2^32 floats and all 2^16
// halves in tests/optim/vector_half_test.cc).
//
//   c[i] = Float16::FromBits(FloatToFloat16BitsVectorizable(p[i]));
//   float g = Float16BitsToFloatVectorizable(grad[i].bits);
//
// Method (F. Giesen's float_to_half_fast3_rtne): normal results add the
// rebias and the round-to-nearest-even increment to the bits; subnormal results
// add a magic float whose exponent lines the 10 f16 mantissa bits up with the
// float's last ones, so the FPU does the rounding; Inf/NaN are selected last.
#ifndef ZEROSHARD_OPTIM_CPU_VECTOR_HALF_H_
#define ZEROSHARD_OPTIM_CPU_VECTOR_HALF_H_

#include <cstdint>

#include "zeroshard/runtime/half.h"
#include "zeroshard/runtime/host_device.h"

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

// Exact widening: the 15 exponent and mantissa bits moved up 13 places and the
// exponent rebiased by 112; Inf/NaN get a further 112 (payload kept, as
// runtime/half.h); subnormals (exponent 0) are made normal by adding 2^-14 in
// the exponent and subtracting 2^-14 in float, which is exact.
ZS_HOST_DEVICE inline float Float16BitsToFloatVectorizable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t normal = shifted + 0x38000000u;  // + 112 << 23
  const uint32_t special = normal + 0x38000000u;  // Inf / NaN: exponent 255
  const uint32_t sub = FloatBits(BitsToFloat(normal + 0x00800000u) - 6.103515625e-05f);  // 2^-14
  uint32_t r = exponent == 0x0f800000u ? special : normal;
  r = exponent == 0 ? sub : r;
  return BitsToFloat(sign | r);
}

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_CPU_VECTOR_HALF_H_
