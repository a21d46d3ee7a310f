// AttentionForward / AttentionBackward against a naive double-precision
// reference: odd T, D and H, causal and not, every float dtype, several row
// blocks, strided q/k/v views of a fused qkv buffer (and gradients written into
// a fused dqkv buffer), inputs copied per head, a central finite-difference
// check of the reference's gradient, masked entries contributing exactly 0,
// bitwise determinism across thread counts, every instruction set, and the
// errors. Grouped-query attention (k, v with Hkv heads dividing H, MQA at
// Hkv = 1) against a reference that repeats K and V explicitly, in double,
// with dk and dv summed over each group, on odd shapes, strided and
// transposed views, and across thread counts.
#include "zeroshard/kernels/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

// ---------------------------------------------------------------- reference

struct Dims {
  int64_t B, H, T, D;
  bool causal;
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
};

// P for one head (T x T, row-major), from q, k at head offset `o`.
std::vector<double> RefProbs(const Dims& d, const std::vector<double>& q,
                             const std::vector<double>& k, int64_t o, std::vector<double>* lse) {
  std::vector<double> p(d.T * d.T, 0.0);
  for (int64_t i = 0; i < d.T; ++i) {
    const int64_t n = d.causal ? i + 1 : d.T;
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t e = 0; e < d.D; ++e) s += q[o + i * d.D + e] * k[o + j * d.D + e];
      p[i * d.T + j] = s * d.scale();
      m = std::max(m, p[i * d.T + j]);
    }
    double l = 0;
    for (int64_t j = 0; j < n; ++j) l += std::exp(p[i * d.T + j] - m);
    for (int64_t j = 0; j < n; ++j) p[i * d.T + j] = std::exp(p[i * d.T + j] - m) / l;
    if (lse != nullptr) lse->push_back(m + std::log(l));
  }
  return p;
}

struct RefFwd {
  std::vector<double> out, lse;
};

RefFwd RefForward(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v) {
  RefFwd r;
  r.out.assign(q.size(), 0.0);
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t o = bh * d.T * d.D;
    const std::vector<double> p = RefProbs(d, q, k, o, &r.lse);
    for (int64_t i = 0; i < d.T; ++i)
      for (int64_t e = 0; e < d.D; ++e) {
        double s = 0;
        for (int64_t j = 0; j < d.T; ++j) s += p[i * d.T + j] * v[o + j * d.D + e];
        r.out[o + i * d.D + e] = s;
      }
  }
  return r;
}

struct RefGrads {
  std::vector<double> dq, dk, dv;
};

// The analytic gradient of L = sum(dout o out). delta_i is sum_j P_ij dP_ij,
// or, when `saved_out` is given, rowsum(dout o saved_out) as the kernel
// computes it from the (possibly 16-bit) saved output.
RefGrads RefBackward(const Dims& d, const std::vector<double>& dout, const std::vector<double>& q,
                     const std::vector<double>& k, const std::vector<double>& v,
                     const std::vector<double>* saved_out = nullptr) {
  RefGrads g;
  g.dq.assign(q.size(), 0.0);
  g.dk.assign(q.size(), 0.0);
  g.dv.assign(q.size(), 0.0);
  const int64_t T = d.T, D = d.D;
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t o = bh * T * D;
    const std::vector<double> p = RefProbs(d, q, k, o, nullptr);
    std::vector<double> dp(T * T, 0.0), ds(T * T, 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        double s = 0;
        for (int64_t e = 0; e < D; ++e) s += dout[o + i * D + e] * v[o + j * D + e];
        dp[i * T + j] = s;
      }
    for (int64_t i = 0; i < T; ++i) {
      double delta = 0;
      if (saved_out != nullptr) {
        for (int64_t e = 0; e < D; ++e) delta += dout[o + i * D + e] * (*saved_out)[o + i * D + e];
      } else {
        for (int64_t j = 0; j < T; ++j) delta += p[i * T + j] * dp[i * T + j];
      }
      for (int64_t j = 0; j < T; ++j) ds[i * T + j] = p[i * T + j] * (dp[i * T + j] - delta);
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t e = 0; e < D; ++e) {
        double sq = 0, sk = 0, sv = 0;
        for (int64_t j = 0; j < T; ++j) {
          sq += ds[i * T + j] * k[o + j * D + e];
          sk += ds[j * T + i] * q[o + j * D + e];
          sv += p[j * T + i] * dout[o + j * D + e];
        }
        g.dq[o + i * D + e] = d.scale() * sq;
        g.dk[o + i * D + e] = d.scale() * sk;
        g.dv[o + i * D + e] = sv;
      }
  }
  return g;
}

