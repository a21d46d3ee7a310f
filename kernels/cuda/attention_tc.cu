// Our flash-style attention on the tensor cores, forward and backward (see
// attention_launch.h): the fallback of cuDNN's fused attention for bf16 and
// f16 at head dims that are multiples of 16 up to 128, where attention.cu's scalar kernels (one dot
// product per lane in fp32, about 3 TFLOP/s on an H100) are the reference.
//
// Note [Tensor-core attention]
// The matrix products run through the warp matrix API (nvcuda::wmma, 16 x 16
// x 16 tiles, bf16/f16 inputs, fp32 accumulation), which the CUDA simulator
// emulates (tools/cuda/sim/include/mma.h), so `make sim-test` runs these very
// kernels. The softmax and the score gradient are attention_math.h's, shared
// with the CPU and the scalar kernels, with the hardware's exponential
// (ExpFast there: a tenth of the correctly rounded ExpF's instructions; with
// ExpF the exponentials, 1024 per warp and tile, would take several times the
// tile's tensor-core time).
//
// Registers: the loops over columns and over 16-wide blocks stay rolled
// (`#pragma unroll 1`), so that the D-wide accumulator fragments (128
// registers for dK and dV at D = 128) keep theirs without spills
// (tools/cuda/check_resources.sh, at most 255 here: 128-thread blocks).
//
// Work split, as FlashAttention-2 splits it: a block of 4 warps owns 64 rows
// (queries for the forward and dQ, keys of one kv head for dK/dV), 16 per
// warp; the other side streams through shared memory in tiles of 64 rows
// loaded with 16-byte vectors. Per tile a warp
//   forward:  S = Q K^T (16 x 64, to shared memory as fp32); its lanes run the
//             online softmax over S, two lanes per row, and write P rounded to
//             the input dtype; O = c O + P V stays in accumulator fragments.
//   dQ:       S = Q K^T and dP = dO V^T (Q and dO read from shared memory,
//             which keeps the D-wide accumulators in registers without spills);
//             dS = P (dP - delta) rounded to the
//             input dtype; dQ += dS K in accumulator fragments.
//   dK, dV:   S^T = K Q^T and dP^T = V dO^T; dV += P^T dO, dK += dS^T Q, over
//             the query tiles of each query head of the kv head's group in
//             turn (no two blocks add into one gradient row, no atomics).
// delta_i = dO_i . O_i is computed by the dQ launch, which writes it for the
// dK/dV launch (two launches in all).
//
// The row-wise factors (the online softmax's rescale c, 1 / l, the score
// scale) meet accumulator fragments whose lane layout the API leaves
// unspecified. A fragment loaded from the 16 x 16 matrix of row indices holds,
// at every position, the row that position holds in every accumulator
// fragment of that type, so `x[e] *= factor[row.x[e]]` scales rows without
// knowing the layout.
//
// Numerics against the scalar kernels: the products accumulate in fp32 in the
// tensor cores' order (not a fixed one, but a given launch shape on a given
// card gives the same bits every run: no atomics, fixed loops); P and dS are
// rounded to bf16 (2^-9 relative) or f16 (2^-12) before their products, the
// one error the scalar kernels do not have; the row sum l is taken over P
// before rounding, as FlashAttention-2 takes it, so lse keeps fp32 accuracy.
// Tests bound the difference from the math (tests/kernels/cuda_attention_test.cc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>

#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/math/attention_math.h"

namespace zeroshard::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = kAttentionTcWarps;
constexpr int kRows = kAttentionTcRows;  // rows per block
constexpr int kTile = kAttentionTcTile;  // rows per streamed tile
constexpr int kThreads = kWarps * kWarp;
constexpr int kSLd = kTile + 4;  // floats per row of a warp's 16 x 64 score tile
constexpr int kPLd = kTile + 8;  // elements per row of a warp's 16 x 64 probability tile
constexpr unsigned kFull = 0xffffffffu;
static_assert(kRows == kTile, "dK/dV's causal start assumes blocks and tiles of the same rows");
static_assert(kTile == 64, "a lane owns half of a 64-column row: 32 columns");

