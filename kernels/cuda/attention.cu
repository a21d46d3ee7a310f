// Our own causal/non-causal attention on CUDA, forward and backward (see
// attention_launch.h): simple, deterministic, fp32 accumulation; the fallback
// of cuDNN's fused attention and the reference it is tested against.
//
// Layout of every kernel: a block of kRows warps owns kRows consecutive rows
// of one (batch, head) (blockIdx.x = b * H + h, blockIdx.y = row block), one
// row per warp; the dK/dV kernel's head is a kv head (blockIdx.x = b * Hkv +
// j) and it walks the G = H / Hkv query heads of its group in turn (Note
// [Grouped-query attention] in kernels/attention.h). The other side (keys
// for the forward and dQ, queries for dK and dV) streams through shared
// memory in tiles of kTile rows, converted to f32 on load; lane l takes row l of the tile, so a lane computes whole dot
// products and the warp reduces only once per tile (the online softmax).
// Each lane owns the row elements d = lane + 32 e (e < L) of its warp's
// accumulators.
#include <climits>

#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/math/attention_math.h"

namespace zeroshard::cuda {

namespace {

constexpr int kRows = kAttentionRowsPerBlock;
constexpr int kTile = kAttentionTile;
constexpr int kThreads = kRows * kWarp;
constexpr unsigned kFull = 0xffffffffu;

// Query heads per kv head.
__device__ __forceinline__ int64_t Group(const AttentionLaunchDims& dims) {
  return dims.heads / AttentionKvHeads(dims);
}

// Head (b, h) of a [B, H, T, D] operand.
template <typename T>
__device__ __forceinline__ const T* Head(const AttentionOperand& o, int64_t b, int64_t h) {
  return static_cast<const T*>(o.data) + b * o.stride[0] + h * o.stride[1];
}
template <typename T>
__device__ __forceinline__ T* MutableHead(const AttentionOperand& o, int64_t b, int64_t h) {
  return const_cast<T*>(Head<T>(o, b, h));
}

// Rows [r0, r0 + kTile) of a head (element (t, d) at base[t * s2 + d * s3])
// into dst[kTile][D + 1] as f32; rows past T are zeros. Whole block.
template <typename T>
__device__ __forceinline__ void LoadTile(const T* base, int64_t s2, int64_t s3, int64_t r0,
                                         int64_t seq, int64_t D, float* dst) {
  const int64_t n = kTile * D;
  for (int64_t idx = threadIdx.x; idx < n; idx += blockDim.x) {
    const int64_t r = idx / D, d = idx - r * D;
    const int64_t t = r0 + r;
    dst[r * (D + 1) + d] = t < seq ? ToFloat(base[t * s2 + d * s3]) : 0.0f;
  }
}

// Row t of a head into dst[D] as f32. One warp.
template <typename T>
__device__ __forceinline__ void LoadRow(const T* base, int64_t s2, int64_t s3, int64_t t,
                                        int64_t D, int lane, float* dst) {
  for (int64_t d = lane; d < D; d += kWarp) dst[d] = ToFloat(base[t * s2 + d * s3]);
}

template <typename T, int L>
__device__ __forceinline__ void StoreRow(T* base, int64_t s2, int64_t s3, int64_t t, int64_t D,
                                         int lane, const float (&acc)[L], float factor) {
#pragma unroll
  for (int e = 0; e < L; ++e) {
    const int64_t d = lane + e * kWarp;
    if (d < D) base[t * s2 + d * s3] = FromFloat<T>(acc[e] * factor);
  }
}

// acc[e] += w * row[lane + 32 e] over the valid elements.
template <int L>
__device__ __forceinline__ void Axpy(float (&acc)[L], float w, const float* row, int64_t D,
                                     int lane) {
#pragma unroll
  for (int e = 0; e < L; ++e) {
    const int64_t d = lane + e * kWarp;
    if (d < D) acc[e] += w * row[d];
  }
}

__device__ __forceinline__ float Dot(const float* a, const float* b, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// The last row of this block (rows past T belong to no warp) and the number of
// key columns any of its rows sees.
__device__ __forceinline__ int64_t BlockKeys(const AttentionLaunchDims& dims, int64_t row0) {
  const int64_t last = (row0 + kRows < dims.seq ? row0 + kRows : dims.seq) - 1;
  return AttentionVisibleCount(last, dims.seq, dims.causal);
}

// ---------------------------------------------------------------- forward

template <typename T, int L>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(AttentionLaunchDims dims, AttentionOperand q, AttentionOperand k,
                  AttentionOperand v, AttentionOperand out, AttentionOperand lse) {
  ZS_DYNAMIC_SHARED(float, smem);
  const int64_t seq = dims.seq, D = dims.head_dim;
  const int64_t b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t i = row0 + warp;
  const bool valid = i < seq;
  float* qs = smem + warp * D;           // [D]: this warp's query row
  float* ks = smem + kRows * D;          // [kTile][D + 1]
  float* vs = ks + kTile * (D + 1);      // [kTile][D + 1]
  const T* kp = Head<T>(k, b, h / Group(dims));
  const T* vp = Head<T>(v, b, h / Group(dims));
  if (valid) LoadRow(Head<T>(q, b, h), q.stride[2], q.stride[3], i, D, lane, qs);
  const int64_t visible = valid ? AttentionVisibleCount(i, seq, dims.causal) : 0;
  const int64_t block_keys = BlockKeys(dims, row0);

  float m = -kInfF, l = 0.0f;
  float acc[L];
#pragma unroll
  for (int e = 0; e < L; ++e) acc[e] = 0.0f;
  for (int64_t k0 = 0; k0 < block_keys; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and qs is written)
    LoadTile(kp, k.stride[2], k.stride[3], k0, seq, D, ks);
    LoadTile(vp, v.stride[2], v.stride[3], k0, seq, D, vs);
    __syncthreads();
    if (k0 >= visible) continue;  // warp-uniform
    const int64_t j = k0 + lane;
    float s = -kInfF;
    if (j < visible) s = AttentionScore(Dot(qs, ks + lane * (D + 1), D), dims.scale);
    // Key k0 is visible, so the new maximum is finite.
    const float m_new = AttentionRunningMax(m, WarpMax(s));
    const float c = AttentionRescale(m, m_new);
    const float p = AttentionWeight(s, m_new);
    l = l * c + WarpSum(p);
#pragma unroll
    for (int e = 0; e < L; ++e) acc[e] *= c;
    const int jn = visible - k0 < kTile ? static_cast<int>(visible - k0) : kTile;
    for (int jj = 0; jj < jn; ++jj) {
      const float pj = __shfl_sync(kFull, p, jj);
      Axpy(acc, pj, vs + jj * (D + 1), D, lane);
    }
    m = m_new;
  }
  if (!valid) return;
  StoreRow(MutableHead<T>(out, b, h), out.stride[2], out.stride[3], i, D, lane, acc, 1.0f / l);
  if (lane == 0) {
    float* lp = static_cast<float*>(const_cast<void*>(lse.data));
    lp[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]] = AttentionLse(m, l);
  }
}

// ---------------------------------------------------------------- backward

// delta[(b H + h) T + t] = sum_d dO_td O_td. One warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    DeltaKernel(AttentionLaunchDims dims, AttentionOperand dout, AttentionOperand out,
                float* delta) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t rows = dims.batch * dims.heads * dims.seq;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRows + warp;
  if (r >= rows) return;  // whole warps: no block barrier follows
  const int64_t t = r % dims.seq, bh = r / dims.seq;
  const int64_t b = bh / dims.heads, h = bh % dims.heads;
  const T* g = Head<T>(dout, b, h) + t * dout.stride[2];
  const T* o = Head<T>(out, b, h) + t * out.stride[2];
  float s = 0.0f;
  for (int64_t d = lane; d < dims.head_dim; d += kWarp) {
    s += ToFloat(g[d * dout.stride[3]]) * ToFloat(o[d * out.stride[3]]);
  }
  s = WarpSum(s);
  if (lane == 0) delta[r] = s;
}