// Grouped-query attention by the definition (Note [Grouped-query attention]):
// kv head j repeated for query heads j G .. j G + G - 1 (Hugging Face's
// repeat_kv), plain attention on the repeated tensors, and the gradients of
// the repeated k and v summed back over each group.
std::vector<double> RepeatKv(const Dims& d, int64_t kv_heads, const std::vector<double>& kv) {
  const int64_t G = d.H / kv_heads, td = d.T * d.D;
  std::vector<double> r(d.B * d.H * td);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t x = 0; x < td; ++x) r[(b * d.H + h) * td + x] = kv[(b * kv_heads + h / G) * td + x];
  return r;
}

std::vector<double> SumGroups(const Dims& d, int64_t kv_heads, const std::vector<double>& full) {
  const int64_t G = d.H / kv_heads, td = d.T * d.D;
  std::vector<double> r(d.B * kv_heads * td, 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t x = 0; x < td; ++x) r[(b * kv_heads + h / G) * td + x] += full[(b * d.H + h) * td + x];
  return r;
}

RefFwd RefForwardGqa(const Dims& d, int64_t kv_heads, const std::vector<double>& q,
                     const std::vector<double>& k, const std::vector<double>& v) {
  return RefForward(d, q, RepeatKv(d, kv_heads, k), RepeatKv(d, kv_heads, v));
}

RefGrads RefBackwardGqa(const Dims& d, int64_t kv_heads, const std::vector<double>& dout,
                        const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v,
                        const std::vector<double>* saved_out = nullptr) {
  RefGrads g = RefBackward(d, dout, q, RepeatKv(d, kv_heads, k), RepeatKv(d, kv_heads, v), saved_out);
  g.dk = SumGroups(d, kv_heads, g.dk);
  g.dv = SumGroups(d, kv_heads, g.dv);
  return g;
}

// ---------------------------------------------------------------- helpers

struct Inputs {
  Tensor q, k, v, dout;
};

Inputs MakeInputs(const Dims& d, DType dtype, uint64_t seed) {
  const Shape s = {d.B, d.H, d.T, d.D};
  return {RandomTensor(s, dtype, -1, 1, seed), RandomTensor(s, dtype, -1, 1, seed + 1),
          RandomTensor(s, dtype, -1, 1, seed + 2), RandomTensor(s, dtype, -1, 1, seed + 3)};
}

// q, dout [B, H, T, D]; k, v [B, Hkv, T, D].
Inputs MakeGqaInputs(const Dims& d, int64_t kv_heads, DType dtype, uint64_t seed) {
  const Shape s = {d.B, d.H, d.T, d.D}, skv = {d.B, kv_heads, d.T, d.D};
  return {RandomTensor(s, dtype, -1, 1, seed), RandomTensor(skv, dtype, -1, 1, seed + 1),
          RandomTensor(skv, dtype, -1, 1, seed + 2), RandomTensor(s, dtype, -1, 1, seed + 3)};
}

std::string Name(const Dims& d, DType dtype) {
  return absl::StrCat(DTypeName(dtype), " B", d.B, " H", d.H, " T", d.T, " D", d.D,
                      d.causal ? " causal" : " full");
}

// Tolerances. f32: fp32 accumulation over at most a few hundred terms of size
// <= 1 stays within 1e-5 absolute. 16-bit: the inputs are exact in double, so
// only fp32 arithmetic and one rounding of each output differ; the reference
// gradient takes delta from the saved (rounded) out, as the kernel does.
constexpr double kAtol = 1e-5;
double Rtol(DType dtype) { return 1e-5 + RoundingRtol(dtype); }

// Grouped-query attention: dk and dv of kv head j sum the gradients of its G
// query heads, each within the bounds above (the group's fp32 sums have G
// times the terms of one head's), so their absolute bound is G times kAtol;
// the relative one adds the G - 1 fp32 additions of the group (G 2^-24, well
// inside the 1e-5 already there).
double GroupAtol(int64_t group) { return group * kAtol; }

// Runs forward and backward on `in` (k, v with Hkv heads) and checks both
// against the repeated-K/V reference.
void CheckGqaAgainstReference(const Dims& d, int64_t kv_heads, const Inputs& in,
                              const std::string& what) {
  const AttentionOptions opt{.causal = d.causal};
  ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs fwd, AttentionForward(in.q, in.k, in.v, opt));
  const std::vector<double> q = ToDoubles(in.q), k = ToDoubles(in.k), v = ToDoubles(in.v),
                            dout = ToDoubles(in.dout);
  const RefFwd ref = RefForwardGqa(d, kv_heads, q, k, v);
  const DType dtype = in.q.dtype();
  ExpectClose(fwd.out, ref.out, kAtol, Rtol(dtype), what + " out");
  ExpectClose(fwd.lse, ref.lse, kAtol, 1e-6, what + " lse");
  ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads g,
                          AttentionBackward(in.dout, in.q, in.k, in.v, fwd.out, fwd.lse, opt));
  EXPECT_EQ(g.dk.shape(), in.k.shape()) << what;
  EXPECT_EQ(g.dv.shape(), in.v.shape()) << what;
  const std::vector<double> saved_out = ToDoubles(fwd.out);
  const RefGrads rg = RefBackwardGqa(d, kv_heads, dout, q, k, v,
                                     dtype == DType::kF32 ? nullptr : &saved_out);
  const int64_t G = d.H / kv_heads;
  ExpectClose(g.dq, rg.dq, kAtol, Rtol(dtype), what + " dq");
  ExpectClose(g.dk, rg.dk, GroupAtol(G), Rtol(dtype), what + " dk");
  ExpectClose(g.dv, rg.dv, GroupAtol(G), Rtol(dtype), what + " dv");
}

