// The per-element math of blockwise symmetric quantization (kernels/quantize.h),
// shared by the CPU loops and the CUDA kernels so that both produce the same
// bytes and the same dequantized values, bit for bit.
//
//   float m = 0;
//   for (float x : block) m = QuantAbsMax(m, x);           // NaN/Inf propagate
//   const float s = QuantScale(m, /*qmax=*/127);            // m / 127
//   int8_t q = QuantizeValue(x, s, 127);                    // rint(x / s), in [-127, 127]
//   float back = DequantizeValue(q, s);                      // q * s
//
// Note [Quantization error]
//   With m the block's largest |x| and s = m / qmax (qmax = 127 for 8 bits,
//   7 for 4 bits), exact arithmetic gives |x - q s| <= s / 2. In float: x / s
//   is rounded once (relative 2^-24, so |x / s| is off by at most qmax 2^-24
//   before rint), s itself is m / qmax rounded once, and q s is rounded once;
//   together |x - q s| <= s / 2 + 2^-22 m, which tests use (8 bits:
//   m / 254 + 2^-22 m). A block of zeros has s = 0 and q = 0 (exact). A block
//   holding a NaN or an infinity gets s = NaN, so every value of the block
//   dequantizes to NaN: an overflow check downstream (fp16 loss scaling) sees
//   it instead of a silently clamped value.
#ifndef ZEROSHARD_KERNELS_MATH_QUANTIZE_OPS_H_
#define ZEROSHARD_KERNELS_MATH_QUANTIZE_OPS_H_

#include <cmath>
#include <cstdint>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

// max(m, |x|) that keeps a NaN (and lets an infinity win): the block's scale
// then becomes NaN. The same result in any order of combination.
ZS_HOST_DEVICE inline float QuantAbsMax(float m, float x) {
  const float a = x < 0 ? -x : x;
  return (a > m || a != a) ? a : m;
}

// The scale of a block whose largest magnitude is m: m / qmax; NaN when m is
// not finite (Note [Quantization error]).
ZS_HOST_DEVICE inline float QuantScale(float m, int qmax) {
  if (!(m <= 3.4028234663852886e38f)) return __builtin_nanf("");  // NaN or Inf
  return m / static_cast<float>(qmax);
}

// rint(x / s) clamped to [-qmax, qmax]; 0 for a zero or non-finite scale.
ZS_HOST_DEVICE inline int QuantizeValue(float x, float s, int qmax) {
  if (!(s > 0) || !(s <= 3.4028234663852886e38f)) return 0;
  float r = rintf(x / s);
  r = r > static_cast<float>(qmax) ? static_cast<float>(qmax) : r;
  r = r < -static_cast<float>(qmax) ? -static_cast<float>(qmax) : r;
  return static_cast<int>(r);
}

ZS_HOST_DEVICE inline float DequantizeValue(int q, float s) { return static_cast<float>(q) * s; }

// 4-bit values, two per byte: element 2k in the low nibble, 2k + 1 in the
// high one, each a two's-complement value in [-7, 7].
ZS_HOST_DEVICE inline uint8_t PackNibbles(int lo, int hi) {
  return static_cast<uint8_t>((static_cast<unsigned>(lo) & 0xfu) | ((static_cast<unsigned>(hi) & 0xfu) << 4));
}
ZS_HOST_DEVICE inline int UnpackNibble(uint8_t byte, int which) {
  const int v = which == 0 ? (byte & 0xf) : (byte >> 4);
  return v >= 8 ? v - 16 : v;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_QUANTIZE_OPS_H_
