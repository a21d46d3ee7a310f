// Host launchers of the CUDA embedding kernels (kernels/cuda/embedding.cu),
// callable from plain C++. The table (weight / dweight) is [V, cols] with row v
// at base + v * stride; out / dout rows as in softmax_launch.h, one per id.
// ids are `rows` contiguous i32/i64, already checked to be in [0, V).
// Enqueued on `stream`; returns a cudaError_t as int (0 = success).
//
// The backward is deterministic and uses no atomics: the caller groups the
// positions by id (the CPU twin's counting sort, kernels/cpu/embedding.cc) and
// passes the groups; one thread per (group, column) adds its group's rows in
// position order into dweight.
#ifndef ZEROSHARD_KERNELS_CUDA_EMBEDDING_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_EMBEDDING_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

int LaunchEmbeddingForward(int w_dtype, int out_dtype, const void* weight, int64_t w_stride,
                           int id_dtype, const void* ids, void* out, int64_t out_stride,
                           int64_t rows, int64_t cols, void* stream);

// group_id[g]: the id of group g; group_start[g] .. group_start[g + 1]: its
// positions in `order` (device int64 arrays of groups, groups + 1 and
// positions entries). dweight[id] += sum of dout rows at those positions.
int LaunchEmbeddingBackward(int d_dtype, int w_dtype, const void* dout, int64_t d_stride,
                            const int64_t* group_id, const int64_t* group_start,
                            const int64_t* order, int64_t groups, void* dweight, int64_t w_stride,
                            int64_t cols, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_EMBEDDING_LAUNCH_H_
