// CUDA elementwise kernels: grid-stride loops over contiguous buffers, per-element
// math from kernels/math/elementwise_ops.h (shared with the CPU kernels). When
// every buffer's base is 16-byte aligned, each thread moves packs of kN
// elements (4 f32 or 8 bf16/f16 per 16-byte access; common.cuh's Pack), the
// last n % kN elements one by one; otherwise element by element. The residual
// add of a transformer block is LaunchBinary(kAdd) on two same-shape
// activations: the op entry (kernels/elementwise.cc) sends broadcasts and
// strided views elsewhere, so these kernels see contiguous operands only.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/elementwise_launch.h"
#include "zeroshard/kernels/math/elementwise_ops.h"
#include "zeroshard/runtime/cuda/launch.cuh"
#include "zeroshard/runtime/half.h"

namespace zeroshard::cuda {

namespace {

// Packs of kN over [0, n) in a grid-stride loop, then the rest one element per
// thread: fn(i, width) as ForEachPack's (a thread writes only what it read, so
// y may be an input).
template <int kN, typename Fn>
__device__ __forceinline__ void ForEachFlatPack(int64_t n, Fn&& fn) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t whole = n / kN * kN;
  for (int64_t i = first * kN; i < whole; i += threads * kN) {
    fn(i, std::integral_constant<int, kN>{});
  }
  if constexpr (kN > 1) {
    for (int64_t i = whole + first; i < n; i += threads) fn(i, std::integral_constant<int, 1>{});
  }
}

template <typename TIn, typename TOut, int kN, typename Fn>
__global__ void MapUnaryKernel(const TIn* __restrict__ x, TOut* __restrict__ y, int64_t n, Fn fn) {
  ForEachFlatPack<kN>(n, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<TIn, kW> p = LoadPack<kW>(x + i);
    Pack<TOut, kW> q;
#pragma unroll
    for (int k = 0; k < kW; ++k) q.v[k] = FromFloat<TOut>(fn(ToFloat(p.v[k])));
    StorePack<kW>(y + i, q);
  });
}

// a and b may have different storage types (LaunchAddWidening: f32 and bf16).
template <typename TA, typename TB, typename TOut, int kN, typename Fn>
__global__ void MapBinaryKernel(const TA* __restrict__ a, const TB* __restrict__ b,
                                TOut* __restrict__ y, int64_t n, Fn fn) {
  ForEachFlatPack<kN>(n, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<TA, kW> p = LoadPack<kW>(a + i);
    const Pack<TB, kW> q = LoadPack<kW>(b + i);
    Pack<TOut, kW> r;
#pragma unroll
    for (int k = 0; k < kW; ++k) r.v[k] = FromFloat<TOut>(fn(ToFloat(p.v[k]), ToFloat(q.v[k])));
    StorePack<kW>(y + i, r);
  });
}

// Whether every buffer allows 16-byte packs (contiguous: the base decides).
bool Aligned(const void* a, const void* b, const void* c) {
  return VectorRows(a, 0, 1) && VectorRows(b, 0, 1) && VectorRows(c, 0, 1);
}

// Blocks of 256 threads for n elements, kN per thread (capped; grid-stride beyond).
int Blocks(int64_t n, int per_thread) { return GridFor((n + per_thread - 1) / per_thread, 256); }

// The (input, output) dtype pairs the elementwise ops take.
template <typename Fn>
int DispatchMapPair(int in, int out, Fn&& fn) {
  if (in == kF32 && out == kF32) return fn.template operator()<float, float>();
  if (in == kBF16 && out == kBF16) return fn.template operator()<BFloat16, BFloat16>();
  if (in == kF16 && out == kF16) return fn.template operator()<Float16, Float16>();
  if (in == kF32 && out == kBF16) return fn.template operator()<float, BFloat16>();
  if (in == kF32 && out == kF16) return fn.template operator()<float, Float16>();
  return static_cast<int>(cudaErrorInvalidValue);
}

template <UnaryOp kOp>
struct UnaryFn {
  __device__ float operator()(float v) const { return ApplyUnary<kOp, float>(v); }
};

template <BinaryOp kOp>
struct BinaryFn {
  __device__ float operator()(float u, float v) const { return ApplyBinary<kOp, float>(u, v); }
};

struct AffineFn {
  float alpha, beta;
  __device__ float operator()(float v) const { return alpha * v + beta; }
};

// The CPU's PowScalar (kernels/cpu/elementwise_unary.cc): exact forms for the
// common exponents, powf otherwise (CUDA's and glibc's powf may differ in the
// last ulp; the GPU test allows it).
struct PowFn {
  float p;
  __device__ float operator()(float v) const {
    if (p == 2.0f) return v * v;
    if (p == 1.0f) return v;
    if (p == 0.5f) return sqrtf(v);
    if (p == -1.0f) return 1.0f / v;
    return powf(v, p);
  }
};

