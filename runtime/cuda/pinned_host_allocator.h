// PinnedHostAllocator: page-locked host memory from cudaHostAlloc, behind the
// Allocator interface (byte accounting, capacity limit). Host tensors in it
// are what async H2D/D2H copies need (CPU offload of shards and optimizer
// state, staging of checkpoint reads).
//
//   PinnedHostAllocator pinned;
//   ZS_ASSIGN_OR_RETURN(Tensor shard, Tensor::Empty({n}, DType::kF32, &pinned));
//   // shard.device() is cpu: CPU kernels use it as any host tensor.
//
// Each Allocate is a cudaHostAlloc (slow, it pins pages): for many short-lived
// staging buffers put a CachingAllocator over CudaBacking(device,
// CudaBacking::Memory::kPinnedHost) instead (runtime/cuda/caching_allocator.h).
// In a CPU-only build, or without a driver, every Allocate is refused and
// last_failure() says why.
#ifndef ZEROSHARD_RUNTIME_CUDA_PINNED_HOST_ALLOCATOR_H_
#define ZEROSHARD_RUNTIME_CUDA_PINNED_HOST_ALLOCATOR_H_

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/allocator.h"

namespace zeroshard {

class PinnedHostAllocator final : public Allocator {
 public:
  explicit PinnedHostAllocator(int64_t capacity_bytes = 0);
  ~PinnedHostAllocator() override;

  // Why the last refused Allocate was refused (the base class only says the
  // backing refused).
  absl::Status last_failure() const;

  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const override;
  absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes) const override;
  absl::Status CopyWithinDevice(void* dst, const void* src, size_t bytes) const override;

 protected:
  void* RawAllocate(size_t bytes) override;
  void RawDeallocate(void* ptr, size_t bytes) override;

 private:
  mutable absl::Mutex mu_;
  absl::Status last_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_CUDA_PINNED_HOST_ALLOCATOR_H_
