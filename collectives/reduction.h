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
#include "runtime/dtype.h"
#include "runtime/half.h"
#include "runtime/host_device.h"

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
