// Rotary position embedding (RoPE), Llama's rotate-half convention, and its
// cos/sin tables (with Llama 3's frequency scaling).
//
//   ZS_ASSIGN_OR_RETURN(RopeTables tables,
//                       MakeRopeTables({.theta = 500000.0, .llama3 = Llama3RopeScaling{}},
//                                      /*max_positions=*/8192, /*head_dim=*/128, &gpu));
//   // q [B, T, H, D] -> q rotated, in place:
//   ZS_RETURN_IF_ERROR(RopeApply(q, tables, q));
//   // backward: dq = the inverse rotation of dq_rotated
//   ZS_RETURN_IF_ERROR(RopeApply(dq_rot, tables, dq, /*inverse=*/true));
//
// For each head vector x [D] at position p and i < D/2, with a = p inv_freq[i]:
//   out[i]       = x[i] cos a - x[i + D/2] sin a
//   out[i + D/2] = x[i + D/2] cos a + x[i] sin a
// which is transformers' q * cos + rotate_half(q) * sin (LlamaRotaryEmbedding,
// apply_rotary_pos_emb). inv_freq[i] = theta^(-2i/D); with `llama3`, scaled as
// transformers' _compute_llama3_parameters does (wavelen = 2 pi / inv_freq):
//   wavelen > original / low_freq_factor   -> inv_freq / factor
//   wavelen < original / high_freq_factor  -> inv_freq
//   otherwise, smooth = (original / wavelen - low) / (high - low):
//                                             (1 - smooth) inv_freq / factor + smooth inv_freq
// The tables are computed on the host in double (angles, cos and sin) and each
// value rounded once to f32 (transformers computes the angles in f32: for
// positions in the thousands ours are the more accurate by ~1e-4 radians).
// The rotation is fp32, each result rounded once into out's dtype; per-element
// math in kernels/math/rope_ops.h.
//
// Rules (each violation is an InvalidArgument saying what was found):
// - x and out are [B, T, H, D], one shape, float (f32/bf16/f16, any mix), any
//   strides; out may be exactly x (in place), no other overlap.
// - D even, D / 2 the tables' second dimension; T <= the tables' rows
//   (positions 0..T-1 read rows 0..T-1); the tables are f32, contiguous, on
//   x's device.
#ifndef ZEROSHARD_KERNELS_ROPE_H_
#define ZEROSHARD_KERNELS_ROPE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// Llama 3's rope_scaling ("rope_type": "llama3"), with Llama 3.1's values.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct RopeOptions {
  double theta = 10000.0;  // rope_theta
  std::optional<Llama3RopeScaling> llama3;
};

struct RopeTables {
  Tensor cos, sin;  // f32 [max_positions, D/2], row p = position p
};

// The frequencies inv_freq[i], i < head_dim / 2, in double (scaled per
// options.llama3): what the tables are made of.
absl::StatusOr<std::vector<double>> RopeInverseFrequencies(const RopeOptions& options,
                                                           int64_t head_dim);

// cos and sin of p inv_freq[i] for p < max_positions, copied to `allocator`
// (nullptr: the CPU). theta > 0, head_dim even and > 0, max_positions >= 1;
// llama3: factor > 0, low_freq_factor < high_freq_factor, original > 0.
absl::StatusOr<RopeTables> MakeRopeTables(const RopeOptions& options, int64_t max_positions,
                                          int64_t head_dim, Allocator* allocator = nullptr);

// out = x rotated by each position's angles (inverse: by minus them).
absl::Status RopeApply(const Tensor& x, const RopeTables& tables, const Tensor& out,
                       bool inverse = false);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_ROPE_H_
