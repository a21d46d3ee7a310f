#include "zeroshard/runtime/dtype.h"

#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::string_view DTypeName(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kI8: return "i8";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "i32" || n == "int32") return DType::kI32;
  if (n == "i64" || n == "int64") return DType::kI64;
  if (n == "i8" || n == "int8") return DType::kI8;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype \"", name, "\": expected one of f32, bf16, f16, i32, i64, i8"));
}

std::ostream& operator<<(std::ostream& os, DType d) { return os << DTypeName(d); }

namespace {

template <typename To, typename From>
void ConvertLoop(const From* __restrict src, To* __restrict dst, int64_t n) {
#pragma omp parallel for simd if (n >= (int64_t{1} << 16)) schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = ConvertElement<To>(src[i]);
}

}  // namespace

void ConvertBuffer(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (n <= 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memmove(dst, src, static_cast<size_t>(n) * DTypeSize(src_dtype));
    return;
  }
  DispatchDType(src_dtype, [&]<typename From>() {
    DispatchDType(dst_dtype, [&]<typename To>() {
      ConvertLoop(static_cast<const From*>(src), static_cast<To*>(dst), n);
    });
  });
}

}  // namespace zeroshard
