#include "zeroshard/runtime/cuda/cuda_allocator.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/cuda/device_api.h"

namespace zeroshard {

CudaAllocator::CudaAllocator(int device_index, int64_t capacity_bytes)
    : Allocator(Device::Cuda(device_index), absl::StrCat("cuda:", device_index), capacity_bytes) {}

CudaAllocator::~CudaAllocator() = default;

void* CudaAllocator::RawAllocate(size_t bytes) {
  absl::StatusOr<void*> p = cuda::CudaMalloc(device().index, bytes);
  return p.ok() ? *p : nullptr;
}

void CudaAllocator::RawDeallocate(void* ptr, size_t /*bytes*/) {
  if (absl::Status s = cuda::CudaFree(device().index, ptr); !s.ok()) {
    std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
  }
}

absl::Status CudaAllocator::CopyToHost(void* host_dst, const void* src, size_t bytes) const {
  return cuda::CudaMemcpy(host_dst, src, bytes, cuda::CopyKind::kDeviceToHost);
}

absl::Status CudaAllocator::CopyFromHost(void* dst, const void* host_src, size_t bytes) const {
  return cuda::CudaMemcpy(dst, host_src, bytes, cuda::CopyKind::kHostToDevice);
}

absl::Status CudaAllocator::CopyWithinDevice(void* dst, const void* src, size_t bytes) const {
  return cuda::CudaMemcpy(dst, src, bytes, cuda::CopyKind::kDeviceToDevice);
}

}  // namespace zeroshard
