// DType: the element types a Tensor can hold, and the typed dispatch over them.
//
//   DType d = DType::kBF16;
//   DTypeSize(d);              // 2
//   DTypeName(d);              // "bf16"
//   ParseDType("bfloat16");    // DType::kBF16 (also "bf16")
//   DispatchDType(d, [&]<typename T>() { Fill(static_cast<T*>(p), n); });
//   ConvertBuffer(src, DType::kF32, dst, DType::kBF16, n);   // round to nearest-even
//
// Floating types: f32, bf16, f16 (the 16-bit ones are storage types; compute
// and accumulation are fp32). Integer types: i32, i64 (indices, token ids).
#ifndef ZEROSHARD_RUNTIME_DTYPE_H_
#define ZEROSHARD_RUNTIME_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include "absl/strings/string_view.h"
#include <type_traits>

#include "absl/status/statusor.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/runtime/half.h"

namespace zeroshard {

enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kI32 = 3,
  kI64 = 4,
  // Quantized communication (sharding/comm_hook.h: qwZ, qgZ) and raw bytes.
  kI8 = 5,
};

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32,
                                       DType::kI64, DType::kI8};
inline constexpr DType kFloatDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// Bytes per element.
constexpr size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kI8: return 1;
  }
  return 0;
}

constexpr bool IsFloatingPoint(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

// Short names: "f32", "bf16", "f16", "i32", "i64", "i8" (the names configs and flags use).
absl::string_view DTypeName(DType d);

// Accepts the short names and the long ones ("float32", "fp32", "float",
// "bfloat16", "float16", "fp16", "half", "int32", "int64").
absl::StatusOr<DType> ParseDType(absl::string_view name);

std::ostream& operator<<(std::ostream& os, DType d);

// The C++ storage type of each dtype.
template <typename T>
inline constexpr bool kIsDTypeStorage =
    std::is_same_v<T, float> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16> ||
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> || std::is_same_v<T, int8_t>;

template <typename T>
constexpr DType DTypeOf() {
  static_assert(kIsDTypeStorage<T>, "not a zeroshard storage type");
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, Float16>) return DType::kF16;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kI8;
}

// Calls `fn.template operator()<T>()` with T the storage type of `d`.
template <typename Fn>
decltype(auto) DispatchDType(DType d, Fn&& fn) {
  switch (d) {
    case DType::kF32: return fn.template operator()<float>();
    case DType::kBF16: return fn.template operator()<BFloat16>();
    case DType::kF16: return fn.template operator()<Float16>();
    case DType::kI32: return fn.template operator()<int32_t>();
    case DType::kI64: return fn.template operator()<int64_t>();
    case DType::kI8: return fn.template operator()<int8_t>();
  }
  ZS_CHECK(false, "invalid DType ", static_cast<int>(d));
  return fn.template operator()<float>();
}

// Like DispatchDType, for floating dtypes only (the caller has checked).
template <typename Fn>
decltype(auto) DispatchFloatDType(DType d, Fn&& fn) {
  switch (d) {
    case DType::kF32: return fn.template operator()<float>();
    case DType::kBF16: return fn.template operator()<BFloat16>();
    case DType::kF16: return fn.template operator()<Float16>();
    default: break;
  }
  ZS_CHECK(false, "expected a floating dtype, got ", DTypeName(d));
  return fn.template operator()<float>();
}

// Element conversion through the wider type: floats round to nearest-even into
// bf16/f16; float -> integer truncates toward zero (C++ semantics, NaN -> 0,
// out of range saturates); integer -> float rounds.
template <typename To, typename From>
ZS_HOST_DEVICE inline To ConvertElement(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, BFloat16> || std::is_same_v<From, Float16>) {
    return ConvertElement<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16> || std::is_same_v<To, Float16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (!(v == v)) return To(0);
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Converts `n` contiguous elements. `src` and `dst` must not overlap unless
// they are the same pointer with the same dtype (a no-op).
void ConvertBuffer(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_DTYPE_H_
