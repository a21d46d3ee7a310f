// device_api.h over the CUDA runtime (cudart). Built when the toolkit is present.
#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/cuda/cuda_status.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/watchdog.h"

namespace zeroshard::cuda {

namespace {

// Makes `device` current for one call and puts the caller's back after it (as
// PyTorch's CUDAGuard): allocating or creating a stream or an event on a GPU
// never changes which GPU the calling thread's ops launch on (Note: the ops
// check it, CheckSameDevice in runtime/tensor.h).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) status_ = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && status_ == cudaSuccess) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

cudaMemcpyKind ToCuda(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    // No driver or no device: not an error for the caller, just none to use.
    cudaGetLastError();
    return 0;
  }
  return n;
}

int CudaCurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

absl::Status CudaSetDevice(int device) {
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return absl::OkStatus();
}

absl::StatusOr<std::string> CudaDeviceName(int device) {
  cudaDeviceProp prop;
  ZS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  return absl::StrFormat("%s, sm_%d%d, %.1f GiB", prop.name, prop.major, prop.minor,
                         static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

namespace {
thread_local CudaCallCounts thread_counts;
}  // namespace

CudaCallCounts ThreadCudaCallCounts() { return thread_counts; }

absl::StatusOr<void*> CudaMalloc(int device, size_t bytes) {
  DeviceGuard guard(device);
  ZS_CUDA_RETURN_IF_ERROR(guard.status());
  void* p = nullptr;
  ++thread_counts.mallocs;
  ZS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return p;
}

absl::Status CudaFree(int device, void* ptr) {
  DeviceGuard guard(device);
  ZS_CUDA_RETURN_IF_ERROR(guard.status());
  ZS_CUDA_RETURN_IF_ERROR(cudaFree(ptr));
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaHostAllocPinned(size_t bytes) {
  void* p = nullptr;
  ZS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

absl::Status CudaHostFree(void* ptr) {
  ZS_CUDA_RETURN_IF_ERROR(cudaFreeHost(ptr));
  return absl::OkStatus();
}

absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) {
  if (bytes == 0) return absl::OkStatus();
  if (stream == nullptr) {
    // A device-to-device cudaMemcpy does not wait on the host (CUDA's "API
    // synchronization behavior"): only copies touching host memory count.
    if (kind != CopyKind::kDeviceToDevice) ++thread_counts.host_syncs;
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, ToCuda(kind)));
  } else {
    ZS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, ToCuda(kind), static_cast<cudaStream_t>(stream)));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaStreamCreate(int device) {
  DeviceGuard guard(device);
  ZS_CUDA_RETURN_IF_ERROR(guard.status());
  cudaStream_t stream = nullptr;
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return static_cast<void*>(stream);
}

absl::Status CudaStreamDestroy(void* stream) {
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::Status CudaStreamSynchronize(void* stream) {
  ++thread_counts.host_syncs;
  zeroshard::WatchdogWait wait("cudaStreamSynchronize");  // no deadline of its own (issue 26)
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaEventCreate(int device, bool enable_timing) {
  DeviceGuard guard(device);
  ZS_CUDA_RETURN_IF_ERROR(guard.status());
  cudaEvent_t event = nullptr;
  ZS_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return static_cast<void*>(event);
}

absl::Status CudaEventDestroy(void* event) {
  ZS_CUDA_RETURN_IF_ERROR(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  return absl::OkStatus();
}

absl::Status CudaEventRecord(void* event, void* stream) {
  ZS_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::Status CudaStreamWaitEvent(void* stream, void* event) {
  ZS_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaEventQuery(void* event) {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  ZS_CUDA_RETURN_IF_ERROR(err);
  return true;
}

absl::Status CudaEventSynchronize(void* event) {
  ++thread_counts.host_syncs;
  zeroshard::WatchdogWait wait("cudaEventSynchronize");  // no deadline of its own (issue 26)
  ZS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  return absl::OkStatus();
}

absl::StatusOr<float> CudaEventElapsedMs(void* start, void* end) {
  float ms = 0;
  ZS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start),
                                               static_cast<cudaEvent_t>(end)));
  return ms;
}

absl::Status CudaLaunchStatus(int code, const std::string& what) {
  if (code == 0) return absl::OkStatus();
  cudaGetLastError();
  const cudaError_t err = static_cast<cudaError_t>(code);
  return absl::InternalError(absl::StrCat(what, ": CUDA launch failed: ", cudaGetErrorName(err),
                                          " (", cudaGetErrorString(err), ")"));
}

}  // namespace zeroshard::cuda
