// Host launchers of the CUDA softmax kernels (kernels/cuda/softmax.cu),
// callable from plain C++. Row views: `rows` rows of `cols` contiguous
// elements, row r of a tensor at base + r * stride (elements). One block per
// row; the per-element math is kernels/math/softmax_ops.h, the CPU's.
// Enqueued on `stream` (a cudaStream_t; null = the legacy default stream);
// returns a cudaError_t as int (0 = success). dtype codes are
// static_cast<int>(DType), float dtypes only. An output may be exactly its
// input (in place).
#ifndef ZEROSHARD_KERNELS_CUDA_SOFTMAX_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_SOFTMAX_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// out = softmax(x) (log = false) or log_softmax(x) (log = true), per row.
int LaunchSoftmax(bool log, int x_dtype, int out_dtype, const void* x, int64_t x_stride, void* out,
                  int64_t out_stride, int64_t rows, int64_t cols, void* stream);

// dx = y (dy - sum(dy y)) (softmax) or dy - exp(y) sum(dy) (log-softmax), per
// row; y and dy share `in_dtype`.
int LaunchSoftmaxBackward(bool log, int in_dtype, int dx_dtype, const void* y, int64_t y_stride,
                          const void* dy, int64_t dy_stride, void* dx, int64_t dx_stride,
                          int64_t rows, int64_t cols, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_SOFTMAX_LAUNCH_H_
