// Per-element math of RMSNorm (Hugging Face LlamaRMSNorm), shared by the CPU
// kernel (kernels/cpu/rmsnorm.cc) and the CUDA one (kernels/cuda/rmsnorm.cu).
//
//   forward, per row of C values:  ms   = sum(x^2) / C
//                                  rstd = RmsNormRstd(ms, eps)        1 / sqrt(ms + eps)
//     y    = RmsNormElement(x, rstd, w)                              (x rstd) w
//   backward, per row, with xhat = x rstd and g = dy w:
//     mean_g_xhat = sum(g xhat) / C
//     dx   = RmsNormGradInput(g, xhat, rstd, mean_g_xhat)            rstd (g - xhat mean_g_xhat)
//     dw  += dy xhat                                                 (summed over rows)
//
// All in fp32, each result rounded once into its dtype. (transformers rounds
// x rstd into the input dtype before the weight multiplies it; we do not: one
// rounding, as the other row kernels.)
#ifndef ZEROSHARD_KERNELS_MATH_RMSNORM_OPS_H_
#define ZEROSHARD_KERNELS_MATH_RMSNORM_OPS_H_

#include <cmath>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline float RmsNormRstd(float mean_square, float eps) {
  return 1.0f / sqrtf(mean_square + eps);
}

ZS_HOST_DEVICE inline float RmsNormElement(float x, float rstd, float w) { return x * rstd * w; }

// d/dx of RMSNorm: rstd (g - xhat mean(g xhat)), g = dy w (mean over the row).
ZS_HOST_DEVICE inline float RmsNormGradInput(float g, float xhat, float rstd, float mean_g_xhat) {
  return rstd * (g - xhat * mean_g_xhat);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_RMSNORM_OPS_H_
