// CopyAsync: a tensor copy between host and device (or within a device)
// enqueued on a stream, returning at once. The data movement of CPU offload and
// of prefetching: H2D of a shard on a copy stream while compute runs.
//
//   PinnedHostAllocator pinned;
//   ZS_ASSIGN_OR_RETURN(Tensor host_shard, Tensor::Empty({n}, DType::kF32, &pinned));
//   ZS_RETURN_IF_ERROR(CopyAsync(device_shard, host_shard, copy_stream));   // H2D
//   ZS_RETURN_IF_ERROR(copied.Record(copy_stream));
//   ZS_RETURN_IF_ERROR(copied.Block(compute_stream));   // compute waits on the device
//
// Rules (InvalidArgument otherwise, saying what was found): both tensors
// defined, of one dtype and shape, contiguous; a CUDA side must be on the
// stream's device; two CPU tensors are copied at once (memcpy). The caller
// keeps both tensors alive until the stream has passed the copy (an Event). A
// host side in pageable memory makes CUDA stage the bytes (the call may then
// block until they are taken); pinned memory (PinnedHostAllocator) keeps it
// asynchronous.
#ifndef ZEROSHARD_RUNTIME_CUDA_ASYNC_COPY_H_
#define ZEROSHARD_RUNTIME_CUDA_ASYNC_COPY_H_

#include "absl/status/status.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

absl::Status CopyAsync(const Tensor& dst, const Tensor& src, const Stream& stream);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_CUDA_ASYNC_COPY_H_
