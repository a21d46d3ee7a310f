// Host launchers of our own CUDA attention kernels (kernels/cuda/attention.cu),
// callable from plain C++: the fallback when cuDNN's fused attention is
// missing or refuses a case, and the reference it is tested against. The math
// is kernels/attention.h's; the per-element pieces are
// kernels/math/attention_math.h (online softmax, scaling, score gradient),
// shared with the CPU.
//
//   AttentionLaunchDims dims{.batch = B, .heads = H, .seq = T, .head_dim = D,
//                            .scale = 0.125f, .causal = true};
//   AttentionOperand q{q.raw_data(), {q.stride(0), q.stride(1), q.stride(2), q.stride(3)}};
//   ... k, v, out likewise; lse: {lse.raw_data(), {ls0, ls1, ls2, 0}} ...
//   int err = LaunchAttentionForward(static_cast<int>(DType::kBF16), dims, q, k, v, out, lse, stream);
//
// Shapes: q, out, dout, dq are [B, H, T, D] and k, v, dk, dv [B, Hkv, T, D]
// (Hkv = kv_heads dividing H; query head h reads kv head h / (H / Hkv), Note
// [Grouped-query attention] in kernels/attention.h), of one float dtype
// (dtype code as static_cast<int>(DType)), any element strides (unit stride
// in D is the fast case); lse and delta are f32 [B, H, T] (stride[3] unused).
// Accumulation is fp32. D <= kAttentionMaxHeadDim. Outputs must not alias
// inputs. Deterministic: no atomics, a fixed order of every sum.
//
// Work split (see attention.cu): the forward runs one warp per query row, the
// keys in tiles of 32 (one key per lane) with the online softmax. The
// backward is three launches: delta_i = dO_i . O_i per row; dQ one warp per
// query row over key tiles; dK and dV one warp per key row of a kv head over
// the query tiles of each of its H / Hkv query heads in turn (so no two warps
// add into one gradient row, and a group's sum has a fixed order).
//
// Enqueued on `stream` (a cudaStream_t; null = the legacy default stream).
// Returns a cudaError_t as int (0 = success; cudaErrorInvalidValue for a
// shape the kernels do not take).
#ifndef ZEROSHARD_KERNELS_CUDA_ATTENTION_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_ATTENTION_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

inline constexpr int64_t kAttentionMaxHeadDim = 256;
// Query (or key) rows per thread block: one warp each.
inline constexpr int kAttentionRowsPerBlock = 8;
// Keys (or queries) per tile: one per lane.
inline constexpr int kAttentionTile = 32;

struct AttentionLaunchDims {
  int64_t batch = 0;
  int64_t heads = 0;     // H, of q
  int64_t kv_heads = 0;  // Hkv, of k and v, dividing H; 0 means H (no grouping)
  int64_t seq = 0;       // T
  int64_t head_dim = 0;  // D
  float scale = 1.0f;
  bool causal = true;
};

// Hkv: kv_heads, or heads when kv_heads is 0.
inline constexpr int64_t AttentionKvHeads(const AttentionLaunchDims& d) {
  return d.kv_heads > 0 ? d.kv_heads : d.heads;
}

// The grid of an attention launch over `heads` heads per batch element (H for
// the query-row kernels, Hkv for dK/dV) in blocks of `rows` rows: *blocks x
// *row_blocks, or false for dims no kernel takes (negative sizes, Hkv not
// dividing H, more than INT_MAX x 65535 blocks). Each kernel family checks its
// own head dims.
inline constexpr bool AttentionGridSize(const AttentionLaunchDims& dims, int64_t heads, int64_t rows,
                                        int64_t* blocks, int64_t* row_blocks) {
  if (dims.batch < 0 || dims.heads < 0 || dims.kv_heads < 0 || dims.seq < 0 || heads < 0) return false;
  const int64_t kv_heads = AttentionKvHeads(dims);
  if (kv_heads == 0 ? dims.heads != 0 : dims.heads % kv_heads != 0) return false;
  *blocks = dims.batch * heads;
  *row_blocks = (dims.seq + rows - 1) / rows;
  return *blocks <= 2147483647 && *row_blocks <= 65535;
}

// One [B, H, T, D] (or [B, H, T]) tensor: base pointer and element strides.
struct AttentionOperand {
  const void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
};

// Launch configuration, plain C++ so that host tests check it. Each lane
// holds AttentionLanes(D) elements of a row (dims lane, lane + 32, ...): the
// next power of two >= ceil(D / 32). Shared memory (floats): the block's own
// rows (one or two vectors of D per warp), a tile of 32 rows of one or two
// operands padded to D + 1 (no bank conflicts when lane l reads row l), and
// the tile's lse and delta in the backward.
inline constexpr int AttentionLanes(int64_t head_dim) {
  const int64_t per = (head_dim + 31) / 32;
  int lanes = 1;
  while (lanes < per) lanes *= 2;
  return lanes;
}
inline constexpr int64_t AttentionForwardSharedBytes(int64_t head_dim) {
  return 4 * (kAttentionRowsPerBlock * head_dim + 2 * kAttentionTile * (head_dim + 1));
}
inline constexpr int64_t AttentionBackwardSharedBytes(int64_t head_dim) {
  return 4 * (2 * kAttentionRowsPerBlock * head_dim + 2 * kAttentionTile * (head_dim + 1) +
              2 * kAttentionTile);
}

