#include "zeroshard/tests/testing.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "zeroshard/runtime/cuda/device_api.h"

namespace zeroshard::testing {

bool HasCudaDevice() {
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  return n.ok() && *n > 0;
}

bool OnCudaSimulator() {
  if (!HasCudaDevice()) return false;
  absl::StatusOr<std::string> name = cuda::CudaDeviceName(0);
  return name.ok() && absl::StartsWith(*name, "cuda_sim");
}

bool ShrinkGpuTests() {
  const char* shrink = std::getenv("ZEROSHARD_TEST_SHRINK");
  if (shrink != nullptr && std::string(shrink) == "1") return true;
  return OnCudaSimulator();
}

}  // namespace zeroshard::testing
