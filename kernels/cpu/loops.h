// Map loops shared by the CPU elementwise kernels: apply a per-element
// function over one or two strided inputs into a strided output, in the compute
// type, vectorised per instruction set on contiguous runs.
//
//   MapUnary<float, BFloat16>(x, out, [](float v) { return GeluTanh(v); });
//   MapBinary<float, float>(a, b, out, [](float u, float v) { return u * v; });
//
// Preconditions (checked by the op entries): inputs are already broadcast
// (expanded) to out's shape; TIn is the storage type of every input, TOut of out.
#ifndef ZEROSHARD_KERNELS_CPU_LOOPS_H_
#define ZEROSHARD_KERNELS_CPU_LOOPS_H_

#include <cstdint>
#include <type_traits>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/strided_loop.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

// float for the floating storage types, the type itself for integers.
template <typename T>
using ComputeType = std::conditional_t<std::is_integral_v<T>, T, float>;

template <typename TIn, typename TOut, typename Fn>
void MapUnary(const Tensor& x, const Tensor& out, const Fn& fn) {
  using C = ComputeType<TIn>;
  const TIn* const xp = static_cast<const TIn*>(x.raw_data());
  TOut* const op = static_cast<TOut*>(out.raw_data());
  ForEachStridedRun<2>(out.shape(), {out.strides(), x.strides()},
                       [&](int64_t n, const int64_t* off, const int64_t* step) {
                         TOut* o = op + off[0];
                         const TIn* a = xp + off[1];
                         if (step[0] == 1 && step[1] == 1) {
                           RunWithIsa([&] {
                             for (int64_t i = 0; i < n; ++i) {
                               o[i] = ConvertElement<TOut>(fn(ConvertElement<C>(a[i])));
                             }
                           });
                         } else {
                           const int64_t so = step[0], sa = step[1];
                           for (int64_t i = 0; i < n; ++i) {
                             o[i * so] = ConvertElement<TOut>(fn(ConvertElement<C>(a[i * sa])));
                           }
                         }
                       });
}

template <typename TIn, typename TOut, typename Fn>
void MapBinary(const Tensor& a, const Tensor& b, const Tensor& out, const Fn& fn) {
  using C = ComputeType<TIn>;
  const TIn* const ap = static_cast<const TIn*>(a.raw_data());
  const TIn* const bp = static_cast<const TIn*>(b.raw_data());
  TOut* const op = static_cast<TOut*>(out.raw_data());
  ForEachStridedRun<3>(
      out.shape(), {out.strides(), a.strides(), b.strides()},
      [&](int64_t n, const int64_t* off, const int64_t* step) {
        TOut* o = op + off[0];
        const TIn* x = ap + off[1];
        const TIn* y = bp + off[2];
        if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
          RunWithIsa([&] {
            for (int64_t i = 0; i < n; ++i) {
              o[i] = ConvertElement<TOut>(fn(ConvertElement<C>(x[i]), ConvertElement<C>(y[i])));
            }
          });
        } else if (step[0] == 1 && step[1] == 1 && step[2] == 0) {  // b broadcast along the run
          const C yv = ConvertElement<C>(y[0]);
          RunWithIsa([&] {
            for (int64_t i = 0; i < n; ++i) {
              o[i] = ConvertElement<TOut>(fn(ConvertElement<C>(x[i]), yv));
            }
          });
        } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {  // a broadcast along the run
          const C xv = ConvertElement<C>(x[0]);
          RunWithIsa([&] {
            for (int64_t i = 0; i < n; ++i) {
              o[i] = ConvertElement<TOut>(fn(xv, ConvertElement<C>(y[i])));
            }
          });
        } else {
          const int64_t so = step[0], sa = step[1], sb = step[2];
          for (int64_t i = 0; i < n; ++i) {
            o[i * so] =
                ConvertElement<TOut>(fn(ConvertElement<C>(x[i * sa]), ConvertElement<C>(y[i * sb])));
          }
        }
      });
}

// Deterministic reductions keep kLanes independent partial results, combined in
// lane order at the end: the order is fixed by the code, not by the vector
// width, so every instruction set and thread count gives the same bits (the
// build disables implicit FMA contraction for the same reason).
//
//   float s = LaneReduce<float>(n, 0.0f, [&](int64_t i) { return x[i]; },
//                               [](float a, float b) { return a + b; });
//
// Call it inside RunWithIsa so the lane loop is vectorised.
inline constexpr int kLanes = 16;

template <typename Acc, typename Load, typename Combine>
Acc LaneReduce(int64_t n, Acc init, const Load& load, const Combine& combine) {
  Acc acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = init;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = combine(acc[j], load(i + j));
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] = combine(acc[j], load(i));
  Acc result = acc[0];
  for (int j = 1; j < kLanes; ++j) result = combine(result, acc[j]);
  return result;
}

// Calls fn.template operator()<TIn, TOut>() for the supported (input, output)
// storage pairs: equal types, or f32 in and a 16-bit float out.
template <typename Fn>
void DispatchInOut(DType in, DType out, Fn&& fn) {
  if (in == out) {
    DispatchDType(in, [&]<typename T>() { fn.template operator()<T, T>(); });
    return;
  }
  ZS_CHECK(in == DType::kF32 && (out == DType::kBF16 || out == DType::kF16),
           "unsupported elementwise dtypes ", DTypeName(in), " -> ", DTypeName(out));
  if (out == DType::kBF16) {
    fn.template operator()<float, BFloat16>();
  } else {
    fn.template operator()<float, Float16>();
  }
}

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_LOOPS_H_
