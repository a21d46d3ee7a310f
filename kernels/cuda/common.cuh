// Device helpers shared by the CUDA kernels of kernels/cuda/ (and optim/cuda/):
// dtype codes and loads/stores through float, warp and block reductions with
// shuffles, the float-dtype dispatch of launchers. Included only by .cu files;
// no Abseil, no runtime headers beyond the ZS_HOST_DEVICE ones.
//
//   template <typename T>
//   __global__ void Kernel(const T* x, float* out, int64_t n) {
//     __shared__ float scratch[32];
//     float v = 0;
//     for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v += ToFloat(x[i]);
//     v = BlockSum(v, scratch);      // every thread gets the block's sum
//   }
//   return DispatchFloat(dtype, [&]<typename T>() { Kernel<T><<<...>>>(...); return Launched(); });
//
// Reductions combine in a fixed tree (shuffle xor, then warp 0 over the warp
// results), so a given launch shape gives the same bits every run.
#ifndef ZEROSHARD_KERNELS_CUDA_COMMON_CUH_
#define ZEROSHARD_KERNELS_CUDA_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "zeroshard/kernels/math/softmax_ops.h"
#include "zeroshard/runtime/cuda/launch.cuh"
#include "zeroshard/runtime/half.h"

namespace zeroshard::cuda {

// runtime/dtype.h's DType values (kept out of .cu files: that header uses Abseil).
enum DTypeCode : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3, kI64 = 4, kI8 = 5 };

constexpr int kWarp = 32;

// Host and device: a launcher that converts a scalar argument on the host (LaunchFill)
// must get the real conversion. A __device__-only function called from a host
// template is not an error for nvcc: it silently compiles the call into exit(1)
// (cuda_library fails the build on any exit call in a host object; tools/cuda/cuda.bzl).
template <typename T>
__host__ __device__ __forceinline__ float ToFloat(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

template <typename T>
__host__ __device__ __forceinline__ T FromFloat(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return T(v);
  }
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = MaxF(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ MaxSum WarpMaxSum(MaxSum s) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, s.max, o), __shfl_xor_sync(0xffffffffu, s.sum, o)};
    s = MergeMaxSum(s, other);
  }
  return s;
}

// Adds v to the running max and sum of exp(x - max) of one thread's elements
// of a row (the online softmax of softmax and cross-entropy). An element equal
// to -Inf while the max is still -Inf adds exp(-Inf) = 0.
__device__ __forceinline__ void AccumulateMaxSum(MaxSum& s, float v) {
  if (v > s.max) {
    s.sum = s.sum * RescaleFactor(s.max, v) + 1.0f;
    s.max = v;
  } else if (!(v == -kInfF && s.max == -kInfF)) {
    s.sum += ExpF(v - s.max);
  }
}

// Block-wide reductions for blockDim.x a multiple of 32 (<= 1024); every thread
// returns the result. `scratch` holds 32 values; the call ends with a barrier
// so the scratch can be reused at once.
template <typename V, typename WarpFn>
__device__ __forceinline__ V BlockReduce(V v, V* scratch, V identity, WarpFn warp_reduce) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_reduce(v);
  __syncthreads();  // earlier readers of scratch are done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  v = warp_reduce(v);
  return v;
}

__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  return BlockReduce(v, scratch, 0.0f, [](float x) { return WarpSum(x); });
}

__device__ __forceinline__ double BlockSumD(double v, double* scratch) {
  return BlockReduce(v, scratch, 0.0, [](double x) { return WarpSumD(x); });
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  return BlockReduce(v, scratch, -kInfF, [](float x) { return WarpMax(x); });
}

__device__ __forceinline__ MaxSum BlockMaxSum(MaxSum v, MaxSum* scratch) {
  return BlockReduce(v, scratch, MaxSum{-kInfF, 0.0f}, [](MaxSum x) { return WarpMaxSum(x); });
}

// The cudaError_t of the last launch, as the launchers return it.
inline int Launched() { return static_cast<int>(cudaGetLastError()); }

inline int InvalidValue() { return static_cast<int>(cudaErrorInvalidValue); }

// Blocks of `threads` for a grid-stride loop over n items, capped.
inline int GridFor(int64_t n, int threads, int64_t max_blocks = 65535 * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<int>(b);
}

// Threads per block for one row of `cols` elements (the row kernels: one
// block per row): a warp for short rows, doubled while each thread would still
// get more than `per_thread` elements, up to `max_threads`.
inline int RowThreads(int64_t cols, int max_threads, int per_thread) {
  int t = kWarp;
  while (t < max_threads && static_cast<int64_t>(t) * per_thread < cols) t *= 2;
  return t;
}

inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Calls fn.template operator()<T>() with T the storage type of a float dtype code.
template <typename Fn>
int DispatchFloat(int code, Fn&& fn) {
  switch (code) {
    case kF32: return fn.template operator()<float>();
    case kBF16: return fn.template operator()<BFloat16>();
    case kF16: return fn.template operator()<Float16>();
    default: return InvalidValue();
  }
}

template <typename Fn>
int DispatchFloatPair(int in, int out, Fn&& fn) {
  return DispatchFloat(in, [&]<typename TIn>() {
    return DispatchFloat(out, [&]<typename TOut>() { return fn.template operator()<TIn, TOut>(); });
  });
}

template <typename Fn>
int DispatchIndex(int code, Fn&& fn) {
  switch (code) {
    case kI32: return fn.template operator()<int32_t>();
    case kI64: return fn.template operator()<int64_t>();
    default: return InvalidValue();
  }
}

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_COMMON_CUH_
