// CudaAllocator: device memory from cudaMalloc, with the byte accounting and
// capacity limit of every Allocator, and copies through cudaMemcpy.
//
//   ZS_ASSIGN_OR_RETURN(int n, cuda::CudaDeviceCount());
//   CudaAllocator gpu(0);
//   ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({1024}, DType::kBF16, &gpu));
//
// Every Allocate is a cudaMalloc (synchronising, slow): fine for long-lived
// buffers and tests. The caching allocator (size-class bins, block splitting,
// per-stream reuse) is built on the same base class.
#ifndef ZEROSHARD_RUNTIME_CUDA_CUDA_ALLOCATOR_H_
#define ZEROSHARD_RUNTIME_CUDA_CUDA_ALLOCATOR_H_

#include "zeroshard/runtime/allocator.h"

namespace zeroshard {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device_index, int64_t capacity_bytes = 0);
  ~CudaAllocator() override;

  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const override;
  absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes) const override;
  absl::Status CopyWithinDevice(void* dst, const void* src, size_t bytes) const override;

 protected:
  void* RawAllocate(size_t bytes) override;
  void RawDeallocate(void* ptr, size_t bytes) override;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_CUDA_CUDA_ALLOCATOR_H_
