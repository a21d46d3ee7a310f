// CPU implementations behind kernels/layernorm.h. Arguments are validated by
// the op entries: x, dy, out, dx are float [..., C] with contiguous rows (x and
// dy of one dtype); weight and bias are C contiguous floats (the entry passes
// ones and zeros for undefined ones); mean and rstd are contiguous f32 [rows]
// (nullptr in the forward: not saved); undefined dx, dweight, dbias are skipped.
#ifndef ZEROSHARD_KERNELS_CPU_LAYERNORM_H_
#define ZEROSHARD_KERNELS_CPU_LAYERNORM_H_

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

void LayerNormForward(const Tensor& x, const float* weight, const float* bias, float eps,
                      const Tensor& out, float* mean, float* rstd);

// dweight and dbias are 1-D [C] of any float dtype and stride, written
// (accumulate = false) or added to (accumulate = true).
void LayerNormBackward(const Tensor& dy, const Tensor& x, const float* mean, const float* rstd,
                       const float* weight, const Tensor& dx, const Tensor& dweight,
                       const Tensor& dbias, bool accumulate);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_LAYERNORM_H_
