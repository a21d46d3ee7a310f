// CPU implementation behind kernels/batchnorm.h. Every pointer is a contiguous
// f32 buffer: x, y, dy, dx [N, C, L] (L the product of the dimensions after C);
// mean, rstd, var, w, b, dw, db [C]. The op entry passes ones / zeros for an
// undefined weight / bias; dx, dw, db may be null (not computed).
#ifndef ZEROSHARD_KERNELS_CPU_BATCHNORM_H_
#define ZEROSHARD_KERNELS_CPU_BATCHNORM_H_

#include <cstdint>

namespace zeroshard::cpu {

struct BatchNormShape {
  int64_t n, c, l;
  int64_t count() const { return n * l; }  // values per channel
};

// Per channel: the mean and biased variance of its N L values (two passes).
void BatchNormStats(const BatchNormShape& s, const float* x, float* mean, float* var);

// y = (x - mean) rstd w + b per channel. y may be x.
void BatchNormApply(const BatchNormShape& s, const float* x, const float* mean, const float* rstd,
                    const float* w, const float* b, float* y);

// `training`: through the batch statistics; else with mean and rstd constant.
void BatchNormBackward(const BatchNormShape& s, const float* dy, const float* x, const float* mean,
                       const float* rstd, const float* w, bool training, float* dx, float* dw,
                       float* db, bool accumulate);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_BATCHNORM_H_
