#include "zeroshard/runtime/cuda/pinned_host_allocator.h"

#include <cstdio>
#include <cstring>

#include "zeroshard/runtime/cuda/device_api.h"

namespace zeroshard {

PinnedHostAllocator::PinnedHostAllocator(int64_t capacity_bytes)
    : Allocator(Device::Cpu(), "pinned", capacity_bytes) {}

PinnedHostAllocator::~PinnedHostAllocator() = default;

absl::Status PinnedHostAllocator::last_failure() const {
  absl::MutexLock lock(&mu_);
  return last_failure_;
}

void* PinnedHostAllocator::RawAllocate(size_t bytes) {
  absl::StatusOr<void*> p = cuda::CudaHostAllocPinned(bytes);
  if (!p.ok()) {
    absl::MutexLock lock(&mu_);
    last_failure_ = p.status();
    return nullptr;
  }
  return *p;
}

void PinnedHostAllocator::RawDeallocate(void* ptr, size_t /*bytes*/) {
  if (absl::Status s = cuda::CudaHostFree(ptr); !s.ok()) {
    std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
  }
}

absl::Status PinnedHostAllocator::CopyToHost(void* host_dst, const void* src,
                                             size_t bytes) const {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
  return absl::OkStatus();
}

absl::Status PinnedHostAllocator::CopyFromHost(void* dst, const void* host_src,
                                               size_t bytes) const {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status PinnedHostAllocator::CopyWithinDevice(void* dst, const void* src,
                                                   size_t bytes) const {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

}  // namespace zeroshard
