// Host launchers of the CUDA elementwise kernels, callable from plain C++ (no
// CUDA headers): each enqueues on `stream` (a cudaStream_t, or null for the
// legacy default stream) and returns a cudaError_t as int (0 = success).
//
// The per-element math is kernels/math/elementwise_ops.h, the same functions
// the CPU kernels run, so tests/kernels/elementwise_test.cc checks it on CPU.
// Contiguous, same-shape operands only; the op entry (kernels/elementwise.cc)
// handles broadcasting and strides before calling.
#ifndef ZEROSHARD_KERNELS_CUDA_ELEMENTWISE_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_ELEMENTWISE_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// dtype codes are static_cast<int>(DType); op codes static_cast<int>(UnaryOp / BinaryOp).
int LaunchUnary(int op, int in_dtype, int out_dtype, const void* x, void* y, int64_t n,
                void* stream);
int LaunchBinary(int op, int in_dtype, int out_dtype, const void* a, const void* b, void* y,
                 int64_t n, void* stream);
// y = a + b with a and y f32 and b bf16 or f16 (y may be a): a gradient
// accumulated into an f32 .grad in one pass, b widened in registers (the same
// bits as casting b to f32 first, which is exact, then adding).
int LaunchAddWidening(int b_dtype, const float* a, const void* b, float* y, int64_t n, void* stream);
// y = alpha * x + beta.
int LaunchAffine(int in_dtype, int out_dtype, const void* x, void* y, float alpha, float beta,
                 int64_t n, void* stream);
// y = x^exponent, with the CPU's special cases (2, 1, 0.5, -1 exact forms).
int LaunchPowScalar(int in_dtype, int out_dtype, const void* x, void* y, float exponent,
                    int64_t n, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_ELEMENTWISE_LAUNCH_H_
