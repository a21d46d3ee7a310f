// The SwiGLU gate of Llama's MLP: out = silu(gate) * up, fused (one pass, no
// silu(gate) tensor), and its backward.
//
//   // gate = x W_gate^T, up = x W_up^T: [B, T, F] each
//   ZS_RETURN_IF_ERROR(SiluGateForward(gate, up, h));          // h = silu(gate) * up
//   ZS_RETURN_IF_ERROR(SiluGateBackward(dh, gate, up, dgate, dup));
//
// silu(g) = g sigmoid(g). Backward, s = sigmoid(gate):
//   dgate = dy up s (1 + gate (1 - s)),   dup = dy silu(gate).
// Per-element math: kernels/math/silu_gate_ops.h (sigmoid overflow-safe: a
// gate of -1000 gives silu 0, never NaN).
//
// Rules (each violation is an InvalidArgument saying what was found):
// - gate, up, out, dy, dgate, dup all have one shape (no broadcasting).
// - Float data: f32/bf16/f16. Arithmetic is fp32, each result rounded once into
//   its tensor's dtype. Inputs of different dtypes (gate and up; dy, gate and
//   up) are widened to f32 first (a copy); dgate and dup share one dtype.
// - Any strides (CUDA: strided operands go through contiguous copies).
// - out may be exactly gate or up (in place); dgate and dup may each be
//   exactly one of the inputs, but not each other; no other overlaps.
// - In the backward either of dgate and dup may be undefined (not computed).
#ifndef ZEROSHARD_KERNELS_SILU_GATE_H_
#define ZEROSHARD_KERNELS_SILU_GATE_H_

#include "absl/status/status.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

absl::Status SiluGateForward(const Tensor& gate, const Tensor& up, const Tensor& out);

absl::Status SiluGateBackward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_SILU_GATE_H_
