// The CUDA runtime calls the core needs (device count, memory, copies, streams,
// events), as plain functions returning Status. Two implementations, chosen by
// Bazel rather than #ifdef: cuda_device_api.cc (links cudart) and
// no_cuda_device_api.cc (a CPU-only build: every call reports that CUDA is not
// built in, and CudaDeviceCount() is 0).
//
//   ZS_ASSIGN_OR_RETURN(int n, CudaDeviceCount());   // 0 on a machine without a GPU
//   if (n == 0) GTEST_SKIP() << "no CUDA device";
//
// Handles are opaque `void*` (cudaStream_t / cudaEvent_t) so that no header of
// the core includes CUDA's. Error text carries the CUDA error name and the
// caller's file and line; the sticky error state is cleared where CUDA allows.
#ifndef ZEROSHARD_RUNTIME_CUDA_DEVICE_API_H_
#define ZEROSHARD_RUNTIME_CUDA_DEVICE_API_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard::cuda {

// True when this binary was built with the CUDA toolkit.
bool BuiltWithCuda();
// Number of visible devices; 0 (not an error) when there is no driver or device.
absl::StatusOr<int> CudaDeviceCount();
// Makes `device` the calling thread's current device (cudaSetDevice): what a
// process of one GPU does first, before any other CUDA call of its rank.
absl::Status CudaSetDevice(int device);
// The calling thread's current device (cudaGetDevice); -1 in a CPU-only build.
int CudaCurrentDevice();
// "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB".
absl::StatusOr<std::string> CudaDeviceName(int device);

absl::StatusOr<void*> CudaMalloc(int device, size_t bytes);
absl::Status CudaFree(int device, void* ptr);
absl::StatusOr<void*> CudaHostAllocPinned(size_t bytes);
absl::Status CudaHostFree(void* ptr);

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Synchronous when `stream` is null, else enqueued on `stream`.
absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes, CopyKind kind,
                        void* stream = nullptr);

absl::StatusOr<void*> CudaStreamCreate(int device);
absl::Status CudaStreamDestroy(void* stream);
absl::Status CudaStreamSynchronize(void* stream);
absl::StatusOr<void*> CudaEventCreate(int device, bool enable_timing);
absl::Status CudaEventDestroy(void* event);
absl::Status CudaEventRecord(void* event, void* stream);
absl::Status CudaStreamWaitEvent(void* stream, void* event);
// True when the event's work has completed.
absl::StatusOr<bool> CudaEventQuery(void* event);
absl::Status CudaEventSynchronize(void* event);
absl::StatusOr<float> CudaEventElapsedMs(void* start, void* end);

// Calls made by the calling thread since it started that cost a GPU step most:
// device allocations (cudaMalloc) and waits that block the host until the device
// is done (a synchronous cudaMemcpy to or from the host, cudaStreamSynchronize,
// cudaEventSynchronize; a device-to-device cudaMemcpy does not block the host).
// The main job prints them per step after warm-up (with the caching allocator a
// warm step should allocate nothing). Per thread, so each in-process rank counts
// its own; 0 in a CPU-only build.
struct CudaCallCounts {
  int64_t mallocs = 0;
  int64_t host_syncs = 0;
};
CudaCallCounts ThreadCudaCallCounts();

// The Status for a cudaError_t returned as int by a kernel launcher (0 is OK);
// `what` names the launch ("Gelu on cuda:0").
absl::Status CudaLaunchStatus(int code, const std::string& what);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_RUNTIME_CUDA_DEVICE_API_H_
