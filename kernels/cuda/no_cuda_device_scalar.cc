// CPU-only build: the launchers of kernels/cuda/device_scalar_launch.h exist so
// that callers link, and report "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/device_scalar_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchMeanOfValidRows(const float*, int, const void*, int64_t, int64_t, float*, float*, void*) {
  return kNotBuilt;
}
int LaunchSumInOrder(const double*, int64_t, float*, void*) { return kNotBuilt; }
int LaunchClipFactor(const float*, bool, double, double*, float*, void*) { return kNotBuilt; }
int LaunchScaleByDeviceScalar(int, void*, int64_t, const float*, void*) { return kNotBuilt; }

}  // namespace zeroshard::cuda