template <typename T>
struct WmmaType;
template <>
struct WmmaType<BFloat16> {
  using type = __nv_bfloat16;
};
template <>
struct WmmaType<Float16> {
  using type = __half;
};
template <typename T>
using WT = typename WmmaType<T>::type;

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, WT<T>, wmma::row_major>;
template <typename T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, WT<T>, wmma::row_major>;
template <typename T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, WT<T>, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Our 16-bit storage types have the device types' bits.
template <typename T>
__device__ __forceinline__ const WT<T>* AsWmma(const T* p) {
  static_assert(sizeof(T) == sizeof(WT<T>), "same 16 bits");
  return reinterpret_cast<const WT<T>*>(p);
}

// Bump allocation of the launch's dynamic shared memory, from a 128-byte
// aligned start (the matrix loads need 32-byte aligned pointers; every
// region's size below is a multiple of 128 bytes).
struct Carve {
  unsigned char* p;
  template <typename U>
  __device__ __forceinline__ U* Take(int64_t count) {
    U* r = reinterpret_cast<U*>(p);
    p += count * static_cast<int64_t>(sizeof(U));
    return r;
  }
  // kWarps regions of `per_warp` elements; returns warp `warp`'s.
  template <typename U>
  __device__ __forceinline__ U* TakePerWarp(int64_t per_warp, int warp) {
    return Take<U>(kWarps * per_warp) + warp * per_warp;
  }
};

__device__ __forceinline__ Carve SharedCarve() {
  ZS_DYNAMIC_SHARED(unsigned char, raw);
  const uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + 127) & ~uintptr_t{127};
  return Carve{reinterpret_cast<unsigned char*>(a)};
}

template <typename T>
__device__ __forceinline__ const T* HeadTc(const AttentionOperand& o, int64_t b, int64_t h) {
  return static_cast<const T*>(o.data) + b * o.stride[0] + h * o.stride[1];
}

// Rows [r0, r0 + 64) of a head (row stride s2, unit stride along D, rows
// 16-byte aligned) into dst[64][D + 8] in 16-byte vectors; rows past seq are
// zeros (so a masked score's P, 0, never meets garbage). Whole block.
template <typename T, int D>
__device__ __forceinline__ void LoadTileTc(const T* base, int64_t s2, int64_t r0, int64_t seq,
                                           T* dst) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const int64_t t = r0 + r;
    Vec16<T> v;
    if (t < seq) {
      v = LoadVec16(base + t * s2 + c);
    } else {
#pragma unroll
      for (int e = 0; e < Vec16<T>::kN; ++e) v.v[e] = FromFloat<T>(0.0f);
    }
    StoreVec16(dst + r * (D + 8) + c, v);
  }
}

// x[e] *= factor[row of x[e]] (Note [Tensor-core attention]).
__device__ __forceinline__ void ScaleRows(FragC& f, const FragC& rows, const float* factor) {
#pragma unroll
  for (int e = 0; e < f.num_elements; ++e) f.x[e] *= factor[static_cast<int>(rows.x[e])];
}

// acc[n] = A (16 x D, fragments a) . B^T for four 16-row blocks of B (a
// [64][D + 8] tile): a 16 x 64 product, stored to dst[16][kSLd].
template <typename T, int D>
__device__ __forceinline__ void RowsTimesTileT(const FragA<T> (&a)[D / 16], const T* tile,
                                               float* dst) {
#pragma unroll 1
  for (int nb = 0; nb < kTile / 16; ++nb) {
    FragC s;
    wmma::fill_fragment(s, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragBCol<T> bt;
      wmma::load_matrix_sync(bt, AsWmma(tile + nb * 16 * (D + 8) + kk * 16), D + 8);
      wmma::mma_sync(s, a[kk], bt, s);
    }
    wmma::store_matrix_sync(dst + nb * 16, s, kSLd, wmma::mem_row_major);
  }
}

