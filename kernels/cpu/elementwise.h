// CPU implementations behind kernels/elementwise.h. Arguments are validated by
// the op entries: inputs expanded to out's shape, dtypes one of the pairs
// DispatchInOut accepts, integer ops only where supported.
#ifndef ZEROSHARD_KERNELS_CPU_ELEMENTWISE_H_
#define ZEROSHARD_KERNELS_CPU_ELEMENTWISE_H_

#include "zeroshard/kernels/math/elementwise_ops.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

void Unary(UnaryOp op, const Tensor& x, const Tensor& out);
void Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void Affine(const Tensor& x, float alpha, float beta, const Tensor& out);
void PowScalar(const Tensor& x, float exponent, const Tensor& out);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_ELEMENTWISE_H_
