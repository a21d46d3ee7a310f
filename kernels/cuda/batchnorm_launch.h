// Host launchers of our CUDA BatchNorm kernels (kernels/cuda/batchnorm.cu),
// callable from plain C++: the path of the BatchNorm entries where cuDNN does
// not run (the CPU simulator of the device) or when forced
// (CudnnConvPath::kOwn, kernels/cuda/conv_graph_desc.h); cuDNN is the GPU's
// path otherwise. Contiguous f32: x, y, dy, dx [N, C, L] (L = H W); every
// per-channel tensor [C]. The per-element math is
// kernels/math/batchnorm_ops.h and layernorm_ops.h, the CPU kernel's.
//
// One block per channel for the statistics and the backward: each thread
// sums its strided share of the channel's N L values in double, the block
// adds them in a fixed tree (no atomics: the same bits every run). Weight and
// bias may be null (ones and zeros); so may the running statistics and, in
// the backward, dx, dweight and dbias.
// Enqueued on `stream`; returns a cudaError_t as int.
#ifndef ZEROSHARD_KERNELS_CUDA_BATCHNORM_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_BATCHNORM_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

struct BatchNormDims {
  int64_t n, c, l;
};

// Training: the batch's mean and rstd = LayerNormRstd(biased var, eps) per
// channel, and the running statistics moved towards the batch's (the
// unbiased variance; BatchNormRunningUpdate).
int LaunchBatchNormTrainStats(const BatchNormDims& s, const float* x, float eps, float momentum, float* mean,
                              float* rstd, float* running_mean, float* running_var, void* stream);
// Eval: mean = running_mean, rstd = LayerNormRstd(running_var, eps).
int LaunchBatchNormEvalStats(int64_t c, const float* running_mean, const float* running_var, float eps,
                             float* mean, float* rstd, void* stream);
// y = LayerNormElement(x, mean, rstd, w, b) per element (y may be x).
int LaunchBatchNormApply(const BatchNormDims& s, const float* x, const float* mean, const float* rstd,
                         const float* weight, const float* bias, float* y, void* stream);
// dweight = sum(dy xhat), dbias = sum(dy) (written, or added to with
// `accumulate`); dx by LayerNormGradInput (training) or dy w rstd (eval).
int LaunchBatchNormBackward(const BatchNormDims& s, const float* dy, const float* x, const float* mean,
                            const float* rstd, const float* weight, bool training, float* dx, float* dweight,
                            float* dbias, bool accumulate, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_BATCHNORM_LAUNCH_H_
