// CPU implementations behind kernels/cross_entropy.h. Arguments are validated
// by the op entry: logits and dlogits float [..., V] with contiguous rows;
// targets, losses, lse and dloss are `rows` contiguous values, every target in
// [0, V) or equal to ignore_index.
#ifndef ZEROSHARD_KERNELS_CPU_CROSS_ENTROPY_H_
#define ZEROSHARD_KERNELS_CPU_CROSS_ENTROPY_H_

#include <cstdint>

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

// Writes each row's loss (0 for ignored rows) and log-sum-exp (every row).
void CrossEntropyForward(const Tensor& logits, const int64_t* targets, int64_t ignore_index,
                         float* losses, float* lse);

// dlogits = (softmax - onehot) * dloss per row; ignored rows get zeros.
void CrossEntropyBackward(const Tensor& logits, const int64_t* targets, int64_t ignore_index,
                          const float* lse, const float* dloss, const Tensor& dlogits);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_CROSS_ENTROPY_H_
