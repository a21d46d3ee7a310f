// Scaled dot-product attention in the op registry (kernels/op_registry.h): our
// kernels (AttentionImpl::kOwn); cuDNN's fused attention is checked against
// them in tests/kernels/cuda_attention_test.cc.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kB = 1, kT = 7, kD = 5;
const AttentionOptions kOptions{.causal = true, .impl = AttentionImpl::kOwn};

// out = softmax(Q K^T / sqrt(D), causal) V and each row's log-sum-exp, per
// query head h of H, reading kv head h / (H / Hkv) of k and v [B, Hkv, T, D]
// (Note [Grouped-query attention] in kernels/attention.h).
Values Reference(const Values& in, int64_t H, int64_t Hkv) {
  const std::vector<double>&q = in[0], &k = in[1], &v = in[2];
  const double scale = 1 / std::sqrt(static_cast<double>(kD));
  const int64_t G = H / Hkv;
  std::vector<double> out(q.size()), lse(kB * H * kT);
  for (int64_t bh = 0; bh < kB * H; ++bh) {
    const int64_t o = bh * kT * kD;
    const int64_t okv = (bh / H * Hkv + bh % H / G) * kT * kD;
    for (int64_t i = 0; i < kT; ++i) {
      std::vector<double> s(i + 1);
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j <= i; ++j) {
        for (int64_t e = 0; e < kD; ++e) s[j] += q[o + i * kD + e] * k[okv + j * kD + e] * scale;
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - m);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(s[j] - m) / l;
        for (int64_t e = 0; e < kD; ++e) out[o + i * kD + e] += p * v[okv + j * kD + e];
      }
      lse[bh * kT + i] = m + std::log(l);
    }
  }
  return {out, lse};
}

// The attention op with q [B, H, T, D] and k, v [B, Hkv, T, D].
OpDescriptor Attention(std::string name, int64_t H, int64_t Hkv) {
  return OpDescriptor{
      .name = std::move(name),
      .family = "attention",
      .backends = {.cuda = true},
      .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
      .inputs = {{.name = "q", .shape = {kB, H, kT, kD}},
                 {.name = "k", .shape = {kB, Hkv, kT, kD}},
                 {.name = "v", .shape = {kB, Hkv, kT, kD}}},
      .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(AttentionOutputs f, AttentionForward(in[0], in[1], in[2], kOptions));
        return Tensors{f.out, f.lse};
      },
      .reference = [H, Hkv](const Values& in) { return Reference(in, H, Hkv); },
      // tests/kernels/attention_test.cc: fp32 scores, online softmax and sums.
      .forward_bound = [](DType, int output) {
        return output == 0 ? Bound{1e-5, 1e-5, "out: fp32 scores and online softmax"}
                           : Bound{1e-5, 1e-6, "lse: fp32 online max and sum"};
      },
      .graded_outputs = 1,  // lse is saved for the backward
      .backward = [](const Tensors& in, const Tensors& out,
                     const Tensors& dout) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(AttentionGrads g, AttentionBackward(dout[0], in[0], in[1], in[2],
                                                                out[0], out[1], kOptions));
        return Tensors{g.dq, g.dk, g.dv};
      },
      .backward_bound = [G = H / Hkv](DType dtype, int input) {
        // The fp32 backward of attention_test.cc (1e-5), plus the saved out's
        // rounding into the dtype (relative u): D_i = <dout_i, out_i> moves by
        // at most u D (|dout|, |out| <= 1: out averages v in [-1, 1)), and
        // reaches dq_i = scale sum_j P_ij (dP_ij - D_i) k_j through
        // probabilities summing to 1, and dk_j through at most T of them; dv
        // does not read out. dk and dv of a kv head sum G = H / Hkv query
        // heads' gradients, each within that bound: G times it.
        const double u = UnitRoundoff(dtype);
        const double g = static_cast<double>(G);
        switch (input) {
          case 0: return Bound{1e-5 + u * kD * kT, 1e-5, "dq: fp32, and the saved out's rounding"};
          case 1:
            return Bound{g * (1e-5 + u * kD * kT), 1e-5,
                         "dk: G query heads' fp32 sums, and the saved out's rounding"};
          default: return Bound{g * 1e-5, 1e-5, "dv: G query heads' fp32 sums of P dout"};
        }
      },
  };
}

// Multi-head (H = Hkv), grouped-query (two query heads per kv head) and
// multi-query (one kv head) attention.
const bool kRegistered = RegisterOps({Attention("attention", 2, 2), Attention("attention/gqa", 4, 2),
                                      Attention("attention/mqa", 4, 1)});

}  // namespace
}  // namespace zeroshard::ops
