// Embedding gather (one block per position), the ids' range check on the
// device, and the deterministic scatter-add computed entirely on the device:
// the (id, position) keys sorted by a bitonic sort (in shared memory per tile,
// then global merge passes), then one thread per (id run, column) adding its
// positions in order. See embedding_launch.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/embedding_launch.h"

namespace zeroshard::cuda {

namespace {

template <typename TW, typename TOut, typename I>
__global__ void Gather(const TW* w, int64_t ws, const I* ids, int64_t vocab, TOut* out, int64_t os,
                       int64_t cols) {
  const int64_t p = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[p]);
  TOut* dst = out + p * os;
  if (id < 0 || id >= vocab) {  // reported by the check; never read outside the table
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = FromFloat<TOut>(0.0f);
    return;
  }
  const TW* src = w + id * ws;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = FromFloat<TOut>(ToFloat(src[c]));
}

constexpr int kCheckThreads = 256;

// One block: the smallest position whose id is out of range (and not
// `ignore`, when allow_ignore), by a block minimum (order-free); written to
// the slot only when the slot is still empty, so the first failing check in
// stream order is the one reported.
template <typename I>
__global__ void CheckIdsKernel(const I* ids, int64_t n, int64_t vocab, int allow_ignore, int64_t ignore,
                               int64_t check, int64_t* slot, int64_t* sanitized) {
  __shared__ int64_t scratch[kCheckThreads];
  int64_t first = n;
  for (int64_t p = threadIdx.x; p < n; p += kCheckThreads) {
    const int64_t v = static_cast<int64_t>(ids[p]);
    const bool ok = (v >= 0 && v < vocab) || (allow_ignore != 0 && v == ignore);
    if (sanitized != nullptr) sanitized[p] = ok ? v : ignore;
    if (!ok && p < first) first = p;
  }
  scratch[threadIdx.x] = first;
  __syncthreads();
  for (int s = kCheckThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && scratch[threadIdx.x + s] < scratch[threadIdx.x]) {
      scratch[threadIdx.x] = scratch[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && scratch[0] < n && slot[0] == 0) {
    slot[0] = check + 1;
    slot[1] = scratch[0];
    slot[2] = static_cast<int64_t>(ids[scratch[0]]);
  }
}

// key = id << 32 | position (an out-of-range id sorts as `vocab`, after every
// real one); the padding past n is the largest key.
template <typename I>
__global__ void MakeKeys(const I* ids, int64_t n, int64_t padded, int64_t vocab, uint64_t* keys) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < padded; i += step) {
    if (i >= n) {
      keys[i] = ~uint64_t{0};
      continue;
    }
    int64_t id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= vocab) id = vocab;
    keys[i] = (static_cast<uint64_t>(id) << 32) | static_cast<uint64_t>(i);
  }
}

__device__ __forceinline__ void CompareExchange(uint64_t& a, uint64_t& b, bool ascending) {
  if ((a > b) == ascending) {
    const uint64_t t = a;
    a = b;
    b = t;
  }
}

// The bitonic stages of one tile of kEmbeddingSortTile keys in shared memory:
// every (k, j) with k <= k_last and j < the tile, where k starts at k_first
// (k_first == 2: sort the tile from scratch; else the j < tile tail of the
// merge of size k_first == k_last). Direction from the global index, so the
// tiles form the global bitonic sequence.
__global__ void BitonicTile(uint64_t* keys, int64_t k_first, int64_t k_last) {
  __shared__ uint64_t s[kEmbeddingSortTile];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kEmbeddingSortTile;
  for (int t = threadIdx.x; t < kEmbeddingSortTile; t += blockDim.x) s[t] = keys[base + t];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k <<= 1) {
    int64_t j = k >> 1;
    if (j >= kEmbeddingSortTile) j = kEmbeddingSortTile / 2;
    for (; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < kEmbeddingSortTile / 2; t += blockDim.x) {
        // The t-th pair of this stage: low index lo, partner lo + j.
        const int lo = static_cast<int>((t / j) * 2 * j + (t % j));
        const bool ascending = ((base + lo) & k) == 0;
        CompareExchange(s[lo], s[lo + j], ascending);
      }
      __syncthreads();
    }
  }
  for (int t = threadIdx.x; t < kEmbeddingSortTile; t += blockDim.x) keys[base + t] = s[t];
}

// One bitonic stage (k, j) with j >= the tile, over global memory: each
// thread takes pairs t, t + grid threads, ... (disjoint, so any order).
__global__ void BitonicGlobal(uint64_t* keys, int64_t pairs, int64_t k, int64_t j) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < pairs; t += step) {
    const int64_t lo = (t / j) * 2 * j + (t % j);
    uint64_t a = keys[lo], b = keys[lo + j];
    CompareExchange(a, b, (lo & k) == 0);
    keys[lo] = a;
    keys[lo + j] = b;
  }
}

