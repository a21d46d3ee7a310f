// Whole-buffer sum and sum of squares: fixed slices per block (fp32, warp
// shuffles), then the partials in double by one block. See reduce_launch.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/reduce_launch.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 512;

template <typename T, bool kSquare>
__global__ void SlicePartials(const T* __restrict__ x, int64_t n, float* __restrict__ partials) {
  __shared__ float scratch[kWarp];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSumAllSlice;
  const int64_t end = begin + kSumAllSlice < n ? begin + kSumAllSlice : n;
  float acc = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = ToFloat(x[i]);
    acc += kSquare ? v * v : v;
  }
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void SumPartials(const float* __restrict__ partials, int64_t count, double* out) {
  __shared__ double scratch[kWarp];
  // Each thread adds a contiguous run of partials in order, then the tree.
  const int64_t per = (count + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * per;
  double acc = 0.0;
  for (int64_t i = begin; i < begin + per && i < count; ++i) acc += partials[i];
  acc = BlockSumD(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

enum AxisKind { kAxisSum = 0, kAxisMean = 1, kAxisMax = 2 };

__device__ __forceinline__ float MaxNan(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float WarpMaxNan(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = MaxNan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T, typename TOut>
__global__ void ReduceRows(int kind, const T* __restrict__ x, TOut* __restrict__ out, int64_t r) {
  __shared__ float scratch[kWarp];
  const T* row = x + blockIdx.x * r;
  float v;
  if (kind == kAxisMax) {
    v = ToFloat(row[0]);
    for (int64_t i = threadIdx.x; i < r; i += blockDim.x) v = MaxNan(v, ToFloat(row[i]));
    v = BlockReduce(v, scratch, ToFloat(row[0]), [](float a) { return WarpMaxNan(a); });
  } else {
    v = 0.0f;
    for (int64_t i = threadIdx.x; i < r; i += blockDim.x) v += ToFloat(row[i]);
    v = BlockSum(v, scratch);
    if (kind == kAxisMean) v = v / static_cast<float>(r);
  }
  if (threadIdx.x == 0) out[blockIdx.x] = FromFloat<TOut>(v);
}

// Columns of [outer, r, inner] (a bias gradient is [1, rows, C]): a block
// owns kColTile adjacent columns of one outer slice; its blockDim.y thread rows
// take the r rows in a fixed stride (coalesced kColTile-wide reads, every SM
// busy instead of one thread per column walking all r rows), then thread row 0
// adds the blockDim.y partial results in order. The launch shape depends on
// the sizes only, so the bits do too.
constexpr int kColTile = 32;

template <typename T, typename TOut>
__global__ void ReduceColumns(int kind, const T* __restrict__ x, TOut* __restrict__ out,
                              int64_t tiles, int64_t r, int64_t inner) {
  __shared__ float part[32][kColTile + 1];
  const int64_t o = blockIdx.x / tiles;
  const int64_t j = (blockIdx.x % tiles) * kColTile + threadIdx.x;
  const bool have = j < inner;
  const T* col = x + o * r * inner + j;
  float v = kind == kAxisMax ? -kInfF : 0.0f;
  if (have) {
    for (int64_t i = threadIdx.y; i < r; i += blockDim.y) {
      const float e = ToFloat(col[i * inner]);
      v = kind == kAxisMax ? MaxNan(v, e) : v + e;
    }
  }
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y != 0 || !have) return;
  for (int y = 1; y < static_cast<int>(blockDim.y); ++y) {
    const float e = part[y][threadIdx.x];
    v = kind == kAxisMax ? MaxNan(v, e) : v + e;
  }
  if (kind == kAxisMean) v = v / static_cast<float>(r);
  out[o * inner + j] = FromFloat<TOut>(v);
}

}  // namespace

int LaunchReduceAxis(int kind, int x_dtype, int out_dtype, const void* x, void* out, int64_t outer,
                     int64_t r, int64_t inner, void* stream) {
  if (outer == 0 || inner == 0) return 0;
  if (r == 0 || kind < kAxisSum || kind > kAxisMax) return InvalidValue();
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    const T* xp = static_cast<const T*>(x);
    TOut* op = static_cast<TOut*>(out);
    if (inner == 1 && outer <= 0x7fffffff) {
      int threads = kWarp;
      while (threads < 512 && threads * 4 < r) threads *= 2;
      Launch(ReduceRows<T, TOut>, static_cast<int>(outer), threads, 0, AsStream(stream), kind, xp,
             op, r);
    } else {
      const int64_t tiles = (inner + kColTile - 1) / kColTile;
      if (outer * tiles > 0x7fffffff) return InvalidValue();
      int rows_per_block = 1;  // thread rows: up to 32, about 8 rows each
      while (rows_per_block < 32 && rows_per_block * 8 < r) rows_per_block *= 2;
      Launch(ReduceColumns<T, TOut>, dim3(static_cast<unsigned>(outer * tiles)),
             dim3(kColTile, rows_per_block), 0, AsStream(stream), kind, xp, op, tiles, r, inner);
    }
    return Launched();
  });
}

int LaunchSumAll(int dtype, const void* x, int64_t n, bool square, float* partials, double* out,
                 void* stream) {
  const int64_t blocks = SumAllPartials(n);
  if (blocks > 0x7fffffff) return InvalidValue();
  const int rc = DispatchFloat(dtype, [&]<typename T>() {
    const T* xp = static_cast<const T*>(x);
    if (square) {
      Launch(SlicePartials<T, true>, static_cast<int>(blocks), kThreads, 0, AsStream(stream), xp, n,
             partials);
    } else {
      Launch(SlicePartials<T, false>, static_cast<int>(blocks), kThreads, 0, AsStream(stream), xp,
             n, partials);
    }
    return Launched();
  });
  if (rc != 0) return rc;
  Launch(SumPartials, 1, kThreads, 0, AsStream(stream), partials, blocks, out);
  return Launched();
}

}  // namespace zeroshard::cuda
