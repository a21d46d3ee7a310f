// <cuda_fp16.h> for kernels compiled into a simulated library (tools/cuda/cuda.bzl;
// see tools/cuda/sim/cuda_sim.h): `__half`, IEEE binary16 as 16 raw bits, the
// device's representation, and its conversions to and from float. Only what
// the kernels use (wmma's fragments and the conversions below); anything else
// of the toolkit's header is a compile error here, not a guess.
//
//   __half h = __float2half(x);   // round to nearest, ties to even
//   float f = __half2float(h);    // exact
//   __half g = 0.5f;              // the same conversions, implicit as on the device
//
// Conversions: 16 -> 32 bits is exact, subnormals, infinities and NaN included;
// 32 -> 16 bits rounds to nearest-even (the device's cvt.rn.f16.f32): overflow
// at or above 65520 (the midpoint between 65504 and 2^16) gives infinity,
// subnormal results are exact roundings, values at or below 2^-25 go to a
// signed zero, and NaN stays NaN (quietened, sign and top payload bits kept;
// the device may give another NaN, so compare NaN-ness, not NaN bits).
// Other source types reach __half through float (an int above 2^24 or a double
// may round twice), where the device has a direct conversion for each.
//
// Arithmetic between two __half values is deleted: the device rounds each
// result to binary16, and an implicit trip through float here would silently
// keep float's precision instead. Convert explicitly (__half2float) and
// compute in float, as the kernels do. `h * 2.0f` is ambiguous on the device
// and here alike. Comparisons go through float, whose results equal binary16's.
#ifndef ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_CUDA_FP16_H_
#define ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_CUDA_FP16_H_

#include <bit>
#include <cstdint>
#include <type_traits>

// The same bit manipulations as zeroshard/runtime/half.h's FloatToFloat16Bits and
// Float16BitsToFloat, repeated rather than included:
// simulated kernels are compiled with -Dzeroshard=zeroshard_sim, and the
// simulator stays out of that namespace.
namespace zs_cuda_sim {

inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: quiet it, keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) {  // >= 65520 (incl. Inf) rounds to Inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (ax >= 0x38800000u) {             // normal binary16 range, >= 2^-14
    ax += 0xfffu + ((ax >> 13) & 1u);  // round the 13 dropped bits to nearest-even
    ax -= 112u << 23;                  // rebias the exponent 127 -> 15
    return static_cast<uint16_t>(sign | (ax >> 13));
  }
  if (ax <= 0x33000000u) {  // <= 2^-25: half the smallest subnormal, ties to 0
    return static_cast<uint16_t>(sign);
  }
  // A subnormal result: round(|f| / 2^-24). |f| = m * 2^(e - 150), so the
  // quotient is m >> (126 - e), with e in [102, 112].
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal: right
  return static_cast<uint16_t>(sign | r);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));  // Inf, NaN
  if (e == 0) {                                                                 // zero, subnormal
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;           // m * 2^-24, exact
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace zs_cuda_sim

struct alignas(2) __half {
 protected:
  unsigned short __x;

 public:
  __half() = default;
  __half(float f) : __x(::zs_cuda_sim::FloatToHalfBits(f)) {}
  operator float() const { return ::zs_cuda_sim::HalfBitsToFloat(__x); }

  friend __half operator+(const __half&, const __half&) = delete;
  friend __half operator-(const __half&, const __half&) = delete;
  friend __half operator*(const __half&, const __half&) = delete;
  friend __half operator/(const __half&, const __half&) = delete;
};

static_assert(sizeof(__half) == 2 && std::is_trivially_copyable_v<__half>,
              "__half is the device's 16 raw bits");

inline __half __float2half(float f) {
  return std::bit_cast<__half>(::zs_cuda_sim::FloatToHalfBits(f));
}

inline float __half2float(__half h) {
  return ::zs_cuda_sim::HalfBitsToFloat(std::bit_cast<uint16_t>(h));
}

#endif  // ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_CUDA_FP16_H_
