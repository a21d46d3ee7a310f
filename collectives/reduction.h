// ReduceOp and the per-element reduction math every backend shares.
//
//   using Tr = ReduceTraits<BFloat16>;                // Acc = float
//   Tr::Acc acc = Tr::Load(a);                        // bf16 -> fp32, exact
//   acc = ReduceCombine<ReduceOp::kSum>(acc, Tr::Load(b));
//   BFloat16 out = Tr::Store(ReduceFinish<ReduceOp::kAvg>(acc, /*n=*/2));  // one rounding
//
// Note [Reduction numerics] (the contract of every backend):
//   - f32, bf16 and f16 accumulate in fp32: 16-bit inputs are widened exactly,
//     combined in fp32 and rounded once (nearest-even) when stored.
//   - Inputs are combined in rank order 0, 1, ..., n-1, so every rank, every
//     backend on the CPU (in-process and MPI) and every run gives bitwise the
//     same result for the same inputs.
//   - SUM of integers wraps modulo 2^bits (as MPI does); AVG of integers is
//     the wrapped sum divided by n, truncated toward zero.
//   - AVG of floats is the fp32 sum divided by n (a true division, not a
//     multiplication by 1/n).
//   - MAX propagates NaN: if any input is NaN the result is NaN (an overflow
//     check by all-reduce MAX must see it).
//
// The functions are ZS_HOST_DEVICE so that CUDA kernels call the very code the
// CPU tests exercise.
#ifndef ZEROSHARD_COLLECTIVES_REDUCTION_H_
#define ZEROSHARD_COLLECTIVES_REDUCTION_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/half.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,
  kMax = 2,
};

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

// "sum", "avg", "max".
constexpr absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "invalid";
}

// Accepts "sum", "avg" (or "mean"), "max", any case.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// How a storage type is reduced: the accumulator type and the exact
// conversions into and out of it.
template <typename T>
struct ReduceTraits {
  static_assert(kIsDTypeStorage<T>, "not a zeroshard storage type");
  // fp32 for every floating type; the integer itself for integers.
  using Acc = std::conditional_t<std::is_integral_v<T>, T, float>;
  ZS_HOST_DEVICE static Acc Load(T v) { return static_cast<Acc>(v); }
  ZS_HOST_DEVICE static T Store(Acc v) { return T(v); }
};

// The 16-bit conversions of runtime/half.h, rewritten with selects instead
// of branches so that CPU reduction loops vectorise. Bit-identical to
// BFloat16(float) / static_cast<float>(Float16) for every input (checked in
// tests/collectives/reduction_test.cc).
ZS_HOST_DEVICE inline BFloat16 BFloat16FromFloatSelect(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return BFloat16::FromBits(
      static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded));
}

// All-ones when `c`, else zero: lets the conversions below combine their
// cases with masks, which vectorise, instead of branches, which do not.
ZS_HOST_DEVICE inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }

ZS_HOST_DEVICE inline float Float16ToFloatSelect(Float16 h) {
  const uint32_t b = h.bits;
  const uint32_t sign = (b & 0x8000u) << 16;
  const uint32_t e = (b >> 10) & 0x1fu;
  const uint32_t m = b & 0x3ffu;
  const uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);
  const uint32_t inf_nan = sign | 0x7f800000u | (m << 13);
  const uint32_t subnormal = sign | FloatBits(static_cast<float>(static_cast<int32_t>(m)) *
                                              5.9604644775390625e-8f);
  const uint32_t is_special = MaskIf(e == 0x1fu), is_sub = MaskIf(e == 0);
  return BitsToFloat((inf_nan & is_special) | (subnormal & is_sub) |
                     (normal & ~is_special & ~is_sub));
}

ZS_HOST_DEVICE inline Float16 Float16FromFloatSelect(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  const uint32_t nan = sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
  const uint32_t inf = sign | 0x7c00u;
  // Normal range: round the 13 dropped bits to nearest-even, rebias 127 -> 15.
  const uint32_t normal = sign | ((ax + 0xfffu + ((ax >> 13) & 1u) - (112u << 23)) >> 13);
  // Subnormal range: round(|f| / 2^-24) = m >> (126 - e) for e in [102, 112];
  // the shift is clamped so that other values compute harmless garbage.
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (e < 102u ? 102u : (e > 112u ? 112u : e));
  const uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t round_up = (MaskIf(rem > half) | (MaskIf(rem == half) & (0u - (r & 1u)))) & 1u;
  const uint32_t subnormal = sign | (r + round_up);
  const uint32_t is_nan = MaskIf(ax > 0x7f800000u);
  const uint32_t is_inf = MaskIf(ax >= 0x477ff000u) & ~is_nan;
  const uint32_t is_normal = MaskIf(ax >= 0x38800000u) & ~is_inf & ~is_nan;
  const uint32_t is_zero = MaskIf(ax <= 0x33000000u);
  const uint32_t is_sub = ~is_nan & ~is_inf & ~is_normal & ~is_zero;
  const uint32_t bits = (nan & is_nan) | (inf & is_inf) | (normal & is_normal) |
                        (sign & is_zero) | (subnormal & is_sub);
  return Float16::FromBits(static_cast<uint16_t>(bits));
}

template <>
struct ReduceTraits<BFloat16> {
  using Acc = float;
  ZS_HOST_DEVICE static float Load(BFloat16 v) { return BFloat16BitsToFloat(v.bits); }
  ZS_HOST_DEVICE static BFloat16 Store(float v) { return BFloat16FromFloatSelect(v); }
};

template <>
struct ReduceTraits<Float16> {
  using Acc = float;
  ZS_HOST_DEVICE static float Load(Float16 v) { return Float16ToFloatSelect(v); }
  ZS_HOST_DEVICE static Float16 Store(float v) { return Float16FromFloatSelect(v); }
};

template <ReduceOp kOp, typename Acc>
ZS_HOST_DEVICE inline Acc ReduceCombine(Acc a, Acc b) {
  if constexpr (kOp == ReduceOp::kMax) {
    if constexpr (std::is_floating_point_v<Acc>) {
      return (a != a || a > b) ? a : b;  // NaN in either propagates
    } else {
      return a > b ? a : b;
    }
  } else if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;  // wrap instead of signed-overflow UB
    return static_cast<Acc>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

// Applied once to the combination of `n` inputs.
template <ReduceOp kOp, typename Acc>
ZS_HOST_DEVICE inline Acc ReduceFinish(Acc acc, int n) {
  if constexpr (kOp == ReduceOp::kAvg) {
    return acc / static_cast<Acc>(n);
  } else {
    return acc;
  }
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_REDUCTION_H_