// out = softmax(scale q k^T + mask) v, lse = the rows' log-sum-exp.
int LaunchAttentionForward(int dtype, const AttentionLaunchDims& dims, AttentionOperand q,
                           AttentionOperand k, AttentionOperand v, AttentionOperand out,
                           AttentionOperand lse, void* stream);

// dq, dk, dv from dout, the forward's inputs, out and lse. `delta` is f32
// scratch of B * H * T floats (contiguous), written and read by the launches.
int LaunchAttentionBackward(int dtype, const AttentionLaunchDims& dims, AttentionOperand dout,
                            AttentionOperand q, AttentionOperand k, AttentionOperand v,
                            AttentionOperand out, AttentionOperand lse, AttentionOperand dq,
                            AttentionOperand dk, AttentionOperand dv, float* delta, void* stream);

// ---------------------------------------------------------------- tensor cores
// Our flash-style kernels on the tensor cores (kernels/cuda/attention_tc.cu,
// Note [Tensor-core attention] there): bf16 or f16, head dim a multiple of 16 up to 128, unit
// stride along D, every pointer and row stride 16-byte aligned (the caller
// checks: kernels/cuda/attention_select.h's TensorCoreAttentionRefusal). The
// same shapes, layouts and math as the kernels above, except that the score
// and gradient products run on the tensor cores (bf16/f16 inputs, fp32
// accumulation) and the probabilities and score gradients are rounded to the
// input dtype before they meet V, dO, K or Q, as FlashAttention-2 and cuDNN do.
// A block is 4 warps over 64 query (or key) rows, 16 per warp; the other side
// streams through shared memory in tiles of 64 rows.
inline constexpr int kAttentionTcWarps = 4;
inline constexpr int kAttentionTcRows = 16 * kAttentionTcWarps;  // rows per block
inline constexpr int kAttentionTcTile = 64;                      // rows per streamed tile

// Head dims a multiple of the 16-wide matrix tiles, up to 128 (the
// accumulators of dK and dV at 128 take 128 of a thread's 255 registers).
inline constexpr bool AttentionTcHeadDim(int64_t head_dim) {
  return head_dim >= 16 && head_dim <= 128 && head_dim % 16 == 0;
}

// Dynamic shared memory (bytes) of each kernel, 128 bytes of alignment slack
// included: 64-row tiles of 16-bit elements padded to D + 8, per-warp score
// tiles of 16 x 68 floats and probability tiles of 16 x 72 16-bit elements.
inline constexpr int64_t AttentionTcTileBytes(int64_t head_dim) {
  return 2 * kAttentionTcTile * (head_dim + 8);
}
inline constexpr int64_t kAttentionTcScoreBytes = 4 * 16 * (kAttentionTcTile + 4);
inline constexpr int64_t kAttentionTcProbBytes = 2 * 16 * (kAttentionTcTile + 8);
// Forward: q, k and v tiles; per warp a score tile, a probability tile and
// 16 row factors; the 16 x 16 row-index matrix.
inline constexpr int64_t AttentionTcForwardSharedBytes(int64_t head_dim) {
  return 128 + 3 * AttentionTcTileBytes(head_dim) +
         kAttentionTcWarps * (kAttentionTcScoreBytes + kAttentionTcProbBytes + 4 * 32) + 4 * 256;
}
// dQ: the block's q and dO rows, a k and a v tile; per warp two score tiles
// (S and dP) and one probability tile (dS).
inline constexpr int64_t AttentionTcDqSharedBytes(int64_t head_dim) {
  return 128 + 4 * AttentionTcTileBytes(head_dim) +
         kAttentionTcWarps * (2 * kAttentionTcScoreBytes + kAttentionTcProbBytes);
}
// dK/dV: the block's k and v rows, a q and a dO tile; per warp two score
// tiles and two probability tiles (P and dS, transposed); the tile's lse and
// delta.
inline constexpr int64_t AttentionTcDkvSharedBytes(int64_t head_dim) {
  return 128 + 4 * AttentionTcTileBytes(head_dim) +
         kAttentionTcWarps * (2 * kAttentionTcScoreBytes + 2 * kAttentionTcProbBytes) +
         2 * 4 * kAttentionTcTile;
}

// As LaunchAttentionForward / LaunchAttentionBackward, on the tensor cores.
// cudaErrorInvalidValue for a call outside the shapes above. The backward
// writes delta (B * H * T floats) in its dQ launch and reads it in its dK/dV
// launch.
int LaunchAttentionForwardTc(int dtype, const AttentionLaunchDims& dims, AttentionOperand q,
                             AttentionOperand k, AttentionOperand v, AttentionOperand out,
                             AttentionOperand lse, void* stream);
int LaunchAttentionBackwardTc(int dtype, const AttentionLaunchDims& dims, AttentionOperand dout,
                              AttentionOperand q, AttentionOperand k, AttentionOperand v,
                              AttentionOperand out, AttentionOperand lse, AttentionOperand dq,
                              AttentionOperand dk, AttentionOperand dv, float* delta,
                              void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_ATTENTION_LAUNCH_H_
