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
#include <cstring>
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

// Adds a pack of kW elements to the running max and sum of exp(x - max) of
// one thread's elements of a row (the online softmax of softmax and
// cross-entropy): the pack's max first, one rescale when it raises the
// running max, then kW exps that do not depend on each other. (Element by
// element, each exp waited behind a branch on the max the element before
// left: the first H100 record measured cross-entropy's forward at 665 GB/s,
// 22% of the copy rate, latency-bound.) An element equal to -Inf adds 0, also
// while the max is still -Inf; one equal to the max adds exactly 1 (a +Inf
// logit: exp(+Inf - +Inf) is taken as 1, not NaN); NaN makes the sum NaN.
// Only the order of the fp32 sum differs from one element at a time.
template <int kW>
__device__ __forceinline__ void AccumulateMaxSum(MaxSum& s, const float (&v)[kW]) {
  float m = v[0];
#pragma unroll
  for (int k = 1; k < kW; ++k) m = MaxF(m, v[k]);
  if (m > s.max) {
    s.sum *= RescaleFactor(s.max, m);
    s.max = m;
  }
  float add = 0.0f;
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    add += v[k] == -kInfF ? 0.0f : (v[k] == s.max ? 1.0f : ExpF(v[k] - s.max));
  }
  s.sum += add;
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

// ------------------------------------------------------------ 16-byte vectors
// The row and elementwise kernels move contiguous data 16 bytes per access
// (4 f32 or 8 bf16/f16: one 128-bit load or store) when every operand allows
// it: base pointers 16-byte aligned and row strides a whole number of 16-byte
// vectors (VectorRows, checked by the launcher). Otherwise they take their
// scalar path (Pack<T, 1>). Only loads, stores and the thread mapping change;
// the math stays per element in float.
//
//   const Pack<T, 8> p = LoadPack<8>(x + i);   // two 16-byte loads for f32, one for bf16
//   Pack<TOut, 8> q;  q.v[k] = FromFloat<TOut>(f(ToFloat(p.v[k])));
//   StorePack<8>(out + i, q);
//
// On the device the bytes travel through uint4; under the simulator (the host
// compiler, which may assume strict aliasing) through memcpy, and a misaligned
// address fails the launch as it faults on the device (zs_cuda_sim::CheckAligned).
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kN = static_cast<int>(16 / sizeof(T));
  T v[kN];
};

template <typename T>
__device__ __forceinline__ Vec16<T> LoadVec16(const T* p) {
  Vec16<T> r;
#if defined(ZEROSHARD_CUDA_SIM)
  ::zs_cuda_sim::CheckAligned(p, 16);
  memcpy(&r, p, 16);
#else
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  memcpy(&r, &u, 16);
#endif
  return r;
}

template <typename T>
__device__ __forceinline__ void StoreVec16(T* p, const Vec16<T>& v) {
#if defined(ZEROSHARD_CUDA_SIM)
  ::zs_cuda_sim::CheckAligned(p, 16);
  memcpy(p, &v, 16);
#else
  uint4 u;
  memcpy(&u, &v, 16);
  *reinterpret_cast<uint4*>(p) = u;
#endif
}

// kN consecutive elements: one scalar access for kN = 1, else kN * sizeof(T) / 16
// Vec16 accesses (p 16-byte aligned).
template <typename T, int kN>
struct Pack {
  T v[kN];
};

template <int kN, typename T>
__device__ __forceinline__ Pack<T, kN> LoadPack(const T* p) {
  Pack<T, kN> r;
  if constexpr (kN == 1) {
    r.v[0] = *p;
  } else {
    constexpr int kV = Vec16<T>::kN;
    static_assert(kN % kV == 0, "a pack is whole 16-byte vectors");
#pragma unroll
    for (int j = 0; j < kN; j += kV) {
      const Vec16<T> c = LoadVec16(p + j);
#pragma unroll
      for (int k = 0; k < kV; ++k) r.v[j + k] = c.v[k];
    }
  }
  return r;
}

template <int kN, typename T>
__device__ __forceinline__ void StorePack(T* p, const Pack<T, kN>& r) {
  if constexpr (kN == 1) {
    *p = r.v[0];
  } else {
    constexpr int kV = Vec16<T>::kN;
    static_assert(kN % kV == 0, "a pack is whole 16-byte vectors");
#pragma unroll
    for (int j = 0; j < kN; j += kV) {
      Vec16<T> c;
#pragma unroll
      for (int k = 0; k < kV; ++k) c.v[k] = r.v[j + k];
      StoreVec16(p + j, c);
    }
  }
}

// Elements per pack so that each of Ts is moved in whole 16-byte vectors: 4 when
// all are f32, 8 when any is 16-bit.
template <typename... Ts>
constexpr int VecElems() {
  int n = 1;
  ((n = n > static_cast<int>(16 / sizeof(Ts)) ? n : static_cast<int>(16 / sizeof(Ts))), ...);
  return n;
}

