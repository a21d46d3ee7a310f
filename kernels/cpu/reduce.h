// CPU implementations behind kernels/reduce.h. `x` is contiguous and viewed as
// [outer, r, inner], reducing r; out is contiguous [outer, inner].
#ifndef ZEROSHARD_KERNELS_CPU_REDUCE_H_
#define ZEROSHARD_KERNELS_CPU_REDUCE_H_

#include <cstdint>

#include "zeroshard/kernels/reduce.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

void ReduceAxis(ReduceKind kind, const Tensor& x, int64_t outer, int64_t r, int64_t inner,
                const Tensor& out);
void ArgMaxAxis(const Tensor& x, int64_t outer, int64_t r, int64_t inner, const Tensor& out);
// Whole-buffer sums of a contiguous tensor; `square` sums x^2.
double SumAll(const Tensor& x, bool square);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_REDUCE_H_