// As RowsTimesTileT with A read from shared memory (16 rows at `rows`, ld D +
// 8) for each 16-column block: the backward kernels hold D-wide accumulators,
// and A's fragments in registers beside them would spill at D = 128.
template <typename T, int D>
__device__ __forceinline__ void SharedRowsTimesTileT(const T* rows, const T* tile, float* dst) {
#pragma unroll 1
  for (int nb = 0; nb < kTile / 16; ++nb) {
    FragC s;
    wmma::fill_fragment(s, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA<T> a;
      FragBCol<T> bt;
      wmma::load_matrix_sync(a, AsWmma(rows + kk * 16), D + 8);
      wmma::load_matrix_sync(bt, AsWmma(tile + nb * 16 * (D + 8) + kk * 16), D + 8);
      wmma::mma_sync(s, a, bt, s);
    }
    wmma::store_matrix_sync(dst + nb * 16, s, kSLd, wmma::mem_row_major);
  }
}

// acc[nd] += P (16 x 64 at p, ld kPLd) . tile (64 x D, ld D + 8).
template <typename T, int D>
__device__ __forceinline__ void ProbTimesTile(const T* p, const T* tile, FragC (&acc)[D / 16]) {
#pragma unroll 1
  for (int kk = 0; kk < kTile / 16; ++kk) {
    FragA<T> a;
    wmma::load_matrix_sync(a, AsWmma(p + kk * 16), kPLd);
#pragma unroll
    for (int nd = 0; nd < D / 16; ++nd) {
      FragBRow<T> bm;
      wmma::load_matrix_sync(bm, AsWmma(tile + kk * 16 * (D + 8) + nd * 16), D + 8);
      wmma::mma_sync(acc[nd], a, bm, acc[nd]);
    }
  }
}

// Writes the warp's 16 x D result rows (row r at dst + (row0 + r) * s2, rows
// past seq skipped) through `scratch` (16 x kSLd floats). Lane l writes 8
// columns of row l / 2.
template <typename T, int D>
__device__ __forceinline__ void StoreRowsTc(const FragC (&acc)[D / 16], float* scratch, T* dst,
                                            int64_t s2, int64_t row0, int64_t seq, int lane) {
  const int r = lane / 2, half = lane % 2;
  const int64_t t = row0 + r;
#pragma unroll
  for (int nd = 0; nd < D / 16; ++nd) {
    wmma::store_matrix_sync(scratch, acc[nd], kSLd, wmma::mem_row_major);
    __syncwarp();
    if (t < seq) {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        dst[t * s2 + nd * 16 + half * 8 + c] = FromFloat<T>(scratch[r * kSLd + half * 8 + c]);
      }
    }
    __syncwarp();
  }
}

// Keys any row of [first, first + count) sees (count rows, clipped to seq).
__device__ __forceinline__ int64_t RowsKeys(const AttentionLaunchDims& dims, int64_t first,
                                            int64_t count) {
  if (first >= dims.seq) return 0;
  const int64_t last = (first + count < dims.seq ? first + count : dims.seq) - 1;
  return AttentionVisibleCount(last, dims.seq, dims.causal);
}

