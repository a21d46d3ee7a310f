// Scaled dot-product attention in the op registry (kernels/op_registry.h): our
// kernels (AttentionImpl::kOwn); cuDNN's fused attention is checked against
// them in tests/kernels/cuda_attention_test.cc.
#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/op_registry.h"
#include "runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kB = 1, kH = 2, kT = 7, kD = 5;
const AttentionOptions kOptions{.causal = true, .impl = AttentionImpl::kOwn};

// out = softmax(Q K^T / sqrt(D), causal) V and each row's log-sum-exp, per head.
Values Reference(const Values& in) {
  const std::vector<double>&q = in[0], &k = in[1], &v = in[2];
  const double scale = 1 / std::sqrt(static_cast<double>(kD));
  std::vector<double> out(q.size()), lse(kB * kH * kT);
  for (int64_t h = 0; h < kB * kH; ++h) {
    const int64_t o = h * kT * kD;
    for (int64_t i = 0; i < kT; ++i) {
      std::vector<double> s(i + 1);
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j <= i; ++j) {
        for (int64_t e = 0; e < kD; ++e) s[j] += q[o + i * kD + e] * k[o + j * kD + e] * scale;
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - m);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(s[j] - m) / l;
        for (int64_t e = 0; e < kD; ++e) out[o + i * kD + e] += p * v[o + j * kD + e];
      }
      lse[h * kT + i] = m + std::log(l);
    }
  }
  return {out, lse};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "attention",
    .family = "attention",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "q", .shape = {kB, kH, kT, kD}},
               {.name = "k", .shape = {kB, kH, kT, kD}},
               {.name = "v", .shape = {kB, kH, kT, kD}}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(AttentionOutputs f, AttentionForward(in[0], in[1], in[2], kOptions));
      return Tensors{f.out, f.lse};
    },
    .reference = Reference,
    // tests/kernels/attention_test.cc: fp32 scores, online softmax and sums.
    .forward_bound = [](DType, int output) {
      return output == 0 ? Bound{1e-5, 1e-5, "out: fp32 scores and online softmax"}
                         : Bound{1e-5, 1e-6, "lse: fp32 online max and sum"};
    },
    .graded_outputs = 1,  // lse is saved for the backward
    .backward = [](const Tensors& in, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(AttentionGrads g,
                          AttentionBackward(dout[0], in[0], in[1], in[2], out[0], out[1], kOptions));
      return Tensors{g.dq, g.dk, g.dv};
    },
    .backward_bound = [](DType dtype, int input) {
      // The fp32 backward of attention_test.cc (1e-5), plus the saved out's
      // rounding into the dtype (relative u): D_i = <dout_i, out_i> moves by at
      // most u D (|dout|, |out| <= 1: out averages v in [-1, 1)), and reaches
      // dq_i = scale sum_j P_ij (dP_ij - D_i) k_j through probabilities summing
      // to 1, and dk_j through at most T of them; dv does not read out.
      const double u = UnitRoundoff(dtype);
      return input == 2 ? Bound{1e-5, 1e-5, "dv: fp32 sums of P dout"}
                        : Bound{1e-5 + u * kD * kT, 1e-5, "dq, dk: fp32, and the saved out's rounding"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
