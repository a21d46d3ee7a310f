// BFloat16 and Float16: 16-bit floating-point storage types and their
// conversions to and from float, shared by host and device code.
//
//   BFloat16 b(3.14159f);          // round to nearest, ties to even
//   float back = static_cast<float>(b);   // 3.140625
//   uint16_t raw = Float16(1.0f).bits;    // 0x3c00
//
// Both are plain storage: arithmetic happens in float (kernels accumulate in
// fp32). Conversions are exact in the direction 16 -> 32 bits and round to
// nearest-even in the direction 32 -> 16 bits, with:
//   - NaN stays NaN (quietened, sign kept), never rounding into Inf;
//   - overflow rounds to +-Inf (bf16: only past the largest finite value;
//     f16: at or above 65520, the midpoint between 65504 and 2^16);
//   - f16 subnormals (2^-24 .. 2^-14) produced and read exactly, values below
//     2^-25 flush to signed zero by the rounding rule (not by truncation).
#ifndef ZEROSHARD_RUNTIME_HALF_H_
#define ZEROSHARD_RUNTIME_HALF_H_

#include <cstdint>
#include <cstring>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

ZS_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// ---------------------------------------------------------------- bfloat16

ZS_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

ZS_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

// ---------------------------------------------------------------- float16

ZS_HOST_DEVICE inline uint16_t FloatToFloat16Bits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: quiet it, keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) {  // >= 65520 (incl. Inf) rounds to Inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (ax >= 0x38800000u) {  // normal f16 range, >= 2^-14
    ax += 0xfffu + ((ax >> 13) & 1u);  // round the 13 dropped bits to nearest-even
    ax -= 112u << 23;                   // rebias exponent 127 -> 15
    return static_cast<uint16_t>(sign | (ax >> 13));
  }
  if (ax <= 0x33000000u) {  // <= 2^-25: half of the smallest subnormal, ties to 0
    return static_cast<uint16_t>(sign);
  }
  // Subnormal result: round(|f| / 2^-24). |f| = m * 2^(e - 150), so the
  // quotient is m >> (126 - e), with e in [102, 112].
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the min normal: correct
  return static_cast<uint16_t>(sign | r);
}

ZS_HOST_DEVICE inline float Float16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return BitsToFloat(sign | 0x7f800000u | (m << 13));  // Inf / NaN
  if (e == 0) {                                                         // zero / subnormal
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -mag : mag;
  }
  return BitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// ---------------------------------------------------------------- storage types

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  ZS_HOST_DEVICE explicit BFloat16(float f) : bits(FloatToBFloat16Bits(f)) {}
  ZS_HOST_DEVICE static BFloat16 FromBits(uint16_t b) {
    BFloat16 r;
    r.bits = b;
    return r;
  }
  ZS_HOST_DEVICE explicit operator float() const { return BFloat16BitsToFloat(bits); }
};

struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  ZS_HOST_DEVICE explicit Float16(float f) : bits(FloatToFloat16Bits(f)) {}
  ZS_HOST_DEVICE static Float16 FromBits(uint16_t b) {
    Float16 r;
    r.bits = b;
    return r;
  }
  ZS_HOST_DEVICE explicit operator float() const { return Float16BitsToFloat(bits); }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_HALF_H_
