#include "tests/testing.h"

#include "runtime/cuda/device_api.h"

namespace zeroshard::testing {

bool HasCudaDevice() {
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  return n.ok() && *n > 0;
}

}  // namespace zeroshard::testing
