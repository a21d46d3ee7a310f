// Host launcher of the CUDA flat-buffer copy kernel (kernels/cuda/flat_buffer.cu):
// many byte copies in one launch, the gather of parameters into an FSDP flat
// buffer (pack) and the scatter back (unpack). Callable from plain C++.
//
//   FlatCopy table[] = {{w.data, flat + 0, w_bytes}, {b.data, flat + w_bytes, b_bytes}};
//   // copy `table` to device memory `table_dev`, then:
//   LaunchFlatCopies(table_dev, 2, /*max_bytes=*/w_bytes, stream);
//
// Copies must not overlap each other's destinations. Each copy moves 16 bytes
// per thread when its source, destination and size are 16-byte aligned, else
// 4 or 1. Enqueued on `stream`; returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_FLAT_BUFFER_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_FLAT_BUFFER_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

struct FlatCopy {
  const void* src;
  void* dst;
  int64_t bytes;
};

// `copies` points to `count` FlatCopy entries in device memory; max_bytes is
// the largest `bytes` among them (it sizes the grid).
int LaunchFlatCopies(const FlatCopy* copies, int64_t count, int64_t max_bytes, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_FLAT_BUFFER_LAUNCH_H_
