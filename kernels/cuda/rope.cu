// The rotary embedding on CUDA: one thread per (head vector, pair i) in a
// grid-stride loop, any strides, loads widened to f32, the per-element math of
// kernels/math/rope_ops.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/rope_launch.h"
#include "zeroshard/kernels/math/rope_ops.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T, typename TOut>
__global__ void RopeKernel(const T* x, TOut* out, const float* cos, const float* sin, RopeGeometry g,
                           float sign, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const int64_t i = k % g.half;
    const int64_t v = k / g.half;
    const int64_t h = v % g.heads, t = (v / g.heads) % g.seq, b = v / (g.heads * g.seq);
    const int64_t xo = b * g.x_strides[0] + t * g.x_strides[1] + h * g.x_strides[2];
    const int64_t oo = b * g.out_strides[0] + t * g.out_strides[1] + h * g.out_strides[2];
    const float lo = ToFloat(x[xo + i * g.x_strides[3]]);
    const float hi = ToFloat(x[xo + (i + g.half) * g.x_strides[3]]);
    const float c = cos[t * g.half + i];
    const float s = sign * sin[t * g.half + i];
    out[oo + i * g.out_strides[3]] = FromFloat<TOut>(RopeRotateLo(lo, hi, c, s));
    out[oo + (i + g.half) * g.out_strides[3]] = FromFloat<TOut>(RopeRotateHi(lo, hi, c, s));
  }
}

}  // namespace

int LaunchRopeApply(int x_dtype, int out_dtype, const void* x, void* out, const float* cos,
                    const float* sin, const RopeGeometry& g, bool inverse, void* stream) {
  const int64_t n = g.batch * g.seq * g.heads * g.half;
  if (n == 0) return 0;
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    Launch(RopeKernel<T, TOut>, GridFor(n, kThreads), kThreads, 0, AsStream(stream), static_cast<const T*>(x),
           static_cast<TOut*>(out), cos, sin, g, inverse ? -1.0f : 1.0f, n);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
