// Our CUDA BatchNorm kernels; see batchnorm_launch.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "zeroshard/kernels/cuda/batchnorm_launch.h"
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/math/batchnorm_ops.h"
#include "zeroshard/kernels/math/layernorm_ops.h"
#include "zeroshard/runtime/cuda/launch.cuh"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

int Blocks(int64_t n) { return GridFor(n, kThreads, kMaxBlocks); }

// Threads of a block that sums a channel's `m` values: a warp per 32 x 32
// values, 32 to 256 (a multiple of 32, as BlockSumD needs).
int ReduceThreads(int64_t m) { return RowThreads(m, kThreads, kWarp); }

int ChannelGrid(int64_t c) { return GridFor(c, 1, kMaxBlocks); }

// Value i (of N L) of channel c.
__device__ __forceinline__ int64_t At(const BatchNormDims& s, int64_t c, int64_t i) {
  return ((i / s.l) * s.c + c) * s.l + i % s.l;
}

// Every thread of the block takes the same channel (uniform loop bounds), as BlockSumD needs.
__global__ void TrainStats(BatchNormDims s, const float* x, float eps, float momentum, float* mean, float* rstd,
                           float* running_mean, float* running_var) {
  __shared__ double scratch[kWarp];
  const int64_t m = s.n * s.l;
  const double inv = 1.0 / static_cast<double>(m);
  for (int64_t c = blockIdx.x; c < s.c; c += gridDim.x) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) acc += x[At(s, c, i)];
    const float mu = static_cast<float>(inv * BlockSumD(acc, scratch));
    acc = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const float d = x[At(s, c, i)] - mu;
      acc += d * d;
    }
    const float var = static_cast<float>(inv * BlockSumD(acc, scratch));
    if (threadIdx.x == 0) {
      mean[c] = mu;
      rstd[c] = LayerNormRstd(var, eps);
      if (running_mean != nullptr) running_mean[c] = BatchNormRunningUpdate(running_mean[c], mu, momentum);
      if (running_var != nullptr) {
        running_var[c] = BatchNormRunningUpdate(running_var[c], UnbiasedVariance(var, m), momentum);
      }
    }
  }
}

__global__ void EvalStats(int64_t channels, const float* running_mean, const float* running_var, float eps,
                          float* mean, float* rstd) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < channels; c += int64_t{gridDim.x} * blockDim.x) {
    mean[c] = running_mean[c];
    rstd[c] = LayerNormRstd(running_var[c], eps);
  }
}

__global__ void Apply(BatchNormDims s, const float* x, const float* mean, const float* rstd, const float* w,
                      const float* b, float* y) {
  const int64_t total = s.n * s.c * s.l;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = (e / s.l) % s.c;
    y[e] = LayerNormElement(x[e], mean[c], rstd[c], w != nullptr ? w[c] : 1.0f, b != nullptr ? b[c] : 0.0f);
  }
}

__global__ void Backward(BatchNormDims s, const float* dy, const float* x, const float* mean, const float* rstd,
                         const float* w, bool training, float* dx, float* dw, float* db, bool accumulate) {
  __shared__ double scratch[kWarp];
  const int64_t m = s.n * s.l;
  const float inv_count = 1.0f / static_cast<float>(m);
  for (int64_t c = blockIdx.x; c < s.c; c += gridDim.x) {
    const float mu = mean[c], r = rstd[c], wc = w != nullptr ? w[c] : 1.0f;
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const int64_t k = At(s, c, i);
      const float g = dy[k];
      a += g;
      b += g * ((x[k] - mu) * r);
    }
    const float sum_dy = static_cast<float>(BlockSumD(a, scratch));
    const float sum_dy_xhat = static_cast<float>(BlockSumD(b, scratch));
    if (threadIdx.x == 0) {
      if (dw != nullptr) dw[c] = accumulate ? dw[c] + sum_dy_xhat : sum_dy_xhat;
      if (db != nullptr) db[c] = accumulate ? db[c] + sum_dy : sum_dy;
    }
    if (dx == nullptr) continue;
    const float mean_g = wc * sum_dy * inv_count, mean_gx = wc * sum_dy_xhat * inv_count;
    const float k_eval = wc * r;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const int64_t k = At(s, c, i);
      dx[k] = training ? LayerNormGradInput(dy[k] * wc, (x[k] - mu) * r, r, mean_g, mean_gx) : dy[k] * k_eval;
    }
  }
}

}  // namespace

int LaunchBatchNormTrainStats(const BatchNormDims& s, const float* x, float eps, float momentum, float* mean,
                              float* rstd, float* running_mean, float* running_var, void* stream) {
  Launch(TrainStats, ChannelGrid(s.c), ReduceThreads(s.n * s.l), 0, static_cast<cudaStream_t>(stream), s, x, eps,
         momentum, mean, rstd, running_mean, running_var);
  return Launched();
}

int LaunchBatchNormEvalStats(int64_t c, const float* running_mean, const float* running_var, float eps,
                             float* mean, float* rstd, void* stream) {
  Launch(EvalStats, Blocks(c), kThreads, 0, static_cast<cudaStream_t>(stream), c, running_mean, running_var, eps,
         mean, rstd);
  return Launched();
}

int LaunchBatchNormApply(const BatchNormDims& s, const float* x, const float* mean, const float* rstd,
                         const float* weight, const float* bias, float* y, void* stream) {
  Launch(Apply, Blocks(s.n * s.c * s.l), kThreads, 0, static_cast<cudaStream_t>(stream), s, x, mean, rstd, weight,
         bias, y);
  return Launched();
}

int LaunchBatchNormBackward(const BatchNormDims& s, const float* dy, const float* x, const float* mean,
                            const float* rstd, const float* weight, bool training, float* dx, float* dweight,
                            float* dbias, bool accumulate, void* stream) {
  Launch(Backward, ChannelGrid(s.c), ReduceThreads(s.n * s.l), 0, static_cast<cudaStream_t>(stream), s, dy, x,
         mean, rstd, weight, training, dx, dweight, dbias, accumulate);
  return Launched();
}

}  // namespace zeroshard::cuda
