// CPU-only build: the launchers of kernels/cuda/pool2d_launch.h exist so that the
// op entries link, and report "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/pool2d_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchMaxPool2dForward(const PoolShape&, const MaxPoolWindow&, const float*, float*, int64_t*,
                           void*) {
  return kNotBuilt;
}
int LaunchMaxPool2dBackward(const PoolShape&, const MaxPoolWindow&, const float*, const int64_t*,
                            float*, void*) {
  return kNotBuilt;
}
int LaunchAvgPool2dForward(const PoolShape&, const AvgPoolTables&, const float*, float*, void*) {
  return kNotBuilt;
}
int LaunchAvgPool2dBackward(const PoolShape&, const AvgPoolTables&, const float*, float*, void*) {
  return kNotBuilt;
}

}  // namespace zeroshard::cuda
