// CPU-only build: the launcher of kernels/cuda/rope_launch.h exists so that the
// op entry links, and reports "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/rope_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchRopeApply(int, int, const void*, void*, const float*, const float*, const RopeGeometry&, bool,
                    void*) {
  return kNotBuilt;
}

}  // namespace zeroshard::cuda
