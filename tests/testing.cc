#include "tests/testing.h"

#include "absl/strings/match.h"
#include "runtime/cuda/device_api.h"

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

}  // namespace zeroshard::testing