// ---------------------------------------------------------------- forward

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    ForwardTc(AttentionLaunchDims dims, AttentionOperand q, AttentionOperand k,
              AttentionOperand v, AttentionOperand out, AttentionOperand lse) {
  constexpr int kNd = D / 16;
  Carve carve = SharedCarve();
  T* qs = carve.Take<T>(kTile * (D + 8));
  T* ks = carve.Take<T>(kTile * (D + 8));
  T* vs = carve.Take<T>(kTile * (D + 8));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* scores = carve.TakePerWarp<float>(16 * kSLd, warp);
  T* probs = carve.TakePerWarp<T>(16 * kPLd, warp);
  float* factor = carve.TakePerWarp<float>(32, warp);
  float* row_index = carve.Take<float>(256);

  const int64_t seq = dims.seq;
  const int64_t b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int64_t kvh = h / (dims.heads / AttentionKvHeads(dims));
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t wrow0 = row0 + warp * 16;
  const int r = lane / 2, half = lane % 2;  // the lane's row and half of the 64 columns
  const int64_t i = wrow0 + r;
  const int64_t visible = i < seq ? AttentionVisibleCount(i, seq, dims.causal) : 0;

  for (int idx = threadIdx.x; idx < 256; idx += kThreads) row_index[idx] = static_cast<float>(idx / 16);
  LoadTileTc<T, D>(HeadTc<T>(q, b, h), q.stride[2], row0, seq, qs);
  __syncthreads();
  FragA<T> qf[kNd];
#pragma unroll
  for (int kk = 0; kk < kNd; ++kk) {
    wmma::load_matrix_sync(qf[kk], AsWmma(qs + warp * 16 * (D + 8) + kk * 16), D + 8);
  }
  FragC rows;
  wmma::load_matrix_sync(rows, row_index, 16, wmma::mem_row_major);
  FragC o[kNd];
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) wmma::fill_fragment(o[nd], 0.0f);

  const T* kp = HeadTc<T>(k, b, kvh);
  const T* vp = HeadTc<T>(v, b, kvh);
  const int64_t block_keys = RowsKeys(dims, row0, kRows);
  const int64_t warp_keys = RowsKeys(dims, wrow0, 16);
  float m = -kInfF, l = 0.0f;
  for (int64_t k0 = 0; k0 < block_keys; k0 += kTile) {
    __syncthreads();  // the previous tiles are consumed
    LoadTileTc<T, D>(kp, k.stride[2], k0, seq, ks);
    LoadTileTc<T, D>(vp, v.stride[2], k0, seq, vs);
    __syncthreads();
    if (k0 >= warp_keys) continue;  // warp-uniform
    RowsTimesTileT<T, D>(qf, ks, scores);
    __syncwarp();
    // The online softmax of row r over this tile (attention_math.h).
    const float* srow = scores + r * kSLd + half * 32;
    T* prow = probs + r * kPLd + half * 32;
    const int64_t j0 = k0 + half * 32;
    float tile_max = -kInfF;
#pragma unroll 1
    for (int c = 0; c < 32; ++c) {
      const float s = j0 + c < visible ? AttentionScore(srow[c], dims.scale) : -kInfF;
      tile_max = MaxF(tile_max, s);
    }
    tile_max = MaxF(tile_max, __shfl_xor_sync(kFull, tile_max, 1));
    const float m_new = AttentionRunningMax(m, tile_max);
    const float rescale = AttentionRescale(m, m_new, ExpFast{});
    float sum = 0.0f;
#pragma unroll 1
    for (int c = 0; c < 32; ++c) {
      const float s = j0 + c < visible ? AttentionScore(srow[c], dims.scale) : -kInfF;
      const float p = AttentionWeight(s, m_new, ExpFast{});
      prow[c] = FromFloat<T>(p);
      sum += p;
    }
    l = l * rescale + (sum + __shfl_xor_sync(kFull, sum, 1));
    m = m_new;
    if (half == 0) factor[r] = rescale;
    __syncwarp();
#pragma unroll
    for (int nd = 0; nd < kNd; ++nd) ScaleRows(o[nd], rows, factor);
    ProbTimesTile<T, D>(probs, vs, o);
  }
  // out = O / l; lse = m + log l (rows past seq: neither).
  __syncwarp();  // the last tile's factors are read
  if (half == 0) factor[r] = i < seq ? 1.0f / l : 0.0f;
  if (half == 0 && i < seq) {
    float* lp = static_cast<float*>(const_cast<void*>(lse.data));
    lp[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]] = AttentionLse(m, l);
  }
  __syncwarp();
  T* op = const_cast<T*>(HeadTc<T>(out, b, h));
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) ScaleRows(o[nd], rows, factor);
  StoreRowsTc<T, D>(o, scores, op, out.stride[2], wrow0, seq, lane);
}

