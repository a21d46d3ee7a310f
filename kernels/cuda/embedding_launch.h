// Host launchers of the CUDA embedding kernels (kernels/cuda/embedding.cu),
// callable from plain C++. The table (weight / dweight) is [V, cols] with row v
// at base + v * stride; out / dout rows as in softmax_launch.h, one per id.
// ids are `rows` (or n) contiguous i32/i64. Enqueued on `stream`; returns a
// cudaError_t as int (0 = success).
//
// No launcher reads anything back: a range check of ids runs on the device
// (LaunchCheckIds, into a slot the host reads when it chooses), and the
// kernels never read or write outside the table for an id out of [0, V).
//
// The backward is deterministic and uses no atomics, all on the device: the
// keys (id << 32 | position) are sorted (bitonic: kEmbeddingSortTile keys per
// block in shared memory, then global merge passes), and the first key of
// each id's run adds the run's dout rows in position order, one thread per
// column, into dweight: the CPU twin's sum order (kernels/cpu/embedding.cc),
// bit for bit.
#ifndef ZEROSHARD_KERNELS_CUDA_EMBEDDING_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_EMBEDDING_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// out[p] = weight[ids[p]] converted; rows whose id is outside [0, vocab) get 0.
int LaunchEmbeddingForward(int w_dtype, int out_dtype, const void* weight, int64_t w_stride,
                           int id_dtype, const void* ids, int64_t vocab, void* out,
                           int64_t out_stride, int64_t rows, int64_t cols, void* stream);

// One block checks the n ids against [0, vocab) (or == ignore_index when
// allow_ignore). If some id fails and slot[0] is 0, writes slot[0] = check + 1,
// slot[1] = the first failing position, slot[2] = its id (a slot is three
// device int64s; the first failing check in stream order stays). `sanitized`
// (n device int64s, may be null) gets each id, or ignore_index for a failing one.
int LaunchCheckIds(int id_dtype, const void* ids, int64_t n, int64_t vocab, bool allow_ignore,
                   int64_t ignore_index, int64_t check, int64_t* slot, int64_t* sanitized,
                   void* stream);

// Keys per block of the shared-memory sort (16 KiB of uint64).
inline constexpr int kEmbeddingSortTile = 2048;
// The uint64 scratch keys the backward needs for n ids: n rounded up to a
// power of two, at least one tile.
int64_t EmbeddingSortKeys(int64_t n);

// dweight[id] += the sum of the dout rows at the positions holding id, in
// position order; ids outside [0, vocab) are skipped. `keys`: device scratch
// of EmbeddingSortKeys(n) uint64.
int LaunchEmbeddingBackward(int d_dtype, int w_dtype, const void* dout, int64_t d_stride,
                            int id_dtype, const void* ids, int64_t n, int64_t vocab,
                            uint64_t* keys, void* dweight, int64_t w_stride, int64_t cols,
                            void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_EMBEDDING_LAUNCH_H_