// Runs forward and backward on `in` and checks both against the reference.
void CheckAgainstReference(const Dims& d, const Inputs& in, const std::string& what) {
  const AttentionOptions opt{.causal = d.causal};
  ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs fwd, AttentionForward(in.q, in.k, in.v, opt));
  const std::vector<double> q = ToDoubles(in.q), k = ToDoubles(in.k), v = ToDoubles(in.v),
                            dout = ToDoubles(in.dout);
  const RefFwd ref = RefForward(d, q, k, v);
  const DType dtype = in.q.dtype();
  ExpectClose(fwd.out, ref.out, kAtol, Rtol(dtype), what + " out");
  ExpectClose(fwd.lse, ref.lse, kAtol, 1e-6, what + " lse");
  ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads g,
                          AttentionBackward(in.dout, in.q, in.k, in.v, fwd.out, fwd.lse, opt));
  const std::vector<double> saved_out = ToDoubles(fwd.out);
  const RefGrads rg =
      RefBackward(d, dout, q, k, v, dtype == DType::kF32 ? nullptr : &saved_out);
  ExpectClose(g.dq, rg.dq, kAtol, Rtol(dtype), what + " dq");
  ExpectClose(g.dk, rg.dk, kAtol, Rtol(dtype), what + " dk");
  ExpectClose(g.dv, rg.dv, kAtol, Rtol(dtype), what + " dv");
}

// ---------------------------------------------------------------- tests

TEST(AttentionReference, GradientMatchesCentralFiniteDifferences) {
  // The reference's analytic gradient, which the kernel tests compare against,
  // checked against central differences of the reference forward (double).
  for (bool causal : {true, false}) {
    const Dims d{1, 3, 7, 8, causal};
    const Inputs in = MakeInputs(d, DType::kF32, 100);
    std::vector<double> q = ToDoubles(in.q), k = ToDoubles(in.k), v = ToDoubles(in.v);
    const std::vector<double> dout = ToDoubles(in.dout);
    const RefGrads g = RefBackward(d, dout, q, k, v);
    auto loss = [&]() {
      const RefFwd f = RefForward(d, q, k, v);
      double l = 0;
      for (size_t i = 0; i < dout.size(); ++i) l += dout[i] * f.out[i];
      return l;
    };
    const double h = 1e-5;
    for (auto [x, grad, name] : {std::tuple{&q, &g.dq, "dq"}, std::tuple{&k, &g.dk, "dk"},
                                 std::tuple{&v, &g.dv, "dv"}}) {
      std::vector<double> fd(x->size());
      for (size_t i = 0; i < x->size(); ++i) {
        const double x0 = (*x)[i];
        (*x)[i] = x0 + h;
        const double lp = loss();
        (*x)[i] = x0 - h;
        const double lm = loss();
        (*x)[i] = x0;
        fd[i] = (lp - lm) / (2 * h);
      }
      // Truncation error ~h^2, cancellation ~1e-16 / h: both far below 1e-8.
      ExpectClose(*grad, fd, 1e-8, 1e-6, absl::StrCat(name, causal ? " causal" : " full"));
    }
  }
}

TEST(AttentionReference, GroupedGradientMatchesCentralFiniteDifferences) {
  // The repeated-K/V reference's gradient with dk, dv summed over each group,
  // against central differences of the grouped forward in k and v themselves.
  for (int64_t kv_heads : {2, 1}) {
    for (bool causal : {true, false}) {
      const Dims d{1, 4, 6, 5, causal};
      const Inputs in = MakeGqaInputs(d, kv_heads, DType::kF32, 150);
      std::vector<double> q = ToDoubles(in.q), k = ToDoubles(in.k), v = ToDoubles(in.v);
      const std::vector<double> dout = ToDoubles(in.dout);
      const RefGrads g = RefBackwardGqa(d, kv_heads, dout, q, k, v);
      auto loss = [&]() {
        const RefFwd f = RefForwardGqa(d, kv_heads, q, k, v);
        double l = 0;
        for (size_t i = 0; i < dout.size(); ++i) l += dout[i] * f.out[i];
        return l;
      };
      const double h = 1e-5;
      for (auto [x, grad, name] : {std::tuple{&q, &g.dq, "dq"}, std::tuple{&k, &g.dk, "dk"},
                                   std::tuple{&v, &g.dv, "dv"}}) {
        ASSERT_EQ(grad->size(), x->size()) << name;
        std::vector<double> fd(x->size());
        for (size_t i = 0; i < x->size(); ++i) {
          const double x0 = (*x)[i];
          (*x)[i] = x0 + h;
          const double lp = loss();
          (*x)[i] = x0 - h;
          const double lm = loss();
          (*x)[i] = x0;
          fd[i] = (lp - lm) / (2 * h);
        }
        // As above: truncation ~h^2 times third derivatives of order G (a kv
        // entry reaches G heads), cancellation ~1e-16 / h; both below 1e-8.
        ExpectClose(*grad, fd, 1e-8, 1e-6,
                    absl::StrCat(name, " Hkv ", kv_heads, causal ? " causal" : " full"));
      }
    }
  }
}