// ---------------------------------------------------------------- backward

// dQ_i = scale sum_j dS_ij K_j over the key tiles; delta_i = dO_i . O_i first,
// written for the dK/dV launch.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    DqTc(AttentionLaunchDims dims, AttentionOperand dout, AttentionOperand q, AttentionOperand k,
         AttentionOperand v, AttentionOperand out, AttentionOperand lse, AttentionOperand dq,
         float* delta) {
  constexpr int kNd = D / 16;
  Carve carve = SharedCarve();
  T* qb = carve.Take<T>(kTile * (D + 8));
  T* gb = carve.Take<T>(kTile * (D + 8));
  T* ks = carve.Take<T>(kTile * (D + 8));
  T* vs = carve.Take<T>(kTile * (D + 8));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* scores = carve.TakePerWarp<float>(16 * kSLd, warp);
  float* dps = carve.TakePerWarp<float>(16 * kSLd, warp);
  T* dss = carve.TakePerWarp<T>(16 * kPLd, warp);

  const int64_t seq = dims.seq;
  const int64_t b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int64_t kvh = h / (dims.heads / AttentionKvHeads(dims));
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t wrow0 = row0 + warp * 16;
  const int r = lane / 2, half = lane % 2;
  const int64_t i = wrow0 + r;
  const int64_t visible = i < seq ? AttentionVisibleCount(i, seq, dims.causal) : 0;

  // Q and dO of the block, kept in shared memory (ordered before their first
  // use by the loop's barriers).
  LoadTileTc<T, D>(HeadTc<T>(q, b, h), q.stride[2], row0, seq, qb);
  LoadTileTc<T, D>(HeadTc<T>(dout, b, h), dout.stride[2], row0, seq, gb);
  const T* qw = qb + warp * 16 * (D + 8);  // the warp's 16 rows
  const T* gw = gb + warp * 16 * (D + 8);
  // delta_i: each lane of row r sums half of D, the pair adds the halves.
  float part = 0.0f, lse_i = 0.0f;
  if (i < seq) {
    const T* g = HeadTc<T>(dout, b, h) + i * dout.stride[2] + half * (D / 2);
    const T* o = HeadTc<T>(out, b, h) + i * out.stride[2] + half * (D / 2);
    for (int d = 0; d < D / 2; ++d) part += ToFloat(g[d]) * ToFloat(o[d]);
    const float* lp = static_cast<const float*>(lse.data);
    lse_i = lp[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]];
  }
  const float delta_i = part + __shfl_xor_sync(kFull, part, 1);  // the same sum on both lanes
  if (half == 0 && i < seq) delta[(b * dims.heads + h) * seq + i] = delta_i;

  FragC acc[kNd];
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) wmma::fill_fragment(acc[nd], 0.0f);
  const T* kp = HeadTc<T>(k, b, kvh);
  const T* vp = HeadTc<T>(v, b, kvh);
  const int64_t block_keys = RowsKeys(dims, row0, kRows);
  const int64_t warp_keys = RowsKeys(dims, wrow0, 16);
  for (int64_t k0 = 0; k0 < block_keys; k0 += kTile) {
    __syncthreads();  // the previous tiles are consumed
    LoadTileTc<T, D>(kp, k.stride[2], k0, seq, ks);
    LoadTileTc<T, D>(vp, v.stride[2], k0, seq, vs);
    __syncthreads();
    if (k0 >= warp_keys) continue;  // warp-uniform
    SharedRowsTimesTileT<T, D>(qw, ks, scores);
    SharedRowsTimesTileT<T, D>(gw, vs, dps);
    __syncwarp();
    const int64_t j0 = k0 + half * 32;
#pragma unroll 1
    for (int c = 0; c < 32; ++c) {
      const int at = r * kSLd + half * 32 + c;
      const float p = j0 + c < visible ? AttentionProb(AttentionScore(scores[at], dims.scale), lse_i, ExpFast{}) : 0.0f;
      dss[r * kPLd + half * 32 + c] = FromFloat<T>(AttentionScoreGrad(p, dps[at], delta_i));
    }
    __syncwarp();
    ProbTimesTile<T, D>(dss, ks, acc);
  }
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) {
#pragma unroll
    for (int e = 0; e < acc[nd].num_elements; ++e) acc[nd].x[e] *= dims.scale;
  }
  StoreRowsTc<T, D>(acc, scores, const_cast<T*>(HeadTc<T>(dq, b, h)),
                    dq.stride[2], wrow0, seq, lane);
}

