// CPU implementations behind kernels/softmax.h. Arguments are validated by the
// op entries: float tensors of one shape [..., C], each with contiguous rows
// (kernels/rows.h); for the backward, y and dy share one dtype.
#ifndef ZEROSHARD_KERNELS_CPU_SOFTMAX_H_
#define ZEROSHARD_KERNELS_CPU_SOFTMAX_H_

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

// Softmax (log = false) or log-softmax (log = true) of each row of x into out.
void Softmax(const Tensor& x, const Tensor& out, bool log);
// The matching backward from the forward output y and its gradient dy.
void SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_SOFTMAX_H_