TEST(Attention, MatchesReferenceOddShapesEveryDType) {
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (int64_t T : {1, 7, 33}) {
      for (int64_t D : {1, 8, 33}) {
        for (int64_t H : {1, 3}) {
          for (bool causal : {true, false}) {
            const Dims d{2, H, T, D, causal};
            CheckAgainstReference(d, MakeInputs(d, dtype, seed), Name(d, dtype));
            seed += 4;
          }
        }
      }
    }
  }
}

TEST(Attention, SeveralRowBlocks) {
  // T above the 64-row block: causal blocks multiply only up to their last row.
  uint64_t seed = 500;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t T : {65, 130}) {
      for (bool causal : {true, false}) {
        const Dims d{1, 2, T, 16, causal};
        CheckAgainstReference(d, MakeInputs(d, dtype, seed), Name(d, dtype));
        seed += 4;
      }
    }
  }
}

TEST(Attention, ExplicitScale) {
  const Dims d{1, 1, 7, 8, true};
  const Inputs in = MakeInputs(d, DType::kF32, 600);
  // scale = 2 / sqrt(D) equals the default applied to 2 q.
  std::vector<double> qd = ToDoubles(in.q);
  for (double& x : qd) x *= 2;
  const RefFwd ref = RefForward(d, qd, ToDoubles(in.k), ToDoubles(in.v));
  const AttentionOptions opt{.causal = true, .scale = 2.0f / std::sqrt(8.0f)};
  ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs fwd, AttentionForward(in.q, in.k, in.v, opt));
  ExpectClose(fwd.out, ref.out, kAtol, 1e-5, "scaled out");
  ExpectClose(fwd.lse, ref.lse, kAtol, 1e-6, "scaled lse");
}

TEST(Attention, StridedViewsOfFusedBuffers) {
  // q, k, v are views of a fused qkv [B, T, 3, H, D] (row stride 3 H D); out is
  // written into a [B, T, H, D] buffer; dq, dk, dv into a fused dqkv buffer; lse
  // into a [B, T, H] buffer. Results equal the contiguous run's reference.
  for (DType dtype : kFloatDTypes) {
    for (bool causal : {true, false}) {
      const int64_t B = 2, T = 33, H = 3, D = 8;
      const Dims d{B, H, T, D, causal};
      Tensor qkv = RandomTensor({B, T, 3, H, D}, dtype, -1, 1, 700);
      auto head_view = [&](const Tensor& fused, int64_t which) {
        return fused.Select(2, which).value().Transpose(1, 2).value();  // [B, H, T, D]
      };
      const Tensor q = head_view(qkv, 0), k = head_view(qkv, 1), v = head_view(qkv, 2);
      ASSERT_EQ(q.stride(2), 3 * H * D);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor out_buf, Tensor::Empty({B, T, H, D}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor out, out_buf.Transpose(1, 2));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor lse_buf, Tensor::Empty({B, T, H}, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor lse, lse_buf.Transpose(1, 2));
      const AttentionOptions opt{.causal = causal};
      ZS_ASSERT_OK(AttentionForward(q, k, v, out, lse, opt));
      const std::vector<double> qd = ToDoubles(q), kd = ToDoubles(k), vd = ToDoubles(v);
      const RefFwd ref = RefForward(d, qd, kd, vd);
      const std::string what = Name(d, dtype) + " fused";
      ExpectClose(out, ref.out, kAtol, Rtol(dtype), what + " out");
      ExpectClose(lse, ref.lse, kAtol, 1e-6, what + " lse");

      Tensor dout = RandomTensor({B, H, T, D}, dtype, -1, 1, 701);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dqkv, Tensor::Zeros({B, T, 3, H, D}, dtype));
      const Tensor dq = head_view(dqkv, 0), dk = head_view(dqkv, 1), dv = head_view(dqkv, 2);
      ZS_ASSERT_OK(AttentionBackward(dout, q, k, v, out, lse, dq, dk, dv, opt));
      const std::vector<double> saved_out = ToDoubles(out);
      const RefGrads rg = RefBackward(d, ToDoubles(dout), qd, kd, vd,
                                      dtype == DType::kF32 ? nullptr : &saved_out);
      ExpectClose(dq, rg.dq, kAtol, Rtol(dtype), what + " dq");
      ExpectClose(dk, rg.dk, kAtol, Rtol(dtype), what + " dk");
      ExpectClose(dv, rg.dv, kAtol, Rtol(dtype), what + " dv");
    }
  }
}

