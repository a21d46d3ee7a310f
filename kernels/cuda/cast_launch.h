// Host launcher of the CUDA cast kernel (kernels/cuda/cast.cu), callable from
// plain C++: y[i] = x[i] converted between f32, bf16 and f16 (round to
// nearest-even, the rules of runtime/half.h, bit for bit the CPU's), over n
// contiguous elements, enqueued on `stream` (a cudaStream_t; null = the legacy
// default stream). Returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_CAST_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_CAST_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// dtype codes are static_cast<int>(DType); float dtypes only.
int LaunchCast(int in_dtype, int out_dtype, const void* x, void* y, int64_t n, void* stream);

// y[i] = value rounded to `dtype` (a float dtype), for n contiguous elements.
int LaunchFill(int dtype, void* y, int64_t n, float value, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CAST_LAUNCH_H_
