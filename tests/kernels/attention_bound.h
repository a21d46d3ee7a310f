// Attention in double from the operands' exact values, with a per-element
// bound on the error of a kernel that multiplies on tensor cores and rounds
// its probabilities to the input dtype (our tensor-core kernel, Note
// [Tensor-core attention] in kernels/cuda/attention_tc.cu; cuDNN's and
// FlashAttention-2's do the same). Test-only, header-only.
//
//   AttentionBound ref = ReferenceAttention(q, k, v, dout, out, lse, scale, causal, dtype);
//   ExpectWithinBound(got_out, ref.out, ref.out_bound, "out");
//
// q, out, dout are [B, H, T, D], k and v [B, Hkv, T, D] (any strides), lse f32
// [B, H, T]. The backward's reference takes `out` and `lse` as the kernel gets
// them (the forward's rounded outputs), so its bound does not carry the
// forward's error.
//
// The bound, per element, from the math (u16 the input dtype's unit roundoff,
// 2^-8 bf16 / 2^-11 f16; a = 2^-23 an fp32 accumulation step's relative error,
// twice round-to-nearest's so that a truncating accumulator is covered, in
// any order: gamma_n = n a / (1 - n a)):
//   scores   |ds_ij| <= e_ij = gamma_D scale sum_d |q_id k_jd|
//   exp      the kernel's exponential is the hardware's (ExpFast in
//            kernels/math/attention_math.h): relative error 2^-22 + |x| 2^-22
//            for an argument x.
//   forward  out_i = sum_j w_j v_j / sum_j p_j with w_j = p_j (1 + eps_j) the
//            rounded weights and the sum over unrounded ones, each p_j off by
//            exp(e) - 1 from the scores, exp's error for its own argument and
//            for each 64-key tile's rescale (arguments adding up to at most
//            X_i = max_j s_ij - min_j s_ij), and 2^-22 for 1 / l and its product:
//            |eps_j| <= eps = u16 + (exp(E_i) - 1) + (T / 64 + 4) 2^-22 + 2 (X_i + E_i) 2^-22,
//            E_i the row's largest e_ij, so with err = (2 eps / (1 - eps) + gamma_T) sum_j p_j |v_jd|
//            |d out_id| <= err + u16 (|out_id| + err) (the last term: the output's own rounding).
//   lse      |d lse_i| <= E_i + gamma_{T+2} + 2^-22 |lse_i| + (T / 64 + 4 + 2 (X_i + E_i)) 2^-22
//   backward P_ij = exp(s_ij - lse_i) off by eP = exp(e_ij) - 1 + (1 + |s_ij - lse_i| + e_ij) 2^-22 relative,
//            then rounded (u16) for dV; dP_ij = dO_i . V_j off by
//            gamma_D sum_d |dO_id V_jd|; delta_i = dO_i . O_i off by
//            gamma_D sum_d |dO_id O_id|; dS_ij = P_ij (dP_ij - delta_i) off by
//            err_ds = (eP + 2^-22) P |dP - delta| + (1 + eP) P (its dP and delta
//            errors), then rounded (u16 |dS|);
//            |d dV_jd| <= sum_i ((eP + u16 + eP u16) P_ij + gamma_T P_ij) |dO_id| + u16 |dV_jd|
//            |d dQ_id| <= scale sum_j (err_ds + u16 |dS_ij| + gamma_T |dS_ij|) |K_jd| + u16 |dQ_id|
//            |d dK_jd| <= scale sum_h sum_i (same) |Q_id| + u16 |dK_jd|
// Each rounding to the input dtype also carries an absolute part eta, half
// the smallest subnormal spacing (2^-25 for f16, whose subnormals tiny
// probabilities and score gradients reach; 2^-134 for bf16): eta |v_j| per
// weight in the forward, eta |dO_i| per probability in dV, eta per score
// gradient in dQ and dK, eta per output element.
// Every sum is taken in double over the exact terms, so the bound is the
// math's, not a tolerance fitted to a machine.
#ifndef ZEROSHARD_TESTS_KERNELS_ATTENTION_BOUND_H_
#define ZEROSHARD_TESTS_KERNELS_ATTENTION_BOUND_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::testing {

struct AttentionBound {
  std::vector<double> out, out_bound, lse, lse_bound;
  std::vector<double> dq, dq_bound, dk, dk_bound, dv, dv_bound;
};

// The values of a [B, X, T, D] (or [B, X, T]) tensor in row-major order.
inline std::vector<double> DenseValues(const Tensor& t) {
  return t.Contiguous().value().ToVector<double>().value();
}

