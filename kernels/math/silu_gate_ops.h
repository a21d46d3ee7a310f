// Per-element math of the SwiGLU gate of Llama's MLP, down(silu(gate) * up),
// shared by the CPU kernel (kernels/cpu/silu_gate.cc) and the CUDA one
// (kernels/cuda/silu_gate.cu). SiluF / SiluGradF are kernels/math/fast_math.h's
// (the overflow-safe SigmoidF of the Sigmoid op).
//
//   out   = SiluGateElement(gate, up)          silu(gate) up
//   dgate = SiluGateGradGate(dy, gate, up)     dy up s (1 + gate (1 - s)),  s = sigmoid(gate)
//   dup   = SiluGateGradUp(dy, gate)           dy silu(gate)
#ifndef ZEROSHARD_KERNELS_MATH_SILU_GATE_OPS_H_
#define ZEROSHARD_KERNELS_MATH_SILU_GATE_OPS_H_

#include "zeroshard/kernels/math/fast_math.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline float SiluGateElement(float gate, float up) { return SiluF(gate) * up; }

ZS_HOST_DEVICE inline float SiluGateGradGate(float dy, float gate, float up) {
  return dy * up * SiluGradF(gate);
}

ZS_HOST_DEVICE inline float SiluGateGradUp(float dy, float gate) { return dy * SiluF(gate); }

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_SILU_GATE_OPS_H_
