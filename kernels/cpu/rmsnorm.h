// CPU implementations behind kernels/rmsnorm.h. Arguments are validated by the
// op entries: x, dy, out, dx are float [..., C] with contiguous rows (x and dy
// of one dtype); weight is C contiguous floats (the entry passes ones for an
// undefined one); rstd is contiguous f32 [rows] (nullptr in the forward: not
// saved); undefined dx or dweight are skipped.
#ifndef ZEROSHARD_KERNELS_CPU_RMSNORM_H_
#define ZEROSHARD_KERNELS_CPU_RMSNORM_H_

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

void RmsNormForward(const Tensor& x, const float* weight, float eps, const Tensor& out, float* rstd);

// dweight is 1-D [C] of any float dtype and stride, written (accumulate =
// false) or added to (accumulate = true).
void RmsNormBackward(const Tensor& dy, const Tensor& x, const float* rstd, const float* weight,
                     const Tensor& dx, const Tensor& dweight, bool accumulate);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_RMSNORM_H_
