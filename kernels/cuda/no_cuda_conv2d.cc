// CPU-only build: the launchers of kernels/cuda/conv2d_launch.h exist so that the
// op entry links, and report "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/conv2d_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchConv2dForward(const Conv2dGeometry&, const float*, const float*, const float*, float*, void*) {
  return kNotBuilt;
}
int LaunchConv2dBackwardData(const Conv2dGeometry&, const float*, const float*, float*, void*) {
  return kNotBuilt;
}
int LaunchConv2dBackwardWeight(const Conv2dGeometry&, const float*, const float*, float*, bool, void*) {
  return kNotBuilt;
}
int LaunchConv2dBackwardBias(const Conv2dGeometry&, const float*, float*, bool, void*) { return kNotBuilt; }

}  // namespace zeroshard::cuda