// dV_j = sum_h sum_i P_ij dO_i and dK_j = scale sum_h sum_i dS_ij Q_i over the
// query heads h of the block's kv head, in order of h, and the query tiles
// (causal: from the block's first key row on).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    DkvTc(AttentionLaunchDims dims, AttentionOperand dout, AttentionOperand q, AttentionOperand k,
          AttentionOperand v, AttentionOperand lse, AttentionOperand dk, AttentionOperand dv,
          const float* delta) {
  constexpr int kNd = D / 16;
  Carve carve = SharedCarve();
  T* kb = carve.Take<T>(kTile * (D + 8));
  T* vb = carve.Take<T>(kTile * (D + 8));
  T* qt = carve.Take<T>(kTile * (D + 8));
  T* gt = carve.Take<T>(kTile * (D + 8));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* scores = carve.TakePerWarp<float>(16 * kSLd, warp);
  float* dps = carve.TakePerWarp<float>(16 * kSLd, warp);
  T* ps = carve.TakePerWarp<T>(16 * kPLd, warp);
  T* dss = carve.TakePerWarp<T>(16 * kPLd, warp);
  float* lse_t = carve.Take<float>(kTile);
  float* delta_t = carve.Take<float>(kTile);

  const int64_t seq = dims.seq;
  const int64_t kv_heads = AttentionKvHeads(dims), group = dims.heads / kv_heads;
  const int64_t b = blockIdx.x / kv_heads, kvh = blockIdx.x % kv_heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t wrow0 = row0 + warp * 16;
  const int r = lane / 2, half = lane % 2;  // the lane's key row and half of the 64 queries
  const int64_t j = wrow0 + r;

  LoadTileTc<T, D>(HeadTc<T>(k, b, kvh), k.stride[2], row0, seq, kb);
  LoadTileTc<T, D>(HeadTc<T>(v, b, kvh), v.stride[2], row0, seq, vb);
  const T* kw = kb + warp * 16 * (D + 8);  // the warp's 16 key rows
  const T* vw = vb + warp * 16 * (D + 8);
  FragC dk_acc[kNd], dv_acc[kNd];
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) {
    wmma::fill_fragment(dk_acc[nd], 0.0f);
    wmma::fill_fragment(dv_acc[nd], 0.0f);
  }
  const int64_t q_start = dims.causal ? row0 : 0;  // row0 is a multiple of kTile
  const int tiles = static_cast<int>((seq - q_start + kTile - 1) / kTile);
  const int steps = static_cast<int>(group) * tiles;
  for (int step = 0; step < steps; ++step) {
    const int64_t h = kvh * group + step / tiles;
    const int64_t q0 = q_start + static_cast<int64_t>(step % tiles) * kTile;
    __syncthreads();  // the previous tiles are consumed (first: k and v written)
    LoadTileTc<T, D>(HeadTc<T>(q, b, h), q.stride[2], q0, seq, qt);
    LoadTileTc<T, D>(HeadTc<T>(dout, b, h), dout.stride[2], q0, seq, gt);
    if (threadIdx.x < kTile) {
      const int64_t t = q0 + threadIdx.x;
      const float* lp = static_cast<const float*>(lse.data) + b * lse.stride[0] + h * lse.stride[1];
      const float* dp = delta + (b * dims.heads + h) * seq;
      lse_t[threadIdx.x] = t < seq ? lp[t * lse.stride[2]] : 0.0f;
      delta_t[threadIdx.x] = t < seq ? dp[t] : 0.0f;
    }
    __syncthreads();
    // warp-uniform: no key of the warp, or no query of the tile sees them
    if (wrow0 >= seq || (dims.causal && q0 + kTile - 1 < wrow0)) continue;
    SharedRowsTimesTileT<T, D>(kw, qt, scores);  // S^T: keys x queries
    SharedRowsTimesTileT<T, D>(vw, gt, dps);     // dP^T
    __syncwarp();
#pragma unroll 1
    for (int c = 0; c < 32; ++c) {
      const int col = half * 32 + c;
      const int64_t iq = q0 + col;
      const int at = r * kSLd + col;
      const bool seen = j < seq && iq < seq && AttentionVisible(iq, j, dims.causal);
      const float p = seen ? AttentionProb(AttentionScore(scores[at], dims.scale), lse_t[col], ExpFast{}) : 0.0f;
      ps[r * kPLd + col] = FromFloat<T>(p);
      dss[r * kPLd + col] = FromFloat<T>(AttentionScoreGrad(p, dps[at], delta_t[col]));
    }
    __syncwarp();
    ProbTimesTile<T, D>(ps, gt, dv_acc);
    ProbTimesTile<T, D>(dss, qt, dk_acc);
  }
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) {
#pragma unroll
    for (int e = 0; e < dk_acc[nd].num_elements; ++e) dk_acc[nd].x[e] *= dims.scale;
  }
  StoreRowsTc<T, D>(dk_acc, scores, const_cast<T*>(HeadTc<T>(dk, b, kvh)),
                    dk.stride[2], wrow0, seq, lane);
  StoreRowsTc<T, D>(dv_acc, scores, const_cast<T*>(HeadTc<T>(dv, b, kvh)),
                    dv.stride[2], wrow0, seq, lane);
}