// One row of `cols` elements walked by the threads of a block: packs of kN
// elements at (j * blockDim.x + threadIdx.x) * kN while whole packs remain, then
// the rest one element per thread. fn(i, width) gets the first element's index
// and std::integral_constant<int, kN or 1>, for LoadPack<width>; kN = 1 is the
// scalar path. Every walk with the same kN gives a thread the same elements, so
// a kernel may write in place what it read.
//
//   ForEachPack<kN>(cols, [&](int64_t i, auto width) {
//     constexpr int kW = decltype(width)::value;
//     const Pack<T, kW> p = LoadPack<kW>(row + i);
//     ...
//   });
template <int kN, typename Fn>
__device__ __forceinline__ void ForEachPack(int64_t cols, Fn&& fn) {
  const int64_t whole = cols / kN * kN;
  const int64_t step = static_cast<int64_t>(blockDim.x) * kN;
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * kN; i < whole; i += step) {
    fn(i, std::integral_constant<int, kN>{});
  }
  if constexpr (kN > 1) {
    for (int64_t i = whole + threadIdx.x; i < cols; i += blockDim.x) {
      fn(i, std::integral_constant<int, 1>{});
    }
  }
}

// ------------------------------------------------------------ [C] parameters
// A contiguous 1-D float operand of any float dtype (a normalisation's weight
// or bias, as the model holds it: a bf16 parameter gathered for mixed
// precision), read in its own dtype and widened to f32 where the kernel uses
// it, so no cast kernel and no f32 copy precede the launch. The widening is
// exact: the results are bitwise those of the operand cast to f32 first. A
// null pointer reads as `absent` (no weight: 1, no bias: 0).
//
//   const F32Param w{weight, w_dtype, 1.0f};                 // host; dtype checked by IsFloatCode
//   const Pack<float, kN> wp = ParamPack<kN>(w, i);          // device: w[i .. i + kN - 1]
//   const float wi = ParamAt(w, i);
struct F32Param {
  const void* p;
  int dtype;
  float absent;
};

inline bool IsFloatCode(int code) { return code == kF32 || code == kBF16 || code == kF16; }

__device__ __forceinline__ float ParamAt(const F32Param& a, int64_t i) {
  if (a.p == nullptr) return a.absent;
  switch (a.dtype) {
    case kBF16: return ToFloat(static_cast<const BFloat16*>(a.p)[i]);
    case kF16: return ToFloat(static_cast<const Float16*>(a.p)[i]);
    default: return static_cast<const float*>(a.p)[i];
  }
}

// kN consecutive elements at p widened to float: whole 16-byte vectors when p
// is 16-byte aligned and kN elements fill them, one element at a time otherwise
// (a parameter view at any element offset is fine).
template <int kN, typename T>
__device__ __forceinline__ Pack<float, kN> WidenPack(const T* p) {
  Pack<float, kN> r;
  if constexpr (kN > 1 && (kN * sizeof(T)) % 16 == 0) {
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
      const Pack<T, kN> q = LoadPack<kN>(p);
#pragma unroll
      for (int k = 0; k < kN; ++k) r.v[k] = ToFloat(q.v[k]);
      return r;
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) r.v[k] = ToFloat(p[k]);
  return r;
}

// Elements i .. i + kN - 1 of `a` as floats (`absent` each when a.p is null).
template <int kN>
__device__ __forceinline__ Pack<float, kN> ParamPack(const F32Param& a, int64_t i) {
  if (a.p == nullptr) {
    Pack<float, kN> r;
#pragma unroll
    for (int k = 0; k < kN; ++k) r.v[k] = a.absent;
    return r;
  }
  switch (a.dtype) {
    case kBF16: return WidenPack<kN>(static_cast<const BFloat16*>(a.p) + i);
    case kF16: return WidenPack<kN>(static_cast<const Float16*>(a.p) + i);
    default: return WidenPack<kN>(static_cast<const float*>(a.p) + i);
  }
}

// Host: whether rows at base + r * stride (elements of `elem_bytes`) can be
// moved in 16-byte vectors: the base 16-byte aligned, the stride a whole
// number of vectors. A null base (an absent operand) allows it.
inline bool VectorRows(const void* base, int64_t stride, int64_t elem_bytes) {
  return base == nullptr ||
         (reinterpret_cast<uintptr_t>(base) % 16 == 0 && (stride * elem_bytes) % 16 == 0);
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

// Opts a kernel into more than the default 48 KiB of dynamic shared memory
// when a launch needs it; the cudaError_t as int.
template <typename Kernel>
int AllowDynamicSharedBytes(Kernel kernel, int64_t bytes) {
  if (bytes <= 48 * 1024) return 0;
  return static_cast<int>(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

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
