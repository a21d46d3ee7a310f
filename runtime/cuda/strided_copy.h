// Device-side tensor copies of any layout (runtime/cuda/strided_copy.cu): what
// Tensor::CopyFrom uses when both sides live on one GPU and either is strided,
// broadcast (a source stride 0) or of another float dtype. Plain C++; the
// dimension collapsing is tested on the CPU (tests/runtime/strided_copy_test.cc).
//
//   StridedCopyArgs a = StridedCopyArgs::Of(dst_shape, dst_strides, src_strides, ...);
//   CollapseDims(a);                                   // fewer, longer dims
//   int err = LaunchStridedCopy(a, /*stream=*/nullptr);   // cudaError_t as int
//
// Element (i0, ..., in) of dst <- element (i0, ..., in) of src, converted:
// same dtype (any, bit for bit), or float to float (f32/bf16/f16, rounding as
// the CPU's conversions: runtime/half.h). Strides in elements; dst must not
// overlap src. One thread per element (grid-stride), on `stream` (null: the
// legacy default stream, which orders it with the other op launches).
#ifndef ZEROSHARD_RUNTIME_CUDA_STRIDED_COPY_H_
#define ZEROSHARD_RUNTIME_CUDA_STRIDED_COPY_H_

#include <cstdint>

namespace zeroshard::cuda {

inline constexpr int kStridedCopyMaxDims = 8;

struct StridedCopyArgs {
  int ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kStridedCopyMaxDims] = {};
  int64_t dst_strides[kStridedCopyMaxDims] = {};
  int64_t src_strides[kStridedCopyMaxDims] = {};
  int dst_dtype = 0;  // static_cast<int>(DType)
  int src_dtype = 0;
  void* dst = nullptr;
  const void* src = nullptr;
};

// True for the dtype pairs the kernel converts: equal, or both float.
inline bool StridedCopySupported(int dst_dtype, int src_dtype) {
  const auto is_float = [](int d) { return d >= 0 && d <= 2; };  // kF32, kBF16, kF16
  return dst_dtype == src_dtype || (is_float(dst_dtype) && is_float(src_dtype));
}

// Drops size-1 dims and merges neighbours that are contiguous with each other
// in both dst and src (d and d + 1 with stride[d] == stride[d + 1] * size[d + 1]);
// a copy of contiguous tensors becomes one dim. numel is unchanged.
inline void CollapseDims(StridedCopyArgs& a) {
  int n = 0;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.sizes[d] == 1) continue;
    if (n > 0 && a.dst_strides[n - 1] == a.dst_strides[d] * a.sizes[d] &&
        a.src_strides[n - 1] == a.src_strides[d] * a.sizes[d]) {
      a.sizes[n - 1] *= a.sizes[d];
      a.dst_strides[n - 1] = a.dst_strides[d];
      a.src_strides[n - 1] = a.src_strides[d];
      continue;
    }
    a.sizes[n] = a.sizes[d];
    a.dst_strides[n] = a.dst_strides[d];
    a.src_strides[n] = a.src_strides[d];
    ++n;
  }
  if (n == 0) {  // a single element
    a.sizes[0] = 1;
    a.dst_strides[0] = a.src_strides[0] = 1;
    n = 1;
  }
  a.ndim = n;
}

// cudaErrorInvalidValue for more than kStridedCopyMaxDims dims or an
// unsupported dtype pair; 0 for an empty copy.
int LaunchStridedCopy(const StridedCopyArgs& args, void* stream);

// Every element of the dst side of `args` (sizes, dst_strides, dst_dtype, dst;
// the src fields are ignored) set to the `itemsize` bytes of `bits` (the
// value already converted to the dtype on the host): Tensor::Fill on a GPU,
// with nothing copied from the host.
int LaunchStridedFill(const StridedCopyArgs& args, uint64_t bits, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_RUNTIME_CUDA_STRIDED_COPY_H_
