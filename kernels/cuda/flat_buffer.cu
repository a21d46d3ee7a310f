// Batched byte copies: blockIdx.y picks the copy, blockIdx.x strides over its
// chunks of kChunk bytes.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/flat_buffer_launch.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 16 * 4;  // 16 KiB: four 16-byte moves per thread

template <typename V>
__device__ __forceinline__ void CopyChunks(const V* src, V* dst, int64_t n) {
  constexpr int64_t kPer = kChunk / static_cast<int64_t>(sizeof(V));
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kPer; c0 < n;
       c0 += static_cast<int64_t>(gridDim.x) * kPer) {
    const int64_t end = c0 + kPer < n ? c0 + kPer : n;
    for (int64_t i = c0 + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
  }
}

__global__ void FlatCopies(const FlatCopy* copies, int64_t first) {
  const FlatCopy c = copies[first + blockIdx.y];
  const uintptr_t all = reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) |
                        static_cast<uintptr_t>(c.bytes);
  if (all % 16 == 0) {
    CopyChunks(static_cast<const uint4*>(c.src), static_cast<uint4*>(c.dst), c.bytes / 16);
  } else if (all % 4 == 0) {
    CopyChunks(static_cast<const uint32_t*>(c.src), static_cast<uint32_t*>(c.dst), c.bytes / 4);
  } else {
    CopyChunks(static_cast<const unsigned char*>(c.src), static_cast<unsigned char*>(c.dst),
               c.bytes);
  }
}

}  // namespace

int LaunchFlatCopies(const FlatCopy* copies, int64_t count, int64_t max_bytes, void* stream) {
  if (count == 0 || max_bytes == 0) return 0;
  const int grid_x = GridFor(max_bytes, static_cast<int>(kChunk), 2048);
  for (int64_t first = 0; first < count; first += 65535) {
    const int64_t batch = count - first < 65535 ? count - first : 65535;
    Launch(FlatCopies, dim3(grid_x, static_cast<unsigned>(batch)), kThreads, 0, AsStream(stream),
           copies, first);
    if (const int rc = Launched(); rc != 0) return rc;
  }
  return 0;
}

}  // namespace zeroshard::cuda
