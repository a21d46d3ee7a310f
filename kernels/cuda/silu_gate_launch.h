// Host launchers of the CUDA SwiGLU-gate kernels (kernels/cuda/silu_gate.cu),
// callable from plain C++: n contiguous elements per operand, the inputs of
// `in_dtype`, the outputs of `out_dtype` (static_cast<int>(DType)). Per-element
// math is kernels/math/silu_gate_ops.h, the CPU kernel's. Enqueued on
// `stream`; returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_SILU_GATE_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_SILU_GATE_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// out = silu(gate) * up; out may be gate or up.
int LaunchSiluGateForward(int in_dtype, int out_dtype, const void* gate, const void* up, void* out,
                          int64_t n, void* stream);

// dgate and dup (either null: not computed; each may be one of the inputs).
int LaunchSiluGateBackward(int in_dtype, int out_dtype, const void* dy, const void* gate,
                           const void* up, void* dgate, void* dup, int64_t n, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_SILU_GATE_LAUNCH_H_
