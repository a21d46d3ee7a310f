// Host launcher of the fused CUDA Adam/AdamW step (optim/cuda/adamw.cu),
// callable from plain C++: one pass over n elements of a flat shard reads
// param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq and,
// when param_copy is not null, the updated param rounded to `copy_dtype` (the
// param_dtype copy of mixed precision) in the same pass. The per-element math
// is optim/adamw_math.h, the CPU kernel's. Pointers are to element 0 of the
// segment (one parameter group's range). Enqueued on `stream`; returns a
// cudaError_t as int (0 = success).
#ifndef ZEROSHARD_OPTIM_CUDA_ADAMW_LAUNCH_H_
#define ZEROSHARD_OPTIM_CUDA_ADAMW_LAUNCH_H_

#include <cstdint>

#include "zeroshard/optim/adamw_math.h"

namespace zeroshard::optim::cuda {

// decoupled: AdamW (true) or Adam with L2 weight decay (false). grad_dtype and
// copy_dtype are float dtype codes (static_cast<int>(DType)).
int LaunchAdamStep(bool decoupled, const AdamScalars& scalars, float* param, const void* grad,
                   int grad_dtype, float* exp_avg, float* exp_avg_sq, void* param_copy,
                   int copy_dtype, int64_t n, void* stream);

}  // namespace zeroshard::optim::cuda

#endif  // ZEROSHARD_OPTIM_CUDA_ADAMW_LAUNCH_H_
