// device_api.h for a CPU-only build (`make CUDA=0`): no device exists, and any
// attempt to use one says how this binary was built.
#include <string>

#include "zeroshard/runtime/cuda/device_api.h"

namespace zeroshard::cuda {

namespace {
absl::Status NotBuilt(const char* call) {
  return absl::FailedPreconditionError(
      std::string(call) + ": zeroshard was built without CUDA (ZEROSHARD_CUDA=0 or no toolkit "
                          "at build time); rebuild with the CUDA toolkit to use a GPU");
}
}  // namespace

bool BuiltWithCuda() { return false; }
CudaCallCounts ThreadCudaCallCounts() { return {}; }
absl::StatusOr<int> CudaDeviceCount() { return 0; }
absl::Status CudaSetDevice(int) { return NotBuilt("CudaSetDevice"); }
int CudaCurrentDevice() { return -1; }
absl::StatusOr<std::string> CudaDeviceName(int) { return NotBuilt("CudaDeviceName"); }
absl::StatusOr<void*> CudaMalloc(int, size_t) { return NotBuilt("CudaMalloc"); }
absl::Status CudaFree(int, void*) { return NotBuilt("CudaFree"); }
absl::StatusOr<void*> CudaHostAllocPinned(size_t) { return NotBuilt("CudaHostAllocPinned"); }
absl::Status CudaHostFree(void*) { return NotBuilt("CudaHostFree"); }
absl::Status CudaMemcpy(void*, const void*, size_t, CopyKind, void*) {
  return NotBuilt("CudaMemcpy");
}
absl::StatusOr<void*> CudaStreamCreate(int) { return NotBuilt("CudaStreamCreate"); }
absl::Status CudaStreamDestroy(void*) { return NotBuilt("CudaStreamDestroy"); }
absl::Status CudaStreamSynchronize(void*) { return NotBuilt("CudaStreamSynchronize"); }
absl::StatusOr<void*> CudaEventCreate(int, bool) { return NotBuilt("CudaEventCreate"); }
absl::Status CudaEventDestroy(void*) { return NotBuilt("CudaEventDestroy"); }
absl::Status CudaEventRecord(void*, void*) { return NotBuilt("CudaEventRecord"); }
absl::Status CudaStreamWaitEvent(void*, void*) { return NotBuilt("CudaStreamWaitEvent"); }
absl::StatusOr<bool> CudaEventQuery(void*) { return NotBuilt("CudaEventQuery"); }
absl::Status CudaEventSynchronize(void*) { return NotBuilt("CudaEventSynchronize"); }
absl::StatusOr<float> CudaEventElapsedMs(void*, void*) { return NotBuilt("CudaEventElapsedMs"); }

absl::Status CudaLaunchStatus(int code, const std::string& what) {
  if (code == 0) return absl::OkStatus();
  return NotBuilt(what.c_str());
}

}  // namespace zeroshard::cuda
