// CPU-only build: the launchers of kernels/cuda/silu_gate_launch.h exist so that the
// op entries link, and report "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/silu_gate_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchSiluGateForward(int, int, const void*, const void*, void*, int64_t, void*) { return kNotBuilt; }
int LaunchSiluGateBackward(int, int, const void*, const void*, const void*, void*, void*, int64_t, void*) {
  return kNotBuilt;
}

}  // namespace zeroshard::cuda
