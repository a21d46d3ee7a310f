// Our CUDA convolution kernels; see conv2d_launch.h. Grid-stride loops over
// outputs (forward, backward data) or over blocks of one reduction each
// (backward weight and bias).
#include <cuda_runtime.h>

#include <cstdint>

#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/conv2d_launch.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/runtime/cuda/launch.cuh"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

int Blocks(int64_t n) { return GridFor(n, kThreads, kMaxBlocks); }

// Threads of a block that sums `m` values: a warp per 32 x 32 values, 32 to
// 256 (a multiple of 32, as BlockSum needs), so small sums use small blocks.
int ReduceThreads(int64_t m) { return RowThreads(m, kThreads, kWarp); }

int GridOf(int64_t reductions) { return GridFor(reductions, 1, kMaxBlocks); }

__global__ void ConvForward(Conv2dGeometry g, const float* x, const float* w, const float* bias, float* y) {
  const int64_t total = g.n * g.o * g.out_plane();
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = e % g.ow, oh = (e / g.ow) % g.oh, o = (e / g.out_plane()) % g.o;
    const int64_t n = e / (g.out_plane() * g.o), group = o / g.og();
    const float* wp = w + o * g.taps();
    const float* xp = x + (n * g.c + group * g.cg()) * g.in_plane();
    float acc = 0.0f;
    for (int64_t c = 0; c < g.cg(); ++c) {
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        const int64_t ih = ConvInputIndex(oh, ki, g.sh, g.ph, g.dh);
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const int64_t iw = ConvInputIndex(ow, kj, g.sw, g.pw, g.dw);
          if (iw < 0 || iw >= g.w) continue;
          acc += xp[(c * g.h + ih) * g.w + iw] * wp[(c * g.kh + ki) * g.kw + kj];
        }
      }
    }
    y[e] = bias != nullptr ? acc + bias[o] : acc;
  }
}

__global__ void ConvBackwardData(Conv2dGeometry g, const float* dy, const float* w, float* dx) {
  const int64_t total = g.n * g.c * g.in_plane();
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % g.w, ih = (e / g.w) % g.h, ci = (e / g.in_plane()) % g.c;
    const int64_t n = e / (g.in_plane() * g.c), group = ci / g.cg(), cl = ci % g.cg();
    float acc = 0.0f;
    for (int64_t o = group * g.og(); o < (group + 1) * g.og(); ++o) {
      const float* dyp = dy + (n * g.o + o) * g.out_plane();
      const float* wp = w + (o * g.cg() + cl) * g.kh * g.kw;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        const int64_t oh = ConvTapOutput(ih, ki, g.sh, g.ph, g.dh, g.oh);
        if (oh < 0) continue;
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const int64_t ow = ConvTapOutput(iw, kj, g.sw, g.pw, g.dw, g.ow);
          if (ow < 0) continue;
          acc += dyp[oh * g.ow + ow] * wp[ki * g.kw + kj];
        }
      }
    }
    dx[e] = acc;
  }
}

// Block b sums weight element e over the N OH OW output positions; every
// thread of the block takes the same e (the loop bound is uniform), as BlockSum needs.
__global__ void ConvBackwardWeight(Conv2dGeometry g, const float* dy, const float* x, float* dw, bool accumulate) {
  __shared__ float scratch[kWarp];
  const int64_t total = g.o * g.taps(), m = g.n * g.out_plane();
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    const int64_t kj = e % g.kw, ki = (e / g.kw) % g.kh, cl = (e / (g.kw * g.kh)) % g.cg(), o = e / g.taps();
    const int64_t ci = (o / g.og()) * g.cg() + cl;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const int64_t n = i / g.out_plane(), p = i % g.out_plane(), oh = p / g.ow, ow = p % g.ow;
      const int64_t ih = ConvInputIndex(oh, ki, g.sh, g.ph, g.dh), iw = ConvInputIndex(ow, kj, g.sw, g.pw, g.dw);
      if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
      acc += dy[(n * g.o + o) * g.out_plane() + p] * x[((n * g.c + ci) * g.h + ih) * g.w + iw];
    }
    const float sum = BlockSum(acc, scratch);
    if (threadIdx.x == 0) dw[e] = accumulate ? dw[e] + sum : sum;
  }
}

__global__ void ConvBackwardBias(Conv2dGeometry g, const float* dy, float* db, bool accumulate) {
  __shared__ float scratch[kWarp];
  const int64_t m = g.n * g.out_plane();
  for (int64_t o = blockIdx.x; o < g.o; o += gridDim.x) {
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      acc += dy[((i / g.out_plane()) * g.o + o) * g.out_plane() + i % g.out_plane()];
    }
    const float sum = BlockSum(acc, scratch);
    if (threadIdx.x == 0) db[o] = accumulate ? db[o] + sum : sum;
  }
}

}  // namespace

int LaunchConv2dForward(const Conv2dGeometry& g, const float* x, const float* weight, const float* bias,
                        float* y, void* stream) {
  Launch(ConvForward, Blocks(g.n * g.o * g.out_plane()), kThreads, 0, static_cast<cudaStream_t>(stream), g, x,
         weight, bias, y);
  return Launched();
}

int LaunchConv2dBackwardData(const Conv2dGeometry& g, const float* dy, const float* weight, float* dx,
                             void* stream) {
  Launch(ConvBackwardData, Blocks(g.n * g.c * g.in_plane()), kThreads, 0, static_cast<cudaStream_t>(stream), g,
         dy, weight, dx);
  return Launched();
}

int LaunchConv2dBackwardWeight(const Conv2dGeometry& g, const float* dy, const float* x, float* dweight,
                               bool accumulate, void* stream) {
  Launch(ConvBackwardWeight, GridOf(g.o * g.taps()), ReduceThreads(g.n * g.out_plane()), 0,
         static_cast<cudaStream_t>(stream), g, dy, x, dweight, accumulate);
  return Launched();
}

int LaunchConv2dBackwardBias(const Conv2dGeometry& g, const float* dy, float* dbias, bool accumulate,
                             void* stream) {
  Launch(ConvBackwardBias, GridOf(g.o), ReduceThreads(g.n * g.out_plane()), 0, static_cast<cudaStream_t>(stream),
         g, dy, dbias, accumulate);
  return Launched();
}

}  // namespace zeroshard::cuda