// dQ_i = scale sum_j dS_ij K_j, one warp per query row, key tiles.
template <typename T, int L>
__global__ void __launch_bounds__(kThreads)
    DqKernel(AttentionLaunchDims dims, AttentionOperand dout, AttentionOperand q,
             AttentionOperand k, AttentionOperand v, AttentionOperand lse, AttentionOperand dq,
             const float* delta) {
  ZS_DYNAMIC_SHARED(float, smem);
  const int64_t seq = dims.seq, D = dims.head_dim;
  const int64_t b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t i = row0 + warp;
  const bool valid = i < seq;
  float* qs = smem + warp * D;                 // [D]
  float* gs = smem + (kRows + warp) * D;       // [D]: dO_i
  float* ks = smem + 2 * kRows * D;            // [kTile][D + 1]
  float* vs = ks + kTile * (D + 1);            // [kTile][D + 1]
  const T* kp = Head<T>(k, b, h / Group(dims));
  const T* vp = Head<T>(v, b, h / Group(dims));
  float lse_i = 0.0f, delta_i = 0.0f;
  if (valid) {
    LoadRow(Head<T>(q, b, h), q.stride[2], q.stride[3], i, D, lane, qs);
    LoadRow(Head<T>(dout, b, h), dout.stride[2], dout.stride[3], i, D, lane, gs);
    const float* lp = static_cast<const float*>(lse.data);
    lse_i = lp[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]];
    delta_i = delta[blockIdx.x * seq + i];
  }
  const int64_t visible = valid ? AttentionVisibleCount(i, seq, dims.causal) : 0;
  const int64_t block_keys = BlockKeys(dims, row0);

  float acc[L];