// ---------------------------------------------------------------- launch helpers

// Calls fn.template operator()<T, D>() for a 16-bit dtype code and D a
// multiple of 16 up to 128 (AttentionTcHeadDim).
template <typename Fn>
int DispatchTc(int dtype, int64_t head_dim, Fn&& fn) {
  auto by_dim = [&]<typename T>() {
    switch (head_dim) {
      case 16: return fn.template operator()<T, 16>();
      case 32: return fn.template operator()<T, 32>();
      case 48: return fn.template operator()<T, 48>();
      case 64: return fn.template operator()<T, 64>();
      case 80: return fn.template operator()<T, 80>();
      case 96: return fn.template operator()<T, 96>();
      case 112: return fn.template operator()<T, 112>();
      case 128: return fn.template operator()<T, 128>();
      default: return InvalidValue();
    }
  };
  switch (dtype) {
    case kBF16: return by_dim.template operator()<BFloat16>();
    case kF16: return by_dim.template operator()<Float16>();
    default: return InvalidValue();
  }
}

// The operand's layout the kernels assume: unit stride along D, base and
// strides 16-byte aligned (2-byte elements), the strides of size-1 dims
// excepted (never multiplied by anything but 0), as DescribeCall in
// kernels/attention.cc judges them. `heads`: the operand's (H or Hkv).
bool TcOperand(const AttentionOperand& o, const AttentionLaunchDims& dims, int64_t heads) {
  if (o.data == nullptr) return false;
  if (dims.head_dim > 1 && o.stride[3] != 1) return false;
  if (reinterpret_cast<uintptr_t>(o.data) % 16 != 0) return false;
  const int64_t sizes[3] = {dims.batch, heads, dims.seq};
  for (int d = 0; d < 3; ++d) {
    if (sizes[d] > 1 && (o.stride[d] * 2) % 16 != 0) return false;
  }
  return true;
}

