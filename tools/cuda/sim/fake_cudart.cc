// The CUDA runtime calls of this project, answered by the simulator: the
// "devices" are host memory and the CPU (tools/cuda/sim/cuda_sim.h), so a build
// with --define=cuda_sim=1 (`make sim-test`) runs the GPU tests unchanged on a
// machine without a GPU. Linked instead of libcudart in that build only; it is
// compiled against the toolkit's own headers so the signatures are theirs.
//
// Semantics: device and pinned memory are aligned host allocations; copies and
// memsets happen when called (streams never hold work, so synchronising is a
// no-op and every event has completed); kernels run to completion at launch;
// an event's time is the host clock (steady_clock) when it was recorded, so
// cudaEventElapsedTime between two events is the host time between their
// cudaEventRecord calls: the time model GPU traces rest on here (Note [GPU
// spans] in runtime/gpu_timeline.h: a GPU span lies inside its host span).
// As on a device, cudaEventElapsedTime refuses an event never recorded or one
// created with cudaEventDisableTiming (cudaErrorInvalidResourceHandle). The device reports
// itself as "cuda_sim" with compute capability 9.0 and an H100's shared memory
// limits; every device is the same host memory. cuBLASLt, cuBLAS's GEMM and
// NCCL have stand-ins of their own (fake_cublaslt.cc, fake_cublas.cc,
// fake_nccl.cc); cuDNN has none: its handle cannot be created without a real
// device, and the tests that need it skip.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "zeroshard/tools/cuda/sim/sim_errors.h"

namespace {

// Simulated devices (ZEROSHARD_CUDA_SIM_DEVICES, default 4): enough for the
// 2- and 4-GPU cases of the NCCL suite and the sharded model.
int Devices() {
  static const int n = [] {
    const char* env = std::getenv("ZEROSHARD_CUDA_SIM_DEVICES");
    const int v = env == nullptr ? 4 : std::atoi(env);
    return v < 0 ? 0 : v;
  }();
  return n;
}
constexpr size_t kAlignment = 256;  // cudaMalloc's alignment
constexpr size_t kTotalMemory = size_t{16} << 30;

thread_local int tl_device = 0;

struct FakeEvent {
  bool timing = true;
  bool recorded = false;
  double recorded_ms = 0;
};

double NowMs() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

std::mutex& LiveMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

// Allocations made here, so that a free of anything else is an error (as the
// device reports an invalid pointer).
std::unordered_set<void*>& Live() {
  static auto* live = new std::unordered_set<void*>();
  return *live;
}

cudaError_t Allocate(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(LiveMutex());
  Live().insert(p);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t Release(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(LiveMutex());
    if (Live().erase(ptr) == 0) return cudaErrorInvalidValue;
  }
  std::free(ptr);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = Devices();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (device < 0 || device >= Devices()) return cudaErrorInvalidDevice;
  tl_device = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (prop == nullptr || device < 0 || device >= Devices()) return cudaErrorInvalidValue;
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "cuda_sim (zeroshard's CPU simulator)", sizeof(prop->name) - 1);
  prop->totalGlobalMem = kTotalMemory;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 232448;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr || device < 0 || device >= Devices()) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = 1;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = 232448;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = 48 * 1024;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaGetLastError(void) {
  return static_cast<cudaError_t>(zs_cuda_sim::TakeLastLaunchError());
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  return static_cast<cudaError_t>(zs_cuda_sim::PeekLastLaunchError());
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorMisalignedAddress:
      return "cudaErrorMisalignedAddress";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    default:
      return "cudaError (cuda_sim)";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  if (error == cudaErrorLaunchFailure || error == cudaErrorMisalignedAddress) {
    // The simulator's account of the failed launch (which block, which threads).
    thread_local std::string text;
    text = std::string(error == cudaErrorLaunchFailure ? "unspecified launch failure"
                                                       : "misaligned address") +
           " (cuda_sim: " + zs_cuda_sim::LastError() + ")";
    return text.c_str();
  }
  return cudaGetErrorName(error);
}

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t size) { return Allocate(ptr, size); }
cudaError_t CUDARTAPI cudaFree(void* ptr) { return Release(ptr); }
cudaError_t CUDARTAPI cudaMallocAsync(void** ptr, size_t size, cudaStream_t) {
  return Allocate(ptr, size);
}
cudaError_t CUDARTAPI cudaFreeAsync(void* ptr, cudaStream_t) { return Release(ptr); }
cudaError_t CUDARTAPI cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  return Allocate(ptr, size);
}
cudaError_t CUDARTAPI cudaFreeHost(void* ptr) { return Release(ptr); }

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind) {
  if (count > 0 && (dst == nullptr || src == nullptr)) return cudaErrorInvalidValue;
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t count) {
  if (count > 0 && ptr == nullptr) return cudaErrorInvalidValue;
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  return cudaMemset(ptr, value, count);
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  *stream = reinterpret_cast<cudaStream_t>(new char(0));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) {
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return cudaErrorInvalidValue;
  *event = reinterpret_cast<cudaEvent_t>(new FakeEvent{.timing = (flags & cudaEventDisableTiming) == 0});
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<FakeEvent*>(event);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  FakeEvent* e = reinterpret_cast<FakeEvent*>(event);
  e->recorded_ms = NowMs();
  e->recorded = true;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  return event == nullptr ? cudaErrorInvalidResourceHandle : cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return cudaErrorInvalidValue;
  const FakeEvent* a = reinterpret_cast<FakeEvent*>(start);
  const FakeEvent* b = reinterpret_cast<FakeEvent*>(end);
  if (!a->timing || !b->timing || !a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = static_cast<float>(b->recorded_ms - a->recorded_ms);
  return cudaSuccess;
}

}  // extern "C"