TEST(Attention, NonUnitInnerStrideIsCopiedPerHead) {
  // q, k, v with D as a strided dimension (transposed [B, H, D, T] buffers).
  const Dims d{1, 3, 7, 8, true};
  auto transposed = [&](uint64_t seed) {
    return RandomTensor({d.B, d.H, d.D, d.T}, DType::kF32, -1, 1, seed).Transpose(2, 3).value();
  };
  const Inputs in{transposed(800), transposed(801), transposed(802), transposed(803)};
  ASSERT_NE(in.q.stride(3), 1);
  CheckAgainstReference(d, in, "transposed inputs");
}

TEST(Attention, MaskedEntriesContributeExactlyZero) {
  // Causal: changing k and v at the last position leaves every earlier row of
  // out, lse and dq bit for bit unchanged.
  const Dims d{1, 2, 70, 8, true};
  Inputs a = MakeInputs(d, DType::kF32, 900);
  Inputs b{a.q, a.k.Clone().value(), a.v.Clone().value(), a.dout};
  ZS_ASSERT_OK_AND_ASSIGN(Tensor k_last, b.k.Narrow(2, d.T - 1, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor v_last, b.v.Narrow(2, d.T - 1, 1));
  ZS_ASSERT_OK(k_last.Fill(7.0));
  ZS_ASSERT_OK(v_last.Fill(-5.0));
  auto run = [&](const Inputs& in) {
    AttentionOutputs f = AttentionForward(in.q, in.k, in.v).value();
    AttentionGrads g = AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse).value();
    auto head_rows = [&](const Tensor& t) { return ToDoubles(t.Narrow(2, 0, d.T - 1).value()); };
    return std::vector<std::vector<double>>{head_rows(f.out), head_rows(f.lse), head_rows(g.dq)};
  };
  const auto ra = run(a), rb = run(b);
  EXPECT_EQ(ra[0], rb[0]) << "out";
  EXPECT_EQ(ra[1], rb[1]) << "lse";
  EXPECT_EQ(ra[2], rb[2]) << "dq";
}

TEST(Attention, BitwiseDeterministicAcrossThreadCounts) {
  const Dims d{2, 3, 70, 33, true};
  const Inputs in = MakeInputs(d, DType::kF32, 1000);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<double>> runs;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    AttentionOutputs f = AttentionForward(in.q, in.k, in.v).value();
    AttentionGrads g = AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse).value();
    std::vector<double> all;
    for (const Tensor* x : {&f.out, &f.lse, &g.dq, &g.dk, &g.dv}) {
      const std::vector<double> xs = ToDoubles(*x);
      all.insert(all.end(), xs.begin(), xs.end());
    }
    runs.push_back(all);
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_EQ(runs[2], runs[0]);
}

TEST(Attention, EveryInstructionSetMatchesReference) {
  // Each instruction set's GEMMs and row loops (results may differ in the last
  // bits between instruction sets, as Eigen's kernels do; each is checked).
  uint64_t seed = 1200;
  for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
    cpu::SetActiveCpuIsa(isa);
    for (bool causal : {true, false}) {
      const Dims d{1, 3, 70, 33, causal};
      CheckAgainstReference(d, MakeInputs(d, DType::kF32, seed),
                            absl::StrCat(cpu::CpuIsaName(isa), " ", Name(d, DType::kF32)));
      seed += 4;
    }
  }
  cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
}

// ---------------------------------------------------------------- grouped-query

TEST(AttentionGqa, MatchesRepeatedKvReferenceOddShapesEveryDType) {
  // H = 6 over Hkv = 3, 2 and 1 (MQA); odd T and D, one and several row blocks.
  uint64_t seed = 2000;
  for (DType dtype : kFloatDTypes) {
    for (int64_t T : {1, 7, 65}) {
      for (int64_t D : {1, 8, 33}) {
        for (int64_t kv_heads : {3, 2, 1}) {
          for (bool causal : {true, false}) {
            const Dims d{2, 6, T, D, causal};
            CheckGqaAgainstReference(d, kv_heads, MakeGqaInputs(d, kv_heads, dtype, seed),
                                     absl::StrCat(Name(d, dtype), " Hkv ", kv_heads));
            seed += 4;
          }
        }
      }
    }
  }
}

