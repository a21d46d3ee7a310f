// The Llama ops (RmsNorm, Silu, SiluGate, Rope): forward against a
// double-precision reference and the autograd gradient of L = sum(w * op(x...))
// against central finite differences of that reference (tests/autograd/op_check.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/autograd/op_check.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::CheckOp;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;
using Vec = std::vector<double>;

Tensor R(Shape s, float lo = -1, float hi = 1, uint64_t seed = 1) {
  return RandomTensor(s, DType::kF32, lo, hi, seed);
}

Vec RefRmsNorm(const Vec& x, const Vec& w, int rows, int c, double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int j = 0; j < c; ++j) ms += x[r * c + j] * x[r * c + j] / c;
    for (int j = 0; j < c; ++j) y[r * c + j] = x[r * c + j] / std::sqrt(ms + eps) * (w.empty() ? 1.0 : w[j]);
  }
  return y;
}

// ---------------------------------------------------------------- RmsNorm

TEST(LlamaOps, RmsNorm) {
  const int rows = 6, c = 7;
  CheckOp("RmsNorm", [](auto& v) { return ops::RmsNorm(v[0], v[1], 1e-6); },
          [&](const std::vector<Vec>& x) { return RefRmsNorm(x[0], x[1], rows, c, 1e-6); },
          {R({2, 3, c}, -2, 2, 41), R({c}, 0.5f, 1.5f, 42)}, 5e-4);
}

TEST(LlamaOps, RmsNormWithoutWeightAndWithAFrozenOne) {
  const int rows = 5, c = 9;
  CheckOp("RmsNorm, no weight", [](auto& v) { return ops::RmsNorm(v[0], Variable(), 1e-5); },
          [&](const std::vector<Vec>& x) { return RefRmsNorm(x[0], {}, rows, c, 1e-5); },
          {R({rows, c}, -2, 2, 43)}, 5e-4);
  // A weight that needs no gradient: only dx.
  Variable x(R({rows, c}, -2, 2, 44), true);
  Variable w(R({c}, 0.5f, 1.5f, 45));
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::RmsNorm(x, w, 1e-5));
  ZS_ASSERT_OK_AND_ASSIGN(Variable s, ops::SumAll(y));
  ZS_ASSERT_OK(autograd::Backward(s));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  // sum_j d(x_j rstd w_j)/dx_i over a row: rstd (w_i - xhat_i mean(w xhat)).
  const Vec xv = ToDoubles(x.value()), wv = ToDoubles(w.value()), g = ToDoubles(x.grad());
  for (int r = 0; r < rows; ++r) {
    double ms = 0, mwx = 0;
    for (int j = 0; j < c; ++j) ms += xv[r * c + j] * xv[r * c + j] / c;
    const double rs = 1 / std::sqrt(ms + 1e-5);
    for (int j = 0; j < c; ++j) mwx += wv[j] * xv[r * c + j] * rs / c;
    for (int i = 0; i < c; ++i) {
      EXPECT_NEAR(g[r * c + i], rs * (wv[i] - xv[r * c + i] * rs * mwx), 1e-5) << r << ", " << i;
    }
  }
}

// ---------------------------------------------------------------- Silu, SiluGate

double Silu(double x) { return x / (1 + std::exp(-x)); }

TEST(LlamaOps, Silu) {
  CheckOp("Silu", [](auto& v) { return ops::Silu(v[0]); },
          [](const std::vector<Vec>& x) {
            Vec y(x[0].size());
            for (size_t i = 0; i < y.size(); ++i) y[i] = Silu(x[0][i]);
            return y;
          },
          {R({7, 5}, -6, 6, 51)});
}

TEST(LlamaOps, SiluGate) {
  CheckOp("SiluGate", [](auto& v) { return ops::SiluGate(v[0], v[1]); },
          [](const std::vector<Vec>& x) {
            Vec y(x[0].size());
            for (size_t i = 0; i < y.size(); ++i) y[i] = Silu(x[0][i]) * x[1][i];
            return y;
          },
          {R({2, 3, 11}, -6, 6, 52), R({2, 3, 11}, -2, 2, 53)});
}

TEST(LlamaOps, SiluGateOfMixedDtypesGivesEachItsOwnGradientDtype) {
  Variable gate(RandomTensor({4, 6}, DType::kBF16, -3, 3, 54), true);
  Variable up(R({4, 6}, -2, 2, 55), true);
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::SiluGate(gate, up));
  ZS_ASSERT_OK_AND_ASSIGN(Variable s, ops::SumAll(y));
  ZS_ASSERT_OK(autograd::Backward(s));
  EXPECT_EQ(gate.grad().dtype(), DType::kBF16);
  EXPECT_EQ(up.grad().dtype(), DType::kF32);
  // d/dup sum(silu(g) up) = silu(g), in f32 (fp32 silu: a few ulp).
  const Vec gv = ToDoubles(gate.value()), du = ToDoubles(up.grad());
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(du[i], Silu(gv[i]), 1e-6 * (1 + std::fabs(Silu(gv[i])))) << i;
}

// ---------------------------------------------------------------- Rope

TEST(LlamaOps, RopeOnAPermutedView) {
  // x [B, H, T, D] permuted to [B, T, H, D] (a strided view, as attention's
  // layouts give); the gradient flows back through the permute.
  const int B = 2, H = 3, T = 4, D = 6;
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables tables, MakeRopeTables({.theta = 100.0}, 5, D));
  CheckOp("Rope",
          [&](auto& v) -> absl::StatusOr<Variable> {
            ZS_ASSIGN_OR_RETURN(Variable xt, ops::Permute(v[0], {0, 2, 1, 3}));
            return ops::Rope(xt, tables);
          },
          [&](const std::vector<Vec>& x) {
            Vec y(x[0].size());
            for (int b = 0; b < B; ++b)
              for (int t = 0; t < T; ++t)
                for (int h = 0; h < H; ++h)
                  for (int i = 0; i < D / 2; ++i) {
                    const double a = t * std::pow(100.0, -2.0 * i / D);
                    const double lo = x[0][((b * H + h) * T + t) * D + i];
                    const double hi = x[0][((b * H + h) * T + t) * D + i + D / 2];
                    const int o = ((b * T + t) * H + h) * D;
                    y[o + i] = lo * std::cos(a) - hi * std::sin(a);
                    y[o + i + D / 2] = hi * std::cos(a) + lo * std::sin(a);
                  }
            return y;
          },
          {R({B, H, T, D}, -2, 2, 61)});
}

}  // namespace
}  // namespace zeroshard