// The grid over `heads` heads per batch element, or false for a call the
// kernels do not take.
bool TcGrid(const AttentionLaunchDims& dims, int64_t heads, dim3* grid) {
  if (!AttentionTcHeadDim(dims.head_dim)) return false;
  int64_t blocks = 0, row_blocks = 0;
  if (!AttentionGridSize(dims, heads, kRows, &blocks, &row_blocks)) return false;
  *grid = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(row_blocks));
  return true;
}

}  // namespace

int LaunchAttentionForwardTc(int dtype, const AttentionLaunchDims& dims, AttentionOperand q,
                             AttentionOperand k, AttentionOperand v, AttentionOperand out,
                             AttentionOperand lse, void* stream) {
  dim3 grid;
  if (!TcGrid(dims, dims.heads, &grid)) return InvalidValue();
  if (grid.x == 0 || grid.y == 0) return 0;
  const int64_t kv_heads = AttentionKvHeads(dims);
  for (const AttentionOperand* o : {&q, &out}) {
    if (!TcOperand(*o, dims, dims.heads)) return InvalidValue();
  }
  for (const AttentionOperand* o : {&k, &v}) {
    if (!TcOperand(*o, dims, kv_heads)) return InvalidValue();
  }
  const int64_t smem = AttentionTcForwardSharedBytes(dims.head_dim);
  return DispatchTc(dtype, dims.head_dim, [&]<typename T, int D>() {
    if (int err = AllowDynamicSharedBytes(ForwardTc<T, D>, smem); err != 0) return err;
    Launch(ForwardTc<T, D>, grid, kThreads, smem, AsStream(stream), dims, q, k, v, out, lse);
    return Launched();
  });
}

int LaunchAttentionBackwardTc(int dtype, const AttentionLaunchDims& dims, AttentionOperand dout,
                              AttentionOperand q, AttentionOperand k, AttentionOperand v,
                              AttentionOperand out, AttentionOperand lse, AttentionOperand dq,
                              AttentionOperand dk, AttentionOperand dv, float* delta,
                              void* stream) {
  dim3 grid, kv_grid;
  if (!TcGrid(dims, dims.heads, &grid)) return InvalidValue();
  if (!TcGrid(dims, AttentionKvHeads(dims), &kv_grid)) return InvalidValue();
  if (grid.x == 0 || grid.y == 0) return 0;
  if (delta == nullptr) return InvalidValue();
  const int64_t kv_heads = AttentionKvHeads(dims);
  for (const AttentionOperand* o : {&dout, &q, &out, &dq}) {
    if (!TcOperand(*o, dims, dims.heads)) return InvalidValue();
  }
  for (const AttentionOperand* o : {&k, &v, &dk, &dv}) {
    if (!TcOperand(*o, dims, kv_heads)) return InvalidValue();
  }
  const int64_t dq_smem = AttentionTcDqSharedBytes(dims.head_dim);
  const int64_t dkv_smem = AttentionTcDkvSharedBytes(dims.head_dim);
  const cudaStream_t s = AsStream(stream);
  return DispatchTc(dtype, dims.head_dim, [&]<typename T, int D>() {
    if (int err = AllowDynamicSharedBytes(DqTc<T, D>, dq_smem); err != 0) return err;
    if (int err = AllowDynamicSharedBytes(DkvTc<T, D>, dkv_smem); err != 0) return err;
    Launch(DqTc<T, D>, grid, kThreads, dq_smem, s, dims, dout, q, k, v, out, lse, dq, delta);
    if (int err = Launched(); err != 0) return err;
    Launch(DkvTc<T, D>, kv_grid, kThreads, dkv_smem, s, dims, dout, q, k, v, lse, dk, dv, delta);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