TEST(AttentionGqa, EqualsMultiHeadOnExplicitlyRepeatedKv) {
  // Query head h computes exactly what multi-head attention computes on K, V
  // repeated per query head: out, lse and dq bit for bit. dk and dv are the
  // group sums of the repeated run's (fp32, summed in another order: within
  // the bound of CheckGqaAgainstReference).
  for (int64_t kv_heads : {2, 1}) {
    for (bool causal : {true, false}) {
      const Dims d{2, 4, 70, 12, causal};
      const Inputs in = MakeGqaInputs(d, kv_heads, DType::kF32, 2500 + kv_heads);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor k_rep, Tensor::Empty({d.B, d.H, d.T, d.D}, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor v_rep, Tensor::Empty({d.B, d.H, d.T, d.D}, DType::kF32));
      const int64_t G = d.H / kv_heads;
      for (int64_t h = 0; h < d.H; ++h) {
        ZS_ASSERT_OK(k_rep.Narrow(1, h, 1).value().CopyFrom(in.k.Narrow(1, h / G, 1).value()));
        ZS_ASSERT_OK(v_rep.Narrow(1, h, 1).value().CopyFrom(in.v.Narrow(1, h / G, 1).value()));
      }
      const AttentionOptions opt{.causal = causal};
      ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs gqa, AttentionForward(in.q, in.k, in.v, opt));
      ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs mha, AttentionForward(in.q, k_rep, v_rep, opt));
      const std::string what = absl::StrCat(Name(d, DType::kF32), " Hkv ", kv_heads);
      EXPECT_EQ(ToDoubles(gqa.out), ToDoubles(mha.out)) << what << " out";
      EXPECT_EQ(ToDoubles(gqa.lse), ToDoubles(mha.lse)) << what << " lse";
      ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads gg, AttentionBackward(in.dout, in.q, in.k, in.v,
                                                                   gqa.out, gqa.lse, opt));
      ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads mg, AttentionBackward(in.dout, in.q, k_rep, v_rep,
                                                                   mha.out, mha.lse, opt));
      EXPECT_EQ(ToDoubles(gg.dq), ToDoubles(mg.dq)) << what << " dq";
      ExpectClose(gg.dk, SumGroups(d, kv_heads, ToDoubles(mg.dk)), GroupAtol(G), 1e-5, what + " dk");
      ExpectClose(gg.dv, SumGroups(d, kv_heads, ToDoubles(mg.dv)), GroupAtol(G), 1e-5, what + " dv");
    }
  }
}

TEST(AttentionGqa, StridedViewsOfAFusedBuffer) {
  // Llama's layout: one projection [B, T, (H + 2 Hkv) D] seen as
  // [B, T, H + 2 Hkv, D]: q the first H heads, k the next Hkv, v the last
  // Hkv, each transposed to [B, heads, T, D] (row stride (H + 2 Hkv) D);
  // the gradients into the same views of one fused gradient buffer.
  for (DType dtype : kFloatDTypes) {
    for (int64_t kv_heads : {2, 1}) {
      for (bool causal : {true, false}) {
        const int64_t B = 2, T = 33, H = 4, D = 8, W = H + 2 * kv_heads;
        const Dims d{B, H, T, D, causal};
        const Tensor fused = RandomTensor({B, T, W, D}, dtype, -1, 1, 2600 + kv_heads);
        auto heads = [](const Tensor& t, int64_t first, int64_t n) {
          return t.Narrow(2, first, n).value().Transpose(1, 2).value();  // [B, n, T, D]
        };
        const Tensor q = heads(fused, 0, H), k = heads(fused, H, kv_heads),
                     v = heads(fused, H + kv_heads, kv_heads);
        ASSERT_EQ(k.stride(2), W * D);
        const Tensor dout = RandomTensor({B, H, T, D}, dtype, -1, 1, 2610);
        const std::string what =
            absl::StrCat(Name(d, dtype), " Hkv ", kv_heads, " fused");
        ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs fwd, AttentionForward(q, k, v, {.causal = causal}));
        const std::vector<double> qd = ToDoubles(q), kd = ToDoubles(k), vd = ToDoubles(v);
        const RefFwd ref = RefForwardGqa(d, kv_heads, qd, kd, vd);
        ExpectClose(fwd.out, ref.out, kAtol, Rtol(dtype), what + " out");
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dfused, Tensor::Zeros({B, T, W, D}, dtype));
        ZS_ASSERT_OK(AttentionBackward(dout, q, k, v, fwd.out, fwd.lse, heads(dfused, 0, H),
                                       heads(dfused, H, kv_heads),
                                       heads(dfused, H + kv_heads, kv_heads), {.causal = causal}));
        const std::vector<double> saved_out = ToDoubles(fwd.out);
        const RefGrads rg = RefBackwardGqa(d, kv_heads, ToDoubles(dout), qd, kd, vd,
                                           dtype == DType::kF32 ? nullptr : &saved_out);
        const int64_t G = H / kv_heads;
        ExpectClose(heads(dfused, 0, H), rg.dq, kAtol, Rtol(dtype), what + " dq");
        ExpectClose(heads(dfused, H, kv_heads), rg.dk, GroupAtol(G), Rtol(dtype), what + " dk");
        ExpectClose(heads(dfused, H + kv_heads, kv_heads), rg.dv, GroupAtol(G), Rtol(dtype),
                    what + " dv");
      }
    }
  }
}

