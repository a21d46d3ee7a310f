// Host launcher of the fused CUDA SGD step (optim/cuda/sgd.cu), callable from
// plain C++: one pass over n elements of a flat shard reads param, grad and
// (with momentum) momentum_buffer, and writes param, momentum_buffer and,
// when param_copy is not null, the updated param rounded to `copy_dtype` (the
// param_dtype copy of mixed precision) in the same pass. The per-element math
// is optim/sgd_math.h, the CPU kernel's (no FMA contraction: bitwise its
// results). Pointers are to element 0 of the segment (one parameter group's
// range); momentum_buffer null means no momentum (SgdUpdate). Enqueued on
// `stream`; returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_OPTIM_CUDA_SGD_LAUNCH_H_
#define ZEROSHARD_OPTIM_CUDA_SGD_LAUNCH_H_

#include <cstdint>

#include "zeroshard/optim/sgd_math.h"

namespace zeroshard::optim::cuda {

// grad_dtype and copy_dtype are float dtype codes (static_cast<int>(DType)).
int LaunchSgdStep(const SgdScalars& scalars, float* param, const void* grad, int grad_dtype,
                  float* momentum_buffer, void* param_copy, int copy_dtype, int64_t n, void* stream);

}  // namespace zeroshard::optim::cuda

#endif  // ZEROSHARD_OPTIM_CUDA_SGD_LAUNCH_H_
