// Element conversions on the GPU for the NCCL backend's fp32 accumulation of
// bf16/f16 reductions: widen the inputs to fp32 before NCCL reduces them,
// round the fp32 result once after (Note [Reduction numerics],
// collectives/reduction.h). The per-element code is runtime/half.h's
// ZS_HOST_DEVICE conversions, the very code the CPU tests exercise.
//
//   ZS_CUDA_RETURN_IF_ERROR(LaunchWiden(ConvertType::kBF16, bf16_in, f32_scratch, n, stream));
//   ... ncclAllReduce(f32_scratch, f32_scratch, n, ncclFloat32, ncclSum, comm, stream) ...
//   ZS_CUDA_RETURN_IF_ERROR(LaunchNarrow(ConvertType::kBF16, f32_scratch, bf16_out, n, stream));
//
// No CUDA types in this header: `stream` is a cudaStream_t, the result a
// cudaError_t.
#ifndef ZEROSHARD_COLLECTIVES_CUDA_CONVERT_KERNELS_H_
#define ZEROSHARD_COLLECTIVES_CUDA_CONVERT_KERNELS_H_

#include <cstdint>

namespace zeroshard::cuda {

enum class ConvertType : int { kBF16 = 0, kF16 = 1 };

// float out[i] = in[i] (exact).
int LaunchWiden(ConvertType type, const void* in, float* out, int64_t n, void* stream);
// out[i] = round-to-nearest-even(in[i]).
int LaunchNarrow(ConvertType type, const float* in, void* out, int64_t n, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_COLLECTIVES_CUDA_CONVERT_KERNELS_H_