TEST(AttentionGqa, NonUnitInnerStrideIsCopiedPerGroup) {
  // k, v, dk, dv with D strided (transposed [B, Hkv, D, T] buffers): the
  // backward loads each kv head once per group and writes its dK, dV back once.
  for (int64_t kv_heads : {2, 1}) {
    const Dims d{1, 4, 9, 8, true};
    auto transposed = [&](int64_t heads, uint64_t seed) {
      return RandomTensor({d.B, heads, d.D, d.T}, DType::kF32, -1, 1, seed).Transpose(2, 3).value();
    };
    const Inputs in{transposed(d.H, 2700), transposed(kv_heads, 2701), transposed(kv_heads, 2702),
                    transposed(d.H, 2703)};
    ASSERT_NE(in.k.stride(3), 1);
    CheckGqaAgainstReference(d, kv_heads, in, absl::StrCat("transposed inputs, Hkv ", kv_heads));
    ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs f, AttentionForward(in.q, in.k, in.v));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dq, Tensor::Empty({d.B, d.H, d.T, d.D}, DType::kF32));
    const Tensor dk = transposed(kv_heads, 2704), dv = transposed(kv_heads, 2705);
    ZS_ASSERT_OK(AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse, dq, dk, dv));
    const RefGrads rg = RefBackwardGqa(d, kv_heads, ToDoubles(in.dout), ToDoubles(in.q),
                                       ToDoubles(in.k), ToDoubles(in.v));
    const int64_t G = d.H / kv_heads;
    ExpectClose(dk, rg.dk, GroupAtol(G), 1e-5, "transposed dk");
    ExpectClose(dv, rg.dv, GroupAtol(G), 1e-5, "transposed dv");
  }
}

TEST(AttentionGqa, BitwiseDeterministicAcrossThreadCounts) {
  // The backward's tasks are (b, kv head) groups: 2 for MQA at B = 2, so 3
  // threads leave one idle and 1 thread runs both; every count gives the same bits.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t kv_heads : {3, 1}) {
      const Dims d{2, 6, 70, 33, true};
      const Inputs in = MakeGqaInputs(d, kv_heads, dtype, 2800 + kv_heads);
      const int threads = omp_get_max_threads();
      std::vector<std::vector<double>> runs;
      for (int t : {1, 2, 3, 4}) {
        omp_set_num_threads(t);
        AttentionOutputs f = AttentionForward(in.q, in.k, in.v).value();
        AttentionGrads g = AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse).value();
        std::vector<double> all;
        for (const Tensor* x : {&f.out, &f.lse, &g.dq, &g.dk, &g.dv}) {
          const std::vector<double> xs = ToDoubles(*x);
          all.insert(all.end(), xs.begin(), xs.end());
        }
        runs.push_back(all);
      }
      omp_set_num_threads(threads);
      for (size_t r = 1; r < runs.size(); ++r) {
        EXPECT_EQ(runs[r], runs[0]) << DTypeName(dtype) << " Hkv " << kv_heads << " run " << r;
      }
    }
  }
}

TEST(AttentionGqa, EveryInstructionSetMatchesReference) {
  uint64_t seed = 2900;
  for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
    cpu::SetActiveCpuIsa(isa);
    const Dims d{1, 4, 70, 33, true};
    CheckGqaAgainstReference(d, 1, MakeGqaInputs(d, 1, DType::kF32, seed),
                             absl::StrCat(cpu::CpuIsaName(isa), " MQA ", Name(d, DType::kF32)));
    seed += 4;
  }
  cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
}