inline AttentionBound ReferenceAttention(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                                         const Tensor& dout_t, const Tensor& out_t,
                                         const Tensor& lse_t, double scale, bool causal,
                                         DType dtype) {
  const int64_t B = q_t.size(0), H = q_t.size(1), T = q_t.size(2), D = q_t.size(3);
  const int64_t Hkv = k_t.size(1), G = H / Hkv;
  const std::vector<double> q = DenseValues(q_t), k = DenseValues(k_t), v = DenseValues(v_t);
  const std::vector<double> dout = DenseValues(dout_t), out_in = DenseValues(out_t);
  const std::vector<double> lse_in = DenseValues(lse_t);
  const double u16 = dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  // A rounding to the input dtype errs by u16 |x| in the normal range and by
  // at most half the subnormal spacing below it: 2^-25 for f16 (subnormals
  // below 2^-14: tiny probabilities and score gradients land there), 2^-134
  // for bf16 (f32's range).
  const double eta = dtype == DType::kBF16 ? std::ldexp(1.0, -134) : std::ldexp(1.0, -25);
  const double a = std::ldexp(1.0, -23);
  auto gamma = [&](double n) { return n * a / (1 - n * a); };
  const double fp = std::ldexp(1.0, -22);  // exp's and a product's rounding, generously
  auto qi = [&](int64_t b, int64_t h, int64_t t, int64_t d) { return ((b * H + h) * T + t) * D + d; };
  auto ki = [&](int64_t b, int64_t h, int64_t t, int64_t d) { return ((b * Hkv + h) * T + t) * D + d; };
  auto visible = [&](int64_t i, int64_t j) { return !causal || j <= i; };

  AttentionBound r;
  r.out.assign(B * H * T * D, 0.0);
  r.out_bound.assign(B * H * T * D, 0.0);
  r.lse.assign(B * H * T, 0.0);
  r.lse_bound.assign(B * H * T, 0.0);
  r.dq.assign(B * H * T * D, 0.0);
  r.dq_bound.assign(B * H * T * D, 0.0);
  r.dk.assign(B * Hkv * T * D, 0.0);
  r.dk_bound.assign(B * Hkv * T * D, 0.0);
  r.dv.assign(B * Hkv * T * D, 0.0);
  r.dv_bound.assign(B * Hkv * T * D, 0.0);
  std::vector<double> s(T), e(T), p(T), dp(T), ds(T), ds_err(T), pv_err(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / G;
      for (int64_t i = 0; i < T; ++i) {
        // Forward.
        double m = -INFINITY, big_e = 0, s_min = INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          if (!visible(i, j)) continue;
          double dot = 0, mag = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += q[qi(b, h, i, d)] * k[ki(b, kh, j, d)];
            mag += std::fabs(q[qi(b, h, i, d)] * k[ki(b, kh, j, d)]);
          }
          s[j] = scale * dot;
          e[j] = gamma(static_cast<double>(D)) * std::fabs(scale) * mag;
          m = std::max(m, s[j]);
          s_min = std::min(s_min, s[j]);
          big_e = std::max(big_e, e[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < T; ++j) {
          p[j] = visible(i, j) ? std::exp(s[j] - m) : 0.0;
          l += p[j];
        }
        // exp's own error (2^-22 and |x| 2^-22 for an argument x, the
        // hardware's exp2f of x log2 e: kernels/math/attention_math.h's
        // ExpFast) for the weights and for the running rescales (one per
        // 64-key tile, whose arguments add up to at most X = m - min s), 1 / l
        // and its product.
        const double big_x = s_min <= m ? m - s_min : 0.0;
        const double eps =
            u16 + std::expm1(big_e) + (static_cast<double>(T) / 64 + 4) * fp + 2 * big_x * fp + 2 * big_e * fp;
        const int64_t row = (b * H + h) * T + i;
        r.lse[row] = m + std::log(l);
        r.lse_bound[row] = big_e + gamma(static_cast<double>(T + 2)) + fp * std::fabs(r.lse[row]) +
                           (static_cast<double>(T) / 64 + 4) * fp + 2 * (big_x + big_e) * fp;
        for (int64_t d = 0; d < D; ++d) {
          double o = 0, mag = 0, vsum = 0;
          for (int64_t j = 0; j < T; ++j) {
            o += p[j] * v[ki(b, kh, j, d)];
            mag += p[j] * std::fabs(v[ki(b, kh, j, d)]);
            if (visible(i, j)) vsum += std::fabs(v[ki(b, kh, j, d)]);
          }
          o /= l;
          mag /= l;
          r.out[qi(b, h, i, d)] = o;
          // Each rounded weight's absolute part, eta |v_j|, over l >= 1 (the
          // weights are taken against a running maximum no larger than the
          // final one, and later rescales only shrink them).
          const double err = (2 * eps / (1 - eps) + gamma(static_cast<double>(T))) * mag + eta * vsum / l;
          r.out_bound[qi(b, h, i, d)] = err + u16 * (std::fabs(o) + err) + eta;
        }
        // Backward, from the given out and lse.
        double delta = 0, delta_mag = 0;
        for (int64_t d = 0; d < D; ++d) {
          delta += dout[qi(b, h, i, d)] * out_in[qi(b, h, i, d)];
          delta_mag += std::fabs(dout[qi(b, h, i, d)] * out_in[qi(b, h, i, d)]);
        }
        const double delta_err = gamma(static_cast<double>(D)) * delta_mag;
        const double lse_i = lse_in[row];
        for (int64_t j = 0; j < T; ++j) {
          if (!visible(i, j)) {
            ds[j] = ds_err[j] = pv_err[j] = p[j] = 0;
            continue;
          }
          p[j] = std::exp(s[j] - lse_i);
          double dot = 0, mag = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += dout[qi(b, h, i, d)] * v[ki(b, kh, j, d)];
            mag += std::fabs(dout[qi(b, h, i, d)] * v[ki(b, kh, j, d)]);
          }
          dp[j] = dot;
          // exp(s - lse) off by the score's error and by exp's own, 2^-22 + |x| 2^-22.
          const double e_p = std::expm1(e[j]) + fp + std::fabs(s[j] - lse_i) * fp + e[j] * fp;
          ds[j] = p[j] * (dp[j] - delta);
          const double err = (e_p + fp) * p[j] * std::fabs(dp[j] - delta) +
                             (1 + e_p) * p[j] * (gamma(static_cast<double>(D)) * mag + delta_err);
          ds_err[j] = err + u16 * (std::fabs(ds[j]) + err) + eta + gamma(static_cast<double>(T)) * std::fabs(ds[j]);
          pv_err[j] = (e_p + u16 + e_p * u16 + gamma(static_cast<double>(T))) * p[j] + eta;
        }
        for (int64_t d = 0; d < D; ++d) {
          double g = 0, g_err = 0;
          for (int64_t j = 0; j < T; ++j) {
            g += ds[j] * k[ki(b, kh, j, d)];
            g_err += ds_err[j] * std::fabs(k[ki(b, kh, j, d)]);
          }
          r.dq[qi(b, h, i, d)] = scale * g;
          r.dq_bound[qi(b, h, i, d)] = std::fabs(scale) * g_err;
        }
        for (int64_t j = 0; j < T; ++j) {
          for (int64_t d = 0; d < D; ++d) {
            r.dk[ki(b, kh, j, d)] += scale * ds[j] * q[qi(b, h, i, d)];
            r.dk_bound[ki(b, kh, j, d)] += std::fabs(scale) * ds_err[j] * std::fabs(q[qi(b, h, i, d)]);
            r.dv[ki(b, kh, j, d)] += p[j] * dout[qi(b, h, i, d)];
            r.dv_bound[ki(b, kh, j, d)] += pv_err[j] * std::fabs(dout[qi(b, h, i, d)]);
          }
        }
      }
    }
  }
  // Each gradient's own rounding to the input dtype.
  for (std::vector<double>* pair : {&r.dq, &r.dk, &r.dv}) {
    std::vector<double>& bound = pair == &r.dq ? r.dq_bound : pair == &r.dk ? r.dk_bound : r.dv_bound;
    for (size_t n = 0; n < pair->size(); ++n) bound[n] += u16 * (std::fabs((*pair)[n]) + bound[n]) + eta;
  }
  return r;
}

// |got - want| <= bound everywhere; reports the count outside and the worst ratio.
inline void ExpectWithinBound(const Tensor& got_t, const std::vector<double>& want,
                              const std::vector<double>& bound, const std::string& what) {
  const std::vector<double> got = DenseValues(got_t);
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t outside = 0, worst_at = -1;
  double worst = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    const double err = std::fabs(got[n] - want[n]);
    // A zero bound (an exact zero, e.g. a masked row's gradient) admits no error
    // beyond the smallest normal, what a flushed subnormal could leave.
    const double ratio = err / std::max(bound[n], 1e-30);
    if (!(err <= bound[n] + 1e-30)) ++outside;
    if (!(ratio <= worst)) {
      worst = ratio;
      worst_at = static_cast<int64_t>(n);
    }
  }
  EXPECT_EQ(outside, 0) << what << ": " << outside << " of " << got.size()
                        << " elements outside the bound; worst at " << worst_at << ": got "
                        << got[worst_at] << ", want " << want[worst_at] << ", bound "
                        << bound[worst_at] << " (ratio " << worst << ")";
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_ATTENTION_BOUND_H_
