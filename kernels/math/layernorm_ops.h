// Per-element math of LayerNorm, shared by the CPU kernel
// (kernels/cpu/layernorm.cc) and a future CUDA twin.
//
//   forward, per row of C values:  mean = sum(x) / C
//                                  var  = sum((x - mean)^2) / C     (biased, as PyTorch)
//                                  rstd = LayerNormRstd(var, eps)
//     y    = LayerNormElement(x, mean, rstd, w, b)                 (x - mean) rstd w + b
//   backward, per row, with xhat = (x - mean) rstd and g = dy w:
//     mean_g      = sum(g) / C
//     mean_g_xhat = sum(g xhat) / C
//     dx   = LayerNormGradInput(g, xhat, rstd, mean_g, mean_g_xhat)
//     dw  += dy xhat,  db += dy                                    (summed over rows)
#ifndef ZEROSHARD_KERNELS_MATH_LAYERNORM_OPS_H_
#define ZEROSHARD_KERNELS_MATH_LAYERNORM_OPS_H_

#include <cmath>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline float LayerNormRstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }

ZS_HOST_DEVICE inline float LayerNormElement(float x, float mean, float rstd, float w, float b) {
  return (x - mean) * rstd * w + b;
}

// d/dx of LayerNorm: rstd (g - mean(g) - xhat mean(g xhat)), g = dy w.
ZS_HOST_DEVICE inline float LayerNormGradInput(float g, float xhat, float rstd, float mean_g,
                                               float mean_g_xhat) {
  return rstd * (g - mean_g - xhat * mean_g_xhat);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_LAYERNORM_OPS_H_