// Block x: sorted index i; the first key of each id's run sums the run's rows
// in position order (column chunk blockIdx.y), as the CPU twin does.
template <typename TD, typename TW>
__global__ void ScatterAddSorted(const TD* d, int64_t ds, const uint64_t* keys, int64_t n, int64_t vocab,
                                 TW* w, int64_t ws, int64_t cols) {
  const int64_t i = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const uint64_t id = keys[i] >> 32;
  if (id >= static_cast<uint64_t>(vocab)) return;
  if (i > 0 && (keys[i - 1] >> 32) == id) return;
  float acc = 0.0f;
  for (int64_t m = i; m < n && (keys[m] >> 32) == id; ++m) {
    acc += ToFloat(d[static_cast<int64_t>(keys[m] & 0xffffffffu) * ds + c]);
  }
  TW* dst = w + static_cast<int64_t>(id) * ws + c;
  *dst = FromFloat<TW>(ToFloat(*dst) + acc);
}

}  // namespace

int LaunchEmbeddingForward(int w_dtype, int out_dtype, const void* weight, int64_t w_stride,
                           int id_dtype, const void* ids, int64_t vocab, void* out,
                           int64_t out_stride, int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return InvalidValue();
  int threads = kWarp;
  while (threads < 256 && threads < cols) threads *= 2;
  return DispatchFloatPair(w_dtype, out_dtype, [&]<typename TW, typename TOut>() {
    return DispatchIndex(id_dtype, [&]<typename I>() {
      Launch(Gather<TW, TOut, I>, static_cast<int>(rows), threads, 0, AsStream(stream),
             static_cast<const TW*>(weight), w_stride, static_cast<const I*>(ids), vocab,
             static_cast<TOut*>(out), out_stride, cols);
      return Launched();
    });
  });
}

int LaunchCheckIds(int id_dtype, const void* ids, int64_t n, int64_t vocab, bool allow_ignore,
                   int64_t ignore_index, int64_t check, int64_t* slot, int64_t* sanitized,
                   void* stream) {
  if (n == 0) return 0;
  return DispatchIndex(id_dtype, [&]<typename I>() {
    Launch(CheckIdsKernel<I>, 1, kCheckThreads, 0, AsStream(stream), static_cast<const I*>(ids), n,
           vocab, allow_ignore ? 1 : 0, ignore_index, check, slot, sanitized);
    return Launched();
  });
}

int64_t EmbeddingSortKeys(int64_t n) {
  int64_t padded = kEmbeddingSortTile;
  while (padded < n) padded *= 2;
  return padded;
}

int LaunchEmbeddingBackward(int d_dtype, int w_dtype, const void* dout, int64_t d_stride,
                            int id_dtype, const void* ids, int64_t n, int64_t vocab,
                            uint64_t* keys, void* dweight, int64_t w_stride, int64_t cols,
                            void* stream) {
  if (n == 0 || cols == 0) return 0;
  constexpr int kThreads = 128;
  const int64_t chunks = (cols + kThreads - 1) / kThreads;
  if (n > 0x7fffffff || chunks > 65535 || vocab >= (int64_t{1} << 31)) return InvalidValue();
  const cudaStream_t s = AsStream(stream);
  const int64_t padded = EmbeddingSortKeys(n);
  const int key_err = DispatchIndex(id_dtype, [&]<typename I>() {
    Launch(MakeKeys<I>, GridFor(padded, 256), 256, 0, s, static_cast<const I*>(ids), n, padded, vocab,
           keys);
    return Launched();
  });
  if (key_err != 0) return key_err;
  constexpr int kSortThreads = 512;
  const int tiles = static_cast<int>(padded / kEmbeddingSortTile);
  Launch(BitonicTile, tiles, kSortThreads, 0, s, keys, int64_t{2}, int64_t{kEmbeddingSortTile});
  if (const int e = Launched(); e != 0) return e;
  for (int64_t k = 2 * kEmbeddingSortTile; k <= padded; k <<= 1) {
    for (int64_t j = k >> 1; j >= kEmbeddingSortTile; j >>= 1) {
      Launch(BitonicGlobal, GridFor(padded / 2, 256), 256, 0, s, keys, padded / 2, k, j);
      if (const int e = Launched(); e != 0) return e;
    }
    Launch(BitonicTile, tiles, kSortThreads, 0, s, keys, k, k);
    if (const int e = Launched(); e != 0) return e;
  }
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(chunks));
  return DispatchFloatPair(d_dtype, w_dtype, [&]<typename TD, typename TW>() {
    Launch(ScatterAddSorted<TD, TW>, grid, kThreads, 0, s, static_cast<const TD*>(dout), d_stride,
           static_cast<const uint64_t*>(keys), n, vocab, static_cast<TW*>(dweight), w_stride, cols);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
