// Per-element math of BatchNorm (torch.nn.BatchNorm2d), shared by the CPU
// kernel (kernels/cpu/batchnorm.cc) and the CUDA path. Per channel c over its
// M = N H W values (training) the statistics are LayerNorm's
// (kernels/math/layernorm_ops.h): mean, biased var, rstd = LayerNormRstd(var, eps),
//   y  = LayerNormElement(x, mean, rstd, w, b)
//   dx = LayerNormGradInput(dy w, xhat, rstd, w sum(dy) / M, w sum(dy xhat) / M)   (training)
//   dx = dy w rstd                                                                  (eval: constants)
//   dw = sum(dy xhat),  db = sum(dy)
// and the running statistics move towards the batch's with `momentum`
// (the unbiased variance, as PyTorch):
//   running_mean = (1 - momentum) running_mean + momentum mean
//   running_var  = (1 - momentum) running_var  + momentum var M / (M - 1)
#ifndef ZEROSHARD_KERNELS_MATH_BATCHNORM_OPS_H_
#define ZEROSHARD_KERNELS_MATH_BATCHNORM_OPS_H_

#include <cstdint>

#include "zeroshard/kernels/math/layernorm_ops.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline float BatchNormRunningUpdate(float running, float batch, float momentum) {
  return (1.0f - momentum) * running + momentum * batch;
}

// The unbiased variance of `count` (>= 2) values from their biased one.
ZS_HOST_DEVICE inline float UnbiasedVariance(float biased, int64_t count) {
  return static_cast<float>(static_cast<double>(biased) * count / (count - 1));
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_BATCHNORM_OPS_H_