#pragma unroll
  for (int e = 0; e < L; ++e) acc[e] = 0.0f;
  for (int64_t k0 = 0; k0 < block_keys; k0 += kTile) {
    __syncthreads();
    LoadTile(kp, k.stride[2], k.stride[3], k0, seq, D, ks);
    LoadTile(vp, v.stride[2], v.stride[3], k0, seq, D, vs);
    __syncthreads();
    if (k0 >= visible) continue;  // warp-uniform
    const int64_t j = k0 + lane;
    float ds = 0.0f;
    if (j < visible) {
      const float s = AttentionScore(Dot(qs, ks + lane * (D + 1), D), dims.scale);
      const float p = AttentionProb(s, lse_i);
      ds = AttentionScoreGrad(p, Dot(gs, vs + lane * (D + 1), D), delta_i);
    }
    const int jn = visible - k0 < kTile ? static_cast<int>(visible - k0) : kTile;
    for (int jj = 0; jj < jn; ++jj) {
      Axpy(acc, __shfl_sync(kFull, ds, jj), ks + jj * (D + 1), D, lane);
    }
  }
  if (!valid) return;
  StoreRow(MutableHead<T>(dq, b, h), dq.stride[2], dq.stride[3], i, D, lane, acc, dims.scale);
}

// dV_j = sum_h sum_i P_ij dO_i and dK_j = scale sum_h sum_i dS_ij Q_i over the
// query heads h of the block's kv head, in order of h: one warp per key row,
// query tiles (causal: only the queries i >= j).
template <typename T, int L>
__global__ void __launch_bounds__(kThreads)
    DkvKernel(AttentionLaunchDims dims, AttentionOperand dout, AttentionOperand q,
              AttentionOperand k, AttentionOperand v, AttentionOperand lse, AttentionOperand dk,
              AttentionOperand dv, const float* delta) {
  ZS_DYNAMIC_SHARED(float, smem);
  const int64_t seq = dims.seq, D = dims.head_dim;
  const int64_t kv_heads = AttentionKvHeads(dims), G = Group(dims);
  const int64_t b = blockIdx.x / kv_heads, kvh = blockIdx.x % kv_heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t j = row0 + warp;
  const bool valid = j < seq;
  float* ks = smem + warp * D;                 // [D]: K_j
  float* vs = smem + (kRows + warp) * D;       // [D]: V_j
  float* qt = smem + 2 * kRows * D;            // [kTile][D + 1]: Q tile
  float* gt = qt + kTile * (D + 1);            // [kTile][D + 1]: dO tile
  float* lse_t = gt + kTile * (D + 1);         // [kTile]
  float* delta_t = lse_t + kTile;              // [kTile]
  if (valid) {
    LoadRow(Head<T>(k, b, kvh), k.stride[2], k.stride[3], j, D, lane, ks);
    LoadRow(Head<T>(v, b, kvh), v.stride[2], v.stride[3], j, D, lane, vs);
  }
  // Causal: the block's first key row sees queries from row0 on.
  const int64_t q_start = dims.causal ? row0 / kTile * kTile : 0;

  float dk_acc[L], dv_acc[L];
#pragma unroll
  for (int e = 0; e < L; ++e) dk_acc[e] = dv_acc[e] = 0.0f;
  // One loop over (query head of the group, query tile), heads outer, with
  // 32-bit counters and the head's pointers formed where they are used: two
  // nested 64-bit loops holding four pointers pushed the kernel past 64
  // registers and into spills (tools/cuda/check_resources.sh). Same order of
  // accumulation, so the same bits.
  const int tiles = static_cast<int>((seq - q_start + kTile - 1) / kTile);
  const int steps = static_cast<int>(G) * tiles;
  for (int step = 0; step < steps; ++step) {
    const int64_t h = kvh * G + step / tiles;
    const int64_t q0 = q_start + static_cast<int64_t>(step % tiles) * kTile;
    {
      __syncthreads();
      LoadTile(Head<T>(q, b, h), q.stride[2], q.stride[3], q0, seq, D, qt);
      LoadTile(Head<T>(dout, b, h), dout.stride[2], dout.stride[3], q0, seq, D, gt);
      if (threadIdx.x < kTile) {
        const int64_t t = q0 + threadIdx.x;
        const float* lp = static_cast<const float*>(lse.data) + b * lse.stride[0] + h * lse.stride[1];
        const float* dp = delta + (b * dims.heads + h) * seq;
        lse_t[threadIdx.x] = t < seq ? lp[t * lse.stride[2]] : 0.0f;
        delta_t[threadIdx.x] = t < seq ? dp[t] : 0.0f;
      }
      __syncthreads();
      if (!valid || (dims.causal && q0 + kTile - 1 < j)) continue;  // warp-uniform
      const int64_t i = q0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < seq && AttentionVisible(i, j, dims.causal)) {
        const float s = AttentionScore(Dot(qt + lane * (D + 1), ks, D), dims.scale);
        p = AttentionProb(s, lse_t[lane]);
        ds = AttentionScoreGrad(p, Dot(gt + lane * (D + 1), vs, D), delta_t[lane]);
      }
      const int in = seq - q0 < kTile ? static_cast<int>(seq - q0) : kTile;
      for (int ii = 0; ii < in; ++ii) {
        Axpy(dv_acc, __shfl_sync(kFull, p, ii), gt + ii * (D + 1), D, lane);
        Axpy(dk_acc, __shfl_sync(kFull, ds, ii), qt + ii * (D + 1), D, lane);
      }
    }
  }
  if (!valid) return;
  StoreRow(MutableHead<T>(dk, b, kvh), dk.stride[2], dk.stride[3], j, D, lane, dk_acc, dims.scale);
  StoreRow(MutableHead<T>(dv, b, kvh), dv.stride[2], dv.stride[3], j, D, lane, dv_acc, 1.0f);
}