template <typename Fn>
int RunUnary(int in, int out, const void* x, void* y, int64_t n, void* stream, Fn fn) {
  return DispatchMapPair(in, out, [&]<typename TIn, typename TOut>() {
    constexpr int kV = VecElems<TIn, TOut>();
    auto launch = [&](auto kernel, int per_thread) {
      Launch(kernel, Blocks(n, per_thread), 256, 0, AsStream(stream), static_cast<const TIn*>(x),
             static_cast<TOut*>(y), n, fn);
    };
    if (Aligned(x, y, nullptr)) {
      launch(MapUnaryKernel<TIn, TOut, kV, Fn>, kV);
    } else {
      launch(MapUnaryKernel<TIn, TOut, 1, Fn>, 1);
    }
    return Launched();
  });
}

}  // namespace

int LaunchUnary(int op, int in_dtype, int out_dtype, const void* x, void* y, int64_t n,
                void* stream) {
  if (n == 0) return 0;
  switch (static_cast<UnaryOp>(op)) {
#define ZS_UNARY_CASE(name) \
  case UnaryOp::name: return RunUnary(in_dtype, out_dtype, x, y, n, stream, UnaryFn<UnaryOp::name>{});
    ZS_UNARY_CASE(kNeg)
    ZS_UNARY_CASE(kExp)
    ZS_UNARY_CASE(kLog)
    ZS_UNARY_CASE(kTanh)
    ZS_UNARY_CASE(kSqrt)
    ZS_UNARY_CASE(kRsqrt)
    ZS_UNARY_CASE(kRelu)
    ZS_UNARY_CASE(kGelu)
    ZS_UNARY_CASE(kSigmoid)
    ZS_UNARY_CASE(kAbs)
    ZS_UNARY_CASE(kSquare)
    ZS_UNARY_CASE(kSilu)
#undef ZS_UNARY_CASE
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int LaunchBinary(int op, int in_dtype, int out_dtype, const void* a, const void* b, void* y,
                 int64_t n, void* stream) {
  if (n == 0) return 0;
  auto run = [&](auto fn) {
    return DispatchMapPair(in_dtype, out_dtype, [&]<typename TIn, typename TOut>() {
      using Fn = decltype(fn);
      constexpr int kV = VecElems<TIn, TOut>();
      auto launch = [&](auto kernel, int per_thread) {
        Launch(kernel, Blocks(n, per_thread), 256, 0, AsStream(stream),
               static_cast<const TIn*>(a), static_cast<const TIn*>(b), static_cast<TOut*>(y), n,
               fn);
      };
      if (Aligned(a, b, y)) {
        launch(MapBinaryKernel<TIn, TIn, TOut, kV, Fn>, kV);
      } else {
        launch(MapBinaryKernel<TIn, TIn, TOut, 1, Fn>, 1);
      }
      return Launched();
    });
  };
  switch (static_cast<BinaryOp>(op)) {
    case BinaryOp::kAdd: return run(BinaryFn<BinaryOp::kAdd>{});
    case BinaryOp::kSub: return run(BinaryFn<BinaryOp::kSub>{});
    case BinaryOp::kMul: return run(BinaryFn<BinaryOp::kMul>{});
    case BinaryOp::kDiv: return run(BinaryFn<BinaryOp::kDiv>{});
    case BinaryOp::kPow: return run(BinaryFn<BinaryOp::kPow>{});
    case BinaryOp::kMax: return run(BinaryFn<BinaryOp::kMax>{});
    case BinaryOp::kMin: return run(BinaryFn<BinaryOp::kMin>{});
    case BinaryOp::kGeluBackward: return run(BinaryFn<BinaryOp::kGeluBackward>{});
    case BinaryOp::kReluBackward: return run(BinaryFn<BinaryOp::kReluBackward>{});
    case BinaryOp::kSiluBackward: return run(BinaryFn<BinaryOp::kSiluBackward>{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int LaunchAddWidening(int b_dtype, const float* a, const void* b, float* y, int64_t n, void* stream) {
  if (n == 0) return 0;
  auto run = [&]<typename TB>() {
    using Fn = BinaryFn<BinaryOp::kAdd>;
    constexpr int kV = VecElems<float, TB>();
    auto launch = [&](auto kernel, int per_thread) {
      Launch(kernel, Blocks(n, per_thread), 256, 0, AsStream(stream), a, static_cast<const TB*>(b), y, n, Fn{});
    };
    if (Aligned(a, b, y)) {
      launch(MapBinaryKernel<float, TB, float, kV, Fn>, kV);
    } else {
      launch(MapBinaryKernel<float, TB, float, 1, Fn>, 1);
    }
    return Launched();
  };
  if (b_dtype == kBF16) return run.template operator()<BFloat16>();
  if (b_dtype == kF16) return run.template operator()<Float16>();
  return InvalidValue();
}

int LaunchAffine(int in_dtype, int out_dtype, const void* x, void* y, float alpha, float beta,
                 int64_t n, void* stream) {
  if (n == 0) return 0;
  return RunUnary(in_dtype, out_dtype, x, y, n, stream, AffineFn{alpha, beta});
}

int LaunchPowScalar(int in_dtype, int out_dtype, const void* x, void* y, float exponent, int64_t n,
                    void* stream) {
  if (n == 0) return 0;
  return RunUnary(in_dtype, out_dtype, x, y, n, stream, PowFn{exponent});
}

}  // namespace zeroshard::cuda
