// Per-element float math that vectorises on the CPU and runs unchanged on the
// GPU: exp, log, tanh, sigmoid, SiLU, GELU (tanh form) and their derivatives.
//
//   y = GeluTanh(x);            // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   dx = dy * GeluTanhGrad(x);
//
// The CPU kernels call these inside RunWithIsa loops (kernels/cpu/isa.h), where
// libm calls would block vectorisation; the CUDA kernels call the same
// functions, so the CPU tests check the arithmetic the GPU runs. Every function
// is branch-free (selects, not jumps). Accuracy, checked against double
// precision in tests/kernels/fast_math_test.cc:
//   ExpF   relative error < 2 ulp over [-87.3, 88.7]; 0 below, +Inf above (no subnormal results)
//   LogF   absolute error < 2e-7 near 1, relative < 2 ulp elsewhere; -Inf at 0, NaN below
//   TanhF  relative error < 3 ulp (polynomial for |x| < 0.625, exp form beyond)
#ifndef ZEROSHARD_KERNELS_MATH_FAST_MATH_H_
#define ZEROSHARD_KERNELS_MATH_FAST_MATH_H_

#include <cstdint>

#include "zeroshard/runtime/half.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

inline constexpr float kInfF = __builtin_inff();
inline constexpr float kNanF = __builtin_nanf("");

// exp(x): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for exp(r), and 2^n assembled in the exponent bits.
ZS_HOST_DEVICE inline float ExpF(float x) {
  const bool over = x > 88.72283905206835f;
  const bool under = x < -87.33654475055310f;
  float xc = x > 88.72283f ? 88.72283f : x;
  xc = xc < -87.33654f ? -87.33654f : xc;
  // n = round(x log2 e) by the 1.5 * 2^23 trick: n lands in the low mantissa bits.
  const float shifter = 12582912.0f;
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n: n + 127 in the exponent field. n is in [-126, 128); split the scale in
  // two factors so that n = 128 (x near 88.7) does not overflow the field.
  const int32_t ni = static_cast<int32_t>(n);
  const float s1 = BitsToFloat(static_cast<uint32_t>((ni >> 1) + 127) << 23);
  const float s2 = BitsToFloat(static_cast<uint32_t>(ni - (ni >> 1) + 127) << 23);
  float y = p * s1 * s2;
  y = over ? kInfF : y;
  y = under ? 0.0f : y;
  y = (x != x) ? x : y;
  return y;
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9
// polynomial in (m - 1), plus e ln2 split in two parts.
ZS_HOST_DEVICE inline float LogF(float x) {
  // Scale subnormals into the normal range first.
  const bool sub = x < 1.17549435e-38f;
  const float xs = sub ? x * 8388608.0f : x;  // * 2^23
  const uint32_t bits = FloatBits(xs);
  float e = static_cast<float>(static_cast<int32_t>((bits >> 23) & 0xffu) - 126) - (sub ? 23.0f : 0.0f);
  float m = BitsToFloat((bits & 0x807fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  e = small ? e - 1.0f : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  float r = m + y;
  r += 0.693359375f * e;
  r = x == kInfF ? kInfF : r;
  r = x == 0.0f ? -kInfF : r;
  r = (x < 0.0f || x != x) ? kNanF : r;
  return r;
}

// tanh(x): an odd polynomial for |x| < 0.625 (where 1 - 2/(e^2x + 1) would
// cancel), the exp form beyond, saturating to +-1.
ZS_HOST_DEVICE inline float TanhF(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = ExpF(2.0f * (ax > 20.0f ? 20.0f : ax));  // past 9, tanh rounds to 1
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : big;
}

// sigmoid(x) = 1 / (1 + e^-x): e^-x overflows to +Inf for x < -88.7 and the
// result goes to 0, never NaN; 1 - sigmoid(x) is best taken as SigmoidF(-x)
// (no cancellation for large x).
ZS_HOST_DEVICE inline float SigmoidF(float x) { return 1.0f / (1.0f + ExpF(-x)); }

// SiLU (swish), Llama's MLP activation: x sigmoid(x), and its derivative
// sigmoid(x) (1 + x (1 - sigmoid(x))), with 1 - sigmoid(x) = sigmoid(-x).
ZS_HOST_DEVICE inline float SiluF(float x) { return x * SigmoidF(x); }
ZS_HOST_DEVICE inline float SiluGradF(float x) { return SigmoidF(x) * (1.0f + x * SigmoidF(-x)); }

// GELU, tanh approximation (GPT-2's), and its derivative with respect to x.
inline constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluA = 0.044715f;

// Both are written with e = exp(-2|u|), u = sqrt(2/pi) (x + 0.044715 x^3):
//   1 + tanh(u) = 2 / (1 + e)  (u >= 0)   or   2 e / (1 + e)  (u < 0)
//   1 - tanh(u)^2 = 4 e / (1 + e)^2
// which keeps full relative precision in the tails, where 1 + tanh(u) and
// 1 - tanh(u)^2 computed from a rounded tanh would cancel to garbage.
ZS_HOST_DEVICE inline float GeluTanh(float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  const float e = ExpF(-2.0f * (u < 0.0f ? -u : u));
  const float one_plus_t = (u >= 0.0f ? 2.0f : 2.0f * e) / (1.0f + e);
  return 0.5f * x * one_plus_t;
}

ZS_HOST_DEVICE inline float GeluTanhGrad(float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  const float e = ExpF(-2.0f * (u < 0.0f ? -u : u));
  const float inv = 1.0f / (1.0f + e);
  const float one_plus_t = (u >= 0.0f ? 2.0f : 2.0f * e) * inv;
  const float sech2 = 4.0f * e * inv * inv;
  const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
  return 0.5f * one_plus_t + 0.5f * x * sech2 * du;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_FAST_MATH_H_