// ---------------------------------------------------------------- launch helpers

// Calls fn.template operator()<L>() for L = AttentionLanes(D) in {1, 2, 4, 8}.
template <typename Fn>
int DispatchLanes(int64_t head_dim, Fn&& fn) {
  switch (AttentionLanes(head_dim)) {
    case 1: return fn.template operator()<1>();
    case 2: return fn.template operator()<2>();
    case 4: return fn.template operator()<4>();
    case 8: return fn.template operator()<8>();
    default: return InvalidValue();
  }
}

// The grid of the row kernels over `heads` heads per batch element (H for the
// query-row kernels, Hkv for dK/dV), or false for a shape it cannot hold.
bool RowGrid(const AttentionLaunchDims& dims, int64_t heads, dim3* grid) {
  if (dims.head_dim < 1 || dims.head_dim > kAttentionMaxHeadDim) return false;
  int64_t blocks = 0, row_blocks = 0;
  if (!AttentionGridSize(dims, heads, kRows, &blocks, &row_blocks)) return false;
  *grid = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(row_blocks));
  return true;
}

}  // namespace

int LaunchAttentionForward(int dtype, const AttentionLaunchDims& dims, AttentionOperand q,
                           AttentionOperand k, AttentionOperand v, AttentionOperand out,
                           AttentionOperand lse, void* stream) {
  dim3 grid;
  if (!RowGrid(dims, dims.heads, &grid)) return InvalidValue();
  if (grid.x == 0 || grid.y == 0) return 0;
  const int64_t smem = AttentionForwardSharedBytes(dims.head_dim);
  return DispatchFloat(dtype, [&]<typename T>() {
    return DispatchLanes(dims.head_dim, [&]<int L>() {
      if (int err = AllowDynamicSharedBytes(ForwardKernel<T, L>, smem); err != 0) return err;
      Launch(ForwardKernel<T, L>, grid, kThreads, smem, AsStream(stream), dims, q, k, v, out, lse);
      return Launched();
    });
  });
}

