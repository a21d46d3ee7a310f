// The strided / broadcast / converting device copy of strided_copy.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "zeroshard/runtime/cuda/launch.cuh"
#include "zeroshard/runtime/cuda/strided_copy.h"
#include "zeroshard/runtime/half.h"

namespace zeroshard::cuda {

namespace {

// Storage types: floats convert through float; a same-dtype copy moves bits.
template <typename D, typename S>
__device__ __forceinline__ D Convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else {
    return D(static_cast<float>(v));
  }
}

template <typename D, typename S>
__global__ void StridedCopyKernel(StridedCopyArgs a) {
  D* dst = static_cast<D*>(a.dst);
  const S* src = static_cast<const S*>(a.src);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel;
       i += step) {
    int64_t rem = i, doff = 0, soff = 0;
    for (int d = a.ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % a.sizes[d];
      rem /= a.sizes[d];
      doff += idx * a.dst_strides[d];
      soff += idx * a.src_strides[d];
    }
    dst[doff] = Convert<D>(src[soff]);
  }
}

template <typename T>
__global__ void StridedFillKernel(StridedCopyArgs a, T value) {
  T* dst = static_cast<T*>(a.dst);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel;
       i += step) {
    int64_t rem = i, doff = 0;
    for (int d = a.ndim - 1; d >= 0; --d) {
      doff += (rem % a.sizes[d]) * a.dst_strides[d];
      rem /= a.sizes[d];
    }
    dst[doff] = value;
  }
}

template <typename T>
int LaunchFillTyped(const StridedCopyArgs& a, uint64_t bits, cudaStream_t s) {
  constexpr int kThreads = 256;
  int64_t blocks = (a.numel + kThreads - 1) / kThreads;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  Launch(StridedFillKernel<T>, static_cast<unsigned>(blocks), kThreads, 0, s, a, static_cast<T>(bits));
  return static_cast<int>(cudaGetLastError());
}

template <typename D, typename S>
int LaunchTyped(const StridedCopyArgs& a, cudaStream_t s) {
  constexpr int kThreads = 256;
  int64_t blocks = (a.numel + kThreads - 1) / kThreads;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  Launch(StridedCopyKernel<D, S>, static_cast<unsigned>(blocks), kThreads, 0, s, a);
  return static_cast<int>(cudaGetLastError());
}

// Bit types of a same-dtype copy, by element size.
int LaunchBits(int itemsize, const StridedCopyArgs& a, cudaStream_t s) {
  switch (itemsize) {
    case 1: return LaunchTyped<uint8_t, uint8_t>(a, s);
    case 2: return LaunchTyped<uint16_t, uint16_t>(a, s);
    case 4: return LaunchTyped<uint32_t, uint32_t>(a, s);
    case 8: return LaunchTyped<uint64_t, uint64_t>(a, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

int ItemSize(int dtype) {
  switch (dtype) {
    case 0: return 4;  // f32
    case 1: return 2;  // bf16
    case 2: return 2;  // f16
    case 3: return 4;  // i32
    case 4: return 8;  // i64
    case 5: return 1;  // i8
    default: return 0;
  }
}

template <typename Fn>
int DispatchFloat(int dtype, Fn&& fn) {
  switch (dtype) {
    case 0: return fn.template operator()<float>();
    case 1: return fn.template operator()<BFloat16>();
    case 2: return fn.template operator()<Float16>();
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int LaunchStridedFill(const StridedCopyArgs& args, uint64_t bits, void* stream) {
  if (args.numel == 0) return 0;
  if (args.ndim < 0 || args.ndim > kStridedCopyMaxDims) return static_cast<int>(cudaErrorInvalidValue);
  StridedCopyArgs a = args;
  for (int d = 0; d < a.ndim; ++d) a.src_strides[d] = 0;
  CollapseDims(a);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (ItemSize(a.dst_dtype)) {
    case 1: return LaunchFillTyped<uint8_t>(a, bits, s);
    case 2: return LaunchFillTyped<uint16_t>(a, bits, s);
    case 4: return LaunchFillTyped<uint32_t>(a, bits, s);
    case 8: return LaunchFillTyped<uint64_t>(a, bits, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

int LaunchStridedCopy(const StridedCopyArgs& args, void* stream) {
  if (args.numel == 0) return 0;
  if (args.ndim < 0 || args.ndim > kStridedCopyMaxDims ||
      !StridedCopySupported(args.dst_dtype, args.src_dtype)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  StridedCopyArgs a = args;
  CollapseDims(a);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (a.dst_dtype == a.src_dtype) return LaunchBits(ItemSize(a.dst_dtype), a, s);
  return DispatchFloat(a.dst_dtype, [&]<typename D>() {
    return DispatchFloat(a.src_dtype, [&]<typename S>() { return LaunchTyped<D, S>(a, s); });
  });
}

}  // namespace zeroshard::cuda
