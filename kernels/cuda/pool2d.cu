// CUDA pooling kernels; see pool2d_launch.h. One thread per output (forward)
// or per input element (backward), grid-stride loops.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "zeroshard/kernels/cuda/pool2d_launch.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/runtime/cuda/launch.cuh"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

__global__ void MaxForward(PoolShape s, MaxPoolWindow win, const float* x, float* y, int64_t* indices) {
  const int64_t n = s.planes * s.oh * s.ow;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = o % s.ow, oh = (o / s.ow) % s.oh, pl = o / (s.ow * s.oh);
    const float* xp = x + pl * s.h * s.w;
    float best = -INFINITY;
    int64_t best_index = -1;
    for (int64_t i = 0; i < win.kh; ++i) {
      const int64_t ih = ConvInputIndex(oh, i, win.sh, win.ph, win.dh);
      if (ih < 0 || ih >= s.h) continue;
      for (int64_t j = 0; j < win.kw; ++j) {
        const int64_t iw = ConvInputIndex(ow, j, win.sw, win.pw, win.dw);
        if (iw < 0 || iw >= s.w) continue;
        const float v = xp[ih * s.w + iw];
        if (best_index < 0 || v > best || (isnan(v) && !isnan(best))) {
          best = v;
          best_index = ih * s.w + iw;
        }
      }
    }
    y[o] = best;
    if (indices != nullptr) indices[o] = best_index;
  }
}

__global__ void MaxBackward(PoolShape s, MaxPoolWindow win, const float* dy, const int64_t* indices,
                            float* dx) {
  const int64_t n = s.planes * s.h * s.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % s.w, ih = (e / s.w) % s.h, pl = e / (s.w * s.h);
    const int64_t mine = ih * s.w + iw;
    float acc = 0.0f;
    for (int64_t i = 0; i < win.kh; ++i) {
      const int64_t oh = ConvTapOutput(ih, i, win.sh, win.ph, win.dh, s.oh);
      if (oh < 0) continue;
      for (int64_t j = 0; j < win.kw; ++j) {
        const int64_t ow = ConvTapOutput(iw, j, win.sw, win.pw, win.dw, s.ow);
        if (ow < 0) continue;
        const int64_t o = (pl * s.oh + oh) * s.ow + ow;
        if (indices[o] == mine) acc += dy[o];
      }
    }
    dx[e] = acc;
  }
}

__global__ void AvgForward(PoolShape s, AvgPoolTables t, const float* x, float* y) {
  const int64_t n = s.planes * s.oh * s.ow;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = o % s.ow, oh = (o / s.ow) % s.oh, pl = o / (s.ow * s.oh);
    const float* xp = x + pl * s.h * s.w;
    float sum = 0.0f;
    for (int64_t ih = t.row_start[oh]; ih < t.row_end[oh]; ++ih) {
      for (int64_t iw = t.col_start[ow]; iw < t.col_end[ow]; ++iw) sum += xp[ih * s.w + iw];
    }
    const int64_t div = t.row_div[oh] * t.col_div[ow];
    y[o] = div > 0 ? sum / static_cast<float>(div) : 0.0f;
  }
}

__global__ void AvgBackward(PoolShape s, AvgPoolTables t, const float* dy, float* dx) {
  const int64_t n = s.planes * s.h * s.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % s.w, ih = (e / s.w) % s.h, pl = e / (s.w * s.h);
    float acc = 0.0f;
    for (int64_t oh = t.row_out_begin[ih]; oh < t.row_out_end[ih]; ++oh) {
      for (int64_t ow = t.col_out_begin[iw]; ow < t.col_out_end[iw]; ++ow) {
        const int64_t div = t.row_div[oh] * t.col_div[ow];
        if (div > 0) acc += dy[(pl * s.oh + oh) * s.ow + ow] / static_cast<float>(div);
      }
    }
    dx[e] = acc;
  }
}

int Launched() { return static_cast<int>(cudaGetLastError()); }

}  // namespace

int LaunchMaxPool2dForward(const PoolShape& s, const MaxPoolWindow& win, const float* x, float* y,
                           int64_t* indices, void* stream) {
  Launch(MaxForward, Blocks(s.planes * s.oh * s.ow), kThreads, 0, static_cast<cudaStream_t>(stream),
         s, win, x, y, indices);
  return Launched();
}

int LaunchMaxPool2dBackward(const PoolShape& s, const MaxPoolWindow& win, const float* dy,
                            const int64_t* indices, float* dx, void* stream) {
  Launch(MaxBackward, Blocks(s.planes * s.h * s.w), kThreads, 0, static_cast<cudaStream_t>(stream),
         s, win, dy, indices, dx);
  return Launched();
}

int LaunchAvgPool2dForward(const PoolShape& s, const AvgPoolTables& t, const float* x, float* y,
                           void* stream) {
  Launch(AvgForward, Blocks(s.planes * s.oh * s.ow), kThreads, 0, static_cast<cudaStream_t>(stream),
         s, t, x, y);
  return Launched();
}

int LaunchAvgPool2dBackward(const PoolShape& s, const AvgPoolTables& t, const float* dy, float* dx,
                            void* stream) {
  Launch(AvgBackward, Blocks(s.planes * s.h * s.w), kThreads, 0, static_cast<cudaStream_t>(stream),
         s, t, dy, dx);
  return Launched();
}

}  // namespace zeroshard::cuda
