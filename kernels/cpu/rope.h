// CPU implementation behind kernels/rope.h. Arguments are validated by the op
// entry: x and out float [B, T, H, D] of one shape, any strides (out may be x);
// cos and sin contiguous f32 with at least T rows of D/2 values.
#ifndef ZEROSHARD_KERNELS_CPU_ROPE_H_
#define ZEROSHARD_KERNELS_CPU_ROPE_H_

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

void RopeApply(const Tensor& x, const float* cos, const float* sin, const Tensor& out, bool inverse);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_ROPE_H_
