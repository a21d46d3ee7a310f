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

#include "zeroshard/kernels/math/fast_math.h"
#include "zeroshard/runtime/host_device.h"

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

// The exponential the per-element pieces below use: ExpF (correctly rounded
// to the CPU twin's bits, about 30 instructions without FMA) by default, or
// ExpFast, exp2f(x log2 e): one hardware base-2 exponential on the device
// (CUDA's exp2f, at most 2 ulp; the host's libm under the simulator), for a
// kernel judged by a derived bound rather than by the twin's bits, where the
// exponentials and not the tensor cores would bound its speed (the
// tensor-core attention, Note [Tensor-core attention]). ExpFast's relative
// error is at most 2^-22 (exp2f) + |x| 2^-23 (the product's rounding, times
// ln 2 < 1): tests/kernels/attention_bound.h counts |x| 2^-22.
struct ExpExact {
  ZS_HOST_DEVICE float operator()(float x) const { return ExpF(x); }
};
struct ExpFast {
  ZS_HOST_DEVICE float operator()(float x) const { return exp2f(x * 1.44269504088896341f); }
};

// The row's log-sum-exp from its maximum m and sum l = sum_j exp(s_j - m).
ZS_HOST_DEVICE inline float AttentionLse(float m, float l) { return m + LogF(l); }

// Softmax probability of a visible score, recomputed from the row's log-sum-exp.
template <typename Exp = ExpExact>
ZS_HOST_DEVICE inline float AttentionProb(float s, float lse, Exp exp = {}) {
  return exp(s - lse);
}

// ---------------------------------------------------------------- online softmax
// The CUDA kernel (kernels/cuda/attention.cu) walks the keys of a row in tiles
// and never holds a whole row of scores: per row it keeps the running maximum
// m, the running sum l = sum_j exp(s_j - m) and the unnormalised output
// acc = sum_j exp(s_j - m) v_j. A tile with maximum t folds in as
//   m' = AttentionRunningMax(m, t);   c = AttentionRescale(m, m')
//   l' = c l + sum_tile exp(s_j - m');   acc' = c acc + sum_tile exp(s_j - m') v_j
// and at the end out = acc / l, lse = AttentionLse(m, l). Masked scores are
// -inf and contribute exp(-inf) = 0. (tests/kernels/attention_online_test.cc
// runs this recurrence on the host against the CPU kernel.)

// The score of a query/key pair from their dot product.
ZS_HOST_DEVICE inline float AttentionScore(float dot, float scale) { return dot * scale; }

ZS_HOST_DEVICE inline float AttentionRunningMax(float m, float tile_max) {
  return tile_max > m ? tile_max : m;
}

// exp(m_old - m_new), the factor that rescales what was summed against m_old;
// 0 before the first visible score (m_old = -inf), never NaN.
template <typename Exp = ExpExact>
ZS_HOST_DEVICE inline float AttentionRescale(float m_old, float m_new, Exp exp = {}) {
  return m_old == -kInfF ? 0.0f : exp(m_old - m_new);
}

// exp(s - m) of one score against the running maximum; 0 for a masked score.
template <typename Exp = ExpExact>
ZS_HOST_DEVICE inline float AttentionWeight(float s, float m, Exp exp = {}) {
  return s == -kInfF ? 0.0f : exp(s - m);
}

// dL/ds_ij = p_ij (dp_ij - delta_i), delta_i = sum_d dO_id O_id. Zero where p is zero
// (masked scores contribute exactly nothing).
ZS_HOST_DEVICE inline float AttentionScoreGrad(float p, float dp, float delta) {
  return p * (dp - delta);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_ATTENTION_MATH_H_
