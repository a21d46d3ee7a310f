// Host launchers of the CUDA fused cross-entropy kernels
// (kernels/cuda/cross_entropy.cu), callable from plain C++. Logits rows as in
// softmax_launch.h; targets are `rows` contiguous i32/i64 (code
// static_cast<int>(DType)), already checked to be in [0, cols) or
// ignore_index; losses, lse are `rows` contiguous f32. One block per row, the
// per-element math of kernels/math/softmax_ops.h. Enqueued on `stream`;
// returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_CROSS_ENTROPY_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_CROSS_ENTROPY_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// lse[r] = logsumexp(logits[r]); losses[r] = lse[r] - logits[r, t] (0 when ignored).
int LaunchCrossEntropyForward(int x_dtype, const void* logits, int64_t x_stride, int t_dtype,
                              const void* targets, int64_t ignore_index, float* losses, float* lse,
                              int64_t rows, int64_t cols, void* stream);

// dlogits[r] = (softmax(logits[r]) - onehot(t)) * dloss[r * dloss_stride]
// (dloss_stride 0: one value for every row); 0 for ignored rows. dlogits may
// be exactly the logits (in place).
int LaunchCrossEntropyBackward(int x_dtype, int out_dtype, const void* logits, int64_t x_stride,
                               int t_dtype, const void* targets, int64_t ignore_index,
                               const float* lse, const float* dloss, int64_t dloss_stride,
                               void* dlogits, int64_t out_stride, int64_t rows, int64_t cols,
                               void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CROSS_ENTROPY_LAUNCH_H_
