// CPU implementations behind kernels/silu_gate.h. Arguments are validated by
// the op entry: one shape for every operand, the inputs of one float dtype,
// any strides; dgate and dup (either may be undefined) of one float dtype.
#ifndef ZEROSHARD_KERNELS_CPU_SILU_GATE_H_
#define ZEROSHARD_KERNELS_CPU_SILU_GATE_H_

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

void SiluGateForward(const Tensor& gate, const Tensor& up, const Tensor& out);
void SiluGateBackward(const Tensor& dy, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                      const Tensor& dup);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_SILU_GATE_H_
