// Embedding gather (one block per position) and deterministic scatter-add
// (one thread per (id group, column), positions added in order).
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/embedding_launch.h"

namespace zeroshard::cuda {

namespace {

template <typename TW, typename TOut, typename I>
__global__ void Gather(const TW* w, int64_t ws, const I* ids, TOut* out, int64_t os, int64_t cols) {
  const int64_t p = blockIdx.x;
  const TW* src = w + static_cast<int64_t>(ids[p]) * ws;
  TOut* dst = out + p * os;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = FromFloat<TOut>(ToFloat(src[c]));
}

template <typename TD, typename TW>
__global__ void ScatterAdd(const TD* d, int64_t ds, const int64_t* group_id,
                           const int64_t* group_start, const int64_t* order, TW* w, int64_t ws,
                           int64_t cols) {
  const int64_t g = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t i = group_start[g]; i < group_start[g + 1]; ++i) acc += ToFloat(d[order[i] * ds + c]);
  TW* dst = w + group_id[g] * ws + c;
  *dst = FromFloat<TW>(ToFloat(*dst) + acc);
}

}  // namespace

int LaunchEmbeddingForward(int w_dtype, int out_dtype, const void* weight, int64_t w_stride,
                           int id_dtype, const void* ids, void* out, int64_t out_stride,
                           int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return InvalidValue();
  int threads = kWarp;
  while (threads < 256 && threads < cols) threads *= 2;
  return DispatchFloatPair(w_dtype, out_dtype, [&]<typename TW, typename TOut>() {
    return DispatchIndex(id_dtype, [&]<typename I>() {
      Launch(Gather<TW, TOut, I>, static_cast<int>(rows), threads, 0, AsStream(stream),
             static_cast<const TW*>(weight), w_stride, static_cast<const I*>(ids),
             static_cast<TOut*>(out), out_stride, cols);
      return Launched();
    });
  });
}

int LaunchEmbeddingBackward(int d_dtype, int w_dtype, const void* dout, int64_t d_stride,
                            const int64_t* group_id, const int64_t* group_start,
                            const int64_t* order, int64_t groups, void* dweight, int64_t w_stride,
                            int64_t cols, void* stream) {
  if (groups == 0 || cols == 0) return 0;
  constexpr int kThreads = 128;
  const int64_t chunks = (cols + kThreads - 1) / kThreads;
  if (groups > 0x7fffffff || chunks > 65535) return InvalidValue();
  const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(chunks));
  return DispatchFloatPair(d_dtype, w_dtype, [&]<typename TD, typename TW>() {
    Launch(ScatterAdd<TD, TW>, grid, kThreads, 0, AsStream(stream), static_cast<const TD*>(dout),
           d_stride, group_id, group_start, order, static_cast<TW*>(dweight), w_stride, cols);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