int LaunchAttentionBackward(int dtype, const AttentionLaunchDims& dims, AttentionOperand dout,
                            AttentionOperand q, AttentionOperand k, AttentionOperand v,
                            AttentionOperand out, AttentionOperand lse, AttentionOperand dq,
                            AttentionOperand dk, AttentionOperand dv, float* delta,
                            void* stream) {
  dim3 grid, kv_grid;
  if (!RowGrid(dims, dims.heads, &grid)) return InvalidValue();
  if (!RowGrid(dims, AttentionKvHeads(dims), &kv_grid)) return InvalidValue();
  if (grid.x == 0 || grid.y == 0) return 0;
  if (delta == nullptr) return InvalidValue();
  const int64_t rows = dims.batch * dims.heads * dims.seq;
  const int64_t delta_blocks = (rows + kRows - 1) / kRows;
  if (delta_blocks > INT_MAX) return InvalidValue();
  const int64_t smem = AttentionBackwardSharedBytes(dims.head_dim);
  const cudaStream_t s = AsStream(stream);
  return DispatchFloat(dtype, [&]<typename T>() {
    Launch(DeltaKernel<T>, static_cast<unsigned>(delta_blocks), kThreads, 0, s, dims, dout, out,
           delta);
    if (int err = Launched(); err != 0) return err;
    return DispatchLanes(dims.head_dim, [&]<int L>() {
      if (int err = AllowDynamicSharedBytes(DqKernel<T, L>, smem); err != 0) return err;
      if (int err = AllowDynamicSharedBytes(DkvKernel<T, L>, smem); err != 0) return err;
      Launch(DqKernel<T, L>, grid, kThreads, smem, s, dims, dout, q, k, v, lse, dq, delta);
      if (int err = Launched(); err != 0) return err;
      Launch(DkvKernel<T, L>, kv_grid, kThreads, smem, s, dims, dout, q, k, v, lse, dk, dv, delta);
      return Launched();
    });
  });
}

}  // namespace zeroshard::cuda
