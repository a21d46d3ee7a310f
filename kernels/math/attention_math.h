// The per-element pieces of scaled dot-product attention, shared by the CPU
// kernel (kernels/cpu/attention.cc) and a CUDA fallback kernel: which scores
// are visible, the probability recomputed from the saved log-sum-exp, and the
// score gradient. The matrix products around them are GEMMs.
//
//   p  = AttentionProb(s, lse_i);              // exp(s - lse_i), s = scale * q_i . k_j
//   ds = AttentionScoreGrad(p, dp, delta_i);   // p * (dp - delta_i)
//
// See kernels/attention.h for the whole computation.
#ifndef ZEROSHARD_KERNELS_MATH_ATTENTION_MATH_H_
#define ZEROSHARD_KERNELS_MATH_ATTENTION_MATH_H_

#include <cmath>
#include <cstdint>

#include "kernels/math/fast_math.h"
#include "runtime/host_device.h"

namespace zeroshard {

// 1 / sqrt(head_dim), the default score scale.
inline float DefaultAttentionScale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// Query row i sees key column j (causal: j <= i).
ZS_HOST_DEVICE inline bool AttentionVisible(int64_t i, int64_t j, bool causal) {
  return !causal || j <= i;
}

// Number of leading visible columns of row i among `cols` keys.
ZS_HOST_DEVICE inline int64_t AttentionVisibleCount(int64_t i, int64_t cols, bool causal) {
  return causal ? (i + 1 < cols ? i + 1 : cols) : cols;
}

// The row's log-sum-exp from its maximum m and sum l = sum_j exp(s_j - m).
ZS_HOST_DEVICE inline float AttentionLse(float m, float l) { return m + LogF(l); }

// Softmax probability of a visible score, recomputed from the row's log-sum-exp.
ZS_HOST_DEVICE inline float AttentionProb(float s, float lse) { return ExpF(s - lse); }

// dL/ds_ij = p_ij (dp_ij - delta_i), delta_i = sum_d dO_id O_id. Zero where p is zero
// (masked scores contribute exactly nothing).
ZS_HOST_DEVICE inline float AttentionScoreGrad(float p, float dp, float delta) {
  return p * (dp - delta);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_ATTENTION_MATH_H_