TEST(AttentionGqa, Errors) {
  const Dims d{1, 8, 5, 4, true};
  const Inputs in = MakeGqaInputs(d, 2, DType::kF32, 3000);
  ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs f, AttentionForward(in.q, in.k, in.v));
  Tensor k3 = RandomTensor({1, 3, 5, 4}, DType::kF32, -1, 1, 1);
  EXPECT_THAT(AttentionForward(in.q, k3, k3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AttentionForward: k has 3 heads, which does not divide q's 8")));
  Tensor k16 = RandomTensor({1, 16, 5, 4}, DType::kF32, -1, 1, 2);
  EXPECT_THAT(AttentionForward(in.q, k16, k16, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("k has 16 heads, which does not divide q's 8")));
  Tensor k_t = RandomTensor({1, 2, 6, 4}, DType::kF32, -1, 1, 3);
  EXPECT_THAT(AttentionForward(in.q, k_t, k_t, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("k has shape [1, 2, 6, 4], expected [1, 2, 5, 4] (the shape of q "
                                 "with 2 heads)")));
  Tensor v4 = RandomTensor({1, 4, 5, 4}, DType::kF32, -1, 1, 4);
  EXPECT_THAT(AttentionForward(in.q, in.k, v4, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("v has shape [1, 4, 5, 4], expected [1, 2, 5, 4] (the shape of k)")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor k2d, in.k.View({2, 5, 4}));
  EXPECT_THAT(AttentionForward(in.q, k2d, in.v, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("k has shape [2, 5, 4], expected 4 dims [B, Hkv, T, D]")));
  // Gradients of k and v have k's heads, not q's.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dq, Tensor::Empty({1, 8, 5, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dkv, Tensor::Empty({1, 2, 5, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wide, Tensor::Empty({1, 8, 5, 4}, DType::kF32));
  EXPECT_THAT(AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse, dq, wide, dkv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dk has shape [1, 8, 5, 4], expected [1, 2, 5, 4] (the shape of k)")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dq_bad, Tensor::Empty({1, 2, 5, 4}, DType::kF32));
  EXPECT_THAT(AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse, dq_bad, dkv, wide),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dq has shape [1, 2, 5, 4], expected [1, 8, 5, 4] (the shape of q)")));
  EXPECT_THAT(AttentionBackward(in.dout, in.q, Tensor(), in.v, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("undefined k")));
  // The allocating backward shapes dk and dv like k.
  ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads g,
                          AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse));
  EXPECT_EQ(g.dq.shape(), in.q.shape());
  EXPECT_EQ(g.dk.shape(), in.k.shape());
  EXPECT_EQ(g.dv.shape(), in.v.shape());
}

TEST(Attention, EmptyBatchOrSequenceIsANoOp) {
  for (const Shape& s : {Shape{0, 2, 5, 4}, Shape{2, 2, 0, 4}}) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor q, Tensor::Zeros(s, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs f, AttentionForward(q, q, q));
    ZS_ASSERT_OK(AttentionBackward(q, q, q, q, f.out, f.lse).status());
  }
}

TEST(Attention, Errors) {
  const Dims d{1, 2, 5, 4, true};
  const Inputs in = MakeInputs(d, DType::kF32, 1100);
  ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs f, AttentionForward(in.q, in.k, in.v));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor q3, in.q.View({2, 5, 4}));
  EXPECT_THAT(AttentionForward(q3, q3, q3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AttentionForward: q has shape [2, 5, 4], expected 4 dims")));
  Tensor k6 = RandomTensor({1, 2, 6, 4}, DType::kF32, -1, 1, 1);
  EXPECT_THAT(AttentionForward(in.q, k6, in.v, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("k has shape [1, 2, 6, 4], expected [1, 2, 5, 4] (the shape of q)")));
  Tensor vb = RandomTensor({1, 2, 5, 4}, DType::kBF16, -1, 1, 2);
  EXPECT_THAT(AttentionForward(in.q, in.k, vb, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("v has dtype bf16, expected f32 (the dtype of q)")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor qi, Tensor::Zeros({1, 2, 5, 4}, DType::kI32));
  EXPECT_THAT(AttentionForward(qi, qi, qi, qi, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("q has dtype i32, expected f32, bf16 or f16")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lse_bad, Tensor::Empty({1, 2, 4}, DType::kF32));
  EXPECT_THAT(AttentionForward(in.q, in.k, in.v, f.out, lse_bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lse is f32 [1, 2, 4], expected f32 [1, 2, 5] [B, H, T]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lse_bf, Tensor::Empty({1, 2, 5}, DType::kBF16));
  EXPECT_THAT(AttentionBackward(in.dout, in.q, in.k, in.v, f.out, lse_bf),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lse is bf16 [1, 2, 5]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor z, Tensor::Zeros({1, 2, 5, 0}, DType::kF32));
  EXPECT_THAT(AttentionForward(z, z, z),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected D >= 1")));
  EXPECT_THAT(AttentionForward(in.q, in.k, in.v, in.q, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AttentionForward: output out overlaps input q")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dq, Tensor::Empty({1, 2, 5, 4}, DType::kF32));
  EXPECT_THAT(AttentionBackward(in.dout, in.q, in.k, in.v, f.out, f.lse, dq, in.k, dq),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AttentionBackward: output dk overlaps input k")));
  EXPECT_THAT(AttentionForward(in.q, in.k, in.v, {.scale = NAN}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scale must be finite")));
  EXPECT_THAT(AttentionForward(Tensor(), in.k, in.v, f.out, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("undefined q")));
  // CUDA tensors over host memory: without a device they fail cleanly
  // (tests/kernels/cuda_attention_test.cc checks the CUDA kernels on a GPU).
  std::vector<float> mem(4 * 40);
  const Tensor g0 = Tensor::Wrap(mem.data(), {1, 2, 5, 4}, DType::kF32, Device::Cuda(0));
  const Tensor g1 = Tensor::Wrap(mem.data() + 40, {1, 2, 5, 4}, DType::kF32, Device::Cuda(0));
  const Tensor g2 = Tensor::Wrap(mem.data() + 80, {1, 2, 5}, DType::kF32, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) {
    EXPECT_FALSE(AttentionForward(g0, g0, g0, g1, g2).ok());
  }
  EXPECT_THAT(AttentionForward(in.q, in.k, in.v, g1, f.lse),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("different devices")));
}

}  // namespace
}  // namespace zeroshard
