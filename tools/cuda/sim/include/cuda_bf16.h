// <cuda_bf16.h> for kernels compiled into a simulated library (tools/cuda/cuda.bzl;
// see tools/cuda/sim/cuda_sim.h): `__nv_bfloat16`, bfloat16 as 16 raw bits (the
// top half of a float), the device's representation, and its conversions to
// and from float. Only what the kernels use (wmma's fragments and the
// conversions below); anything else of the toolkit's header is a compile error
// here, not a guess.
//
//   __nv_bfloat16 b = __float2bfloat16(x);   // round to nearest, ties to even
//   float f = __bfloat162float(b);           // exact: the bits << 16
//   __nv_bfloat16 c = 0.5f;                  // the same conversions, implicit as on the device
//
// Conversions: 16 -> 32 bits is exact (bfloat16 is a float with 16 fewer
// fraction bits: subnormals, infinities and NaN included); 32 -> 16 bits rounds
// to nearest-even (the device's cvt.rn.bf16.f32): overflow past the largest
// finite value gives infinity, and NaN stays NaN (quietened, sign kept; the
// device may give another NaN, so compare NaN-ness, not NaN bits). Other source
// types reach __nv_bfloat16 through float (a double may round twice), where
// the device has a direct conversion for each.
//
// Arithmetic between two __nv_bfloat16 values is deleted: the device rounds
// each result to bfloat16, and an implicit trip through float here would
// silently keep float's precision instead. Convert explicitly
// (__bfloat162float) and compute in float, as the kernels do. `b * 2.0f` is
// ambiguous on the device and here alike. Comparisons go through float, whose
// results equal bfloat16's.
#ifndef ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_CUDA_BF16_H_
#define ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_CUDA_BF16_H_

#include <bit>
#include <cstdint>
#include <type_traits>

// The same bit manipulations as zeroshard/runtime/half.h's FloatToBFloat16Bits and
// BFloat16BitsToFloat, repeated rather than included:
// simulated kernels are compiled with -Dzeroshard=zeroshard_sim, and the
// simulator stays out of that namespace.
namespace zs_cuda_sim {

inline uint16_t FloatToBFloat16Bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (overflow carries into Inf)
  return static_cast<uint16_t>(u >> 16);
}

inline float BFloat16BitsToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace zs_cuda_sim

struct alignas(2) __nv_bfloat16 {
 protected:
  unsigned short __x;

 public:
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(::zs_cuda_sim::FloatToBFloat16Bits(f)) {}
  operator float() const { return ::zs_cuda_sim::BFloat16BitsToFloat(__x); }

  friend __nv_bfloat16 operator+(const __nv_bfloat16&, const __nv_bfloat16&) = delete;
  friend __nv_bfloat16 operator-(const __nv_bfloat16&, const __nv_bfloat16&) = delete;
  friend __nv_bfloat16 operator*(const __nv_bfloat16&, const __nv_bfloat16&) = delete;
  friend __nv_bfloat16 operator/(const __nv_bfloat16&, const __nv_bfloat16&) = delete;
};

static_assert(sizeof(__nv_bfloat16) == 2 && std::is_trivially_copyable_v<__nv_bfloat16>,
              "__nv_bfloat16 is the device's 16 raw bits");

inline __nv_bfloat16 __float2bfloat16(float f) {
  return std::bit_cast<__nv_bfloat16>(::zs_cuda_sim::FloatToBFloat16Bits(f));
}

inline float __bfloat162float(__nv_bfloat16 b) {
  return ::zs_cuda_sim::BFloat16BitsToFloat(std::bit_cast<uint16_t>(b));
}

#endif  // ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_CUDA_BF16_H_
