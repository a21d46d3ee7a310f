// Every differentiable op: forward against a double-precision reference, and
// the autograd gradient of L = sum(w * op(x...)) against central finite
// differences of that reference computed in double.
#include "zeroshard/autograd/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/autograd/op_check.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::ToDoubles;

using Vec = std::vector<double>;
using ::zeroshard::testing::CheckOp;

Tensor R(Shape s, float lo = -1, float hi = 1, uint64_t seed = 1) {
  return RandomTensor(s, DType::kF32, lo, hi, seed);
}

// Index helpers for the references.
Vec Map(const Vec& x, const std::function<double(double)>& f) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

TEST(Ops, Unary) {
  const double c = std::sqrt(2 / M_PI);
  struct Case {
    std::string name;
    std::function<absl::StatusOr<Variable>(const Variable&)> op;
    std::function<double(double)> f;
    float lo, hi;
  };
  const std::vector<Case> cases = {
      {"Neg", ops::Neg, [](double x) { return -x; }, -2, 2},
      {"Exp", ops::Exp, [](double x) { return std::exp(x); }, -2, 2},
      {"Log", ops::Log, [](double x) { return std::log(x); }, 0.5f, 3},
      {"Tanh", ops::Tanh, [](double x) { return std::tanh(x); }, -2, 2},
      {"Sqrt", ops::Sqrt, [](double x) { return std::sqrt(x); }, 0.5f, 3},
      {"Rsqrt", ops::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.5f, 3},
      {"Relu", ops::Relu, [](double x) { return x > 0 ? x : 0; }, 0.1f, 2},
      {"Gelu", ops::Gelu,
       [c](double x) { return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x))); }, -3, 3},
      {"Sigmoid", ops::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -3, 3},
      {"Square", ops::Square, [](double x) { return x * x; }, -2, 2},
      {"PowScalar", [](const Variable& x) { return ops::PowScalar(x, 1.7); },
       [](double x) { return std::pow(x, 1.7); }, 0.5f, 2},
      {"Affine", [](const Variable& x) { return ops::Affine(x, -1.5, 0.25); },
       [](double x) { return -1.5 * x + 0.25; }, -2, 2},
  };
  for (const Case& k : cases) {
    CheckOp(k.name, [&](const std::vector<Variable>& v) { return k.op(v[0]); },
            [&](const std::vector<Vec>& x) { return Map(x[0], k.f); }, {R({7, 5}, k.lo, k.hi, 3)});
  }
}

TEST(Ops, BinaryWithBroadcasting) {
  // a [3, 1, 5] with b [4, 1]: result [3, 4, 5].
  auto ref = [](const std::function<double(double, double)>& f) {
    return [f](const std::vector<Vec>& x) {
      Vec y(60);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j)
          for (int k = 0; k < 5; ++k) y[(i * 4 + j) * 5 + k] = f(x[0][i * 5 + k], x[1][j]);
      return y;
    };
  };
  const std::vector<Tensor> in = {R({3, 1, 5}, 0.5f, 2, 1), R({4, 1}, 0.5f, 2, 2)};
  CheckOp("Add", [](auto& v) { return ops::Add(v[0], v[1]); }, ref([](double a, double b) { return a + b; }), in);
  CheckOp("Sub", [](auto& v) { return ops::Sub(v[0], v[1]); }, ref([](double a, double b) { return a - b; }), in);
  CheckOp("Mul", [](auto& v) { return ops::Mul(v[0], v[1]); }, ref([](double a, double b) { return a * b; }), in);
  CheckOp("Div", [](auto& v) { return ops::Div(v[0], v[1]); }, ref([](double a, double b) { return a / b; }), in);
}

// Reference batched matmul on row-major inputs with optional transposes.
Vec RefMatMul(const Vec& a, const Vec& b, int64_t batch, int64_t m, int64_t k, int64_t n, bool ta,
              bool tb, bool shared_b) {
  Vec c(batch * m * n, 0.0);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = ta ? a[t * m * k + p * m + i] : a[t * m * k + i * k + p];
          const int64_t bo = shared_b ? 0 : t * k * n;
          const double y = tb ? b[bo + j * k + p] : b[bo + p * n + j];
          s += x * y;
        }
        c[(t * m + i) * n + j] = s;
      }
  return c;
}

TEST(Ops, MatMulEveryTransposeBatchedAndShared) {
  const int64_t m = 3, k = 5, n = 4;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = ta ? R({2, k, m}, -1, 1, 5) : R({2, m, k}, -1, 1, 5);
      Tensor b = tb ? R({2, n, k}, -1, 1, 6) : R({2, k, n}, -1, 1, 6);
      CheckOp("MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
              [&](auto& v) { return ops::MatMul(v[0], v[1], {.transpose_a = ta, .transpose_b = tb}); },
              [&](const std::vector<Vec>& x) { return RefMatMul(x[0], x[1], 2, m, k, n, ta, tb, false); },
              {a, b});
    }
    // b shared by the batch.
    Tensor a = R({2, m, k}, -1, 1, 7);
    Tensor b = ta ? R({n, k}, -1, 1, 8) : R({k, n}, -1, 1, 8);
    CheckOp("MatMul shared b, tb=" + std::to_string(ta),
            [&](auto& v) { return ops::MatMul(v[0], v[1], {.transpose_b = ta}); },
            [&](const std::vector<Vec>& x) { return RefMatMul(x[0], x[1], 2, m, k, n, false, ta, true); },
            {a, b});
  }
}

TEST(Ops, Linear) {
  // x [2, 3, 5] @ w[4, 5]^T + b[4]
  CheckOp("Linear", [](auto& v) { return ops::Linear(v[0], v[1], v[2]); },
          [](const std::vector<Vec>& x) {
            Vec y = RefMatMul(x[0], x[1], 1, 6, 5, 4, false, true, true);
            for (int r = 0; r < 6; ++r)
              for (int j = 0; j < 4; ++j) y[r * 4 + j] += x[2][j];
            return y;
          },
          {R({2, 3, 5}, -1, 1, 9), R({4, 5}, -1, 1, 10), R({4}, -1, 1, 11)});
}

// GPT-2's MLP as one op (Note [GELU in the GEMM]): against a double reference
// with finite differences, then bit for bit against Linear, Gelu, Linear (the
// CPU computes the same steps) in f32 and bf16, with frozen weights, without
// biases, and without grad mode.
TEST(Ops, GeluMlpIsLinearGeluLinear) {
  auto gelu = [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); };
  // x [2, 3, 5] -> w1 [6, 5] + b1 -> GELU -> w2 [4, 6] + b2
  CheckOp("GeluMlp", [](auto& v) { return ops::GeluMlp(v[0], v[1], v[2], v[3], v[4]); },
          [&](const std::vector<Vec>& x) {
            Vec h = RefMatMul(x[0], x[1], 1, 6, 5, 6, false, true, true);
            for (int r = 0; r < 6; ++r)
              for (int j = 0; j < 6; ++j) h[r * 6 + j] = gelu(h[r * 6 + j] + x[2][j]);
            Vec y = RefMatMul(h, x[3], 1, 6, 6, 4, false, true, true);
            for (int r = 0; r < 6; ++r)
              for (int j = 0; j < 4; ++j) y[r * 4 + j] += x[4][j];
            return y;
          },
          {R({2, 3, 5}, -1, 1, 12), R({6, 5}, -1, 1, 13), R({6}, -1, 1, 14), R({4, 6}, -1, 1, 15),
           R({4}, -1, 1, 16)});

  struct Case {
    DType dtype;
    bool biases;
    bool train_w1, train_w2;
    bool grad_mode;
  };
  for (const Case& c : {Case{DType::kF32, true, true, true, true}, Case{DType::kBF16, true, true, true, true},
                        Case{DType::kF32, false, true, true, true}, Case{DType::kBF16, true, false, true, true},
                        Case{DType::kF32, true, true, false, true}, Case{DType::kF32, true, true, true, false}}) {
    SCOPED_TRACE(std::string(DTypeName(c.dtype)) + (c.biases ? "" : " no biases") + (c.train_w1 ? "" : " w1 frozen") +
                 (c.train_w2 ? "" : " w2 frozen") + (c.grad_mode ? "" : " no grad mode"));
    const std::vector<Tensor> t = {RandomTensor({2, 7, 8}, c.dtype, -1, 1, 20),
                                   RandomTensor({24, 8}, c.dtype, -0.5, 0.5, 21),
                                   RandomTensor({24}, c.dtype, -1, 1, 22),
                                   RandomTensor({8, 24}, c.dtype, -0.5, 0.5, 23),
                                   RandomTensor({8}, c.dtype, -1, 1, 24)};
    const Tensor w = RandomTensor({2, 7, 8}, c.dtype, -1, 1, 25);
    auto run = [&](bool fused) -> std::vector<Vec> {
      std::vector<Variable> v;
      for (size_t i = 0; i < t.size(); ++i) {
        const bool trains = (i == 1 ? c.train_w1 : i == 3 ? c.train_w2 : true);
        v.emplace_back(t[i].Clone().value(), trains);
      }
      const Variable b1 = c.biases ? v[2] : Variable(), b2 = c.biases ? v[4] : Variable();
      std::optional<autograd::NoGradGuard> no_grad;
      if (!c.grad_mode) no_grad.emplace();
      absl::StatusOr<Variable> y;
      if (fused) {
        y = ops::GeluMlp(v[0], v[1], b1, v[3], b2);
      } else {
        y = ops::Linear(ops::Gelu(ops::Linear(v[0], v[1], b1).value()).value(), v[3], b2);
      }
      no_grad.reset();
      EXPECT_TRUE(y.ok()) << y.status();
      std::vector<Vec> out = {ToDoubles(y->value())};
      if (!c.grad_mode) {
        EXPECT_FALSE(y->requires_grad());
        return out;
      }
      Variable loss = ops::SumAll(ops::Mul(*y, Variable(w)).value()).value();
      EXPECT_TRUE(autograd::Backward(loss).ok());
      for (const Variable& x : v) out.push_back(x.grad().defined() ? ToDoubles(x.grad()) : Vec{});
      return out;
    };
    const std::vector<Vec> fused = run(true), composed = run(false);
    ASSERT_EQ(fused.size(), composed.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], composed[i]) << "output " << i;
  }

  // What is refused, with what was found.
  Variable x(R({2, 3, 5}), true), w1(R({6, 5}), true), w2(R({4, 7}), true), b1(R({5}), true);
  EXPECT_THAT(ops::GeluMlp(x, w1, Variable(), w2, Variable()).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::zeroshard::testing::HasSubstr("expected x [..., in], w1 [hidden, in], "
                                                                             "w2 [out, hidden]")));
  EXPECT_THAT(ops::GeluMlp(x, w1, b1, w2, Variable()).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::zeroshard::testing::HasSubstr("GeluMlp (first layer): bias of shape [5]")));
}

TEST(Ops, Reductions) {
  // x [3, 4, 5]
  auto reduce = [](int dim, bool mean) {
    return [dim, mean](const std::vector<Vec>& x) {
      const int sizes[3] = {3, 4, 5};
      Vec y(60 / sizes[dim], 0.0);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j)
          for (int k = 0; k < 5; ++k) {
            const int idx[3] = {i, j, k};
            int o = 0;
            for (int d = 0; d < 3; ++d) {
              if (d == dim) continue;
              o = o * sizes[d] + idx[d];
            }
            y[o] += x[0][(i * 4 + j) * 5 + k] / (mean ? sizes[dim] : 1);
          }
      return y;
    };
  };
  for (int dim = 0; dim < 3; ++dim) {
    CheckOp("Sum dim " + std::to_string(dim), [dim](auto& v) { return ops::Sum(v[0], dim); },
            reduce(dim, false), {R({3, 4, 5})});
    CheckOp("Mean keepdim dim " + std::to_string(dim),
            [dim](auto& v) { return ops::Mean(v[0], dim, true); }, reduce(dim, true), {R({3, 4, 5})});
  }
  CheckOp("SumAll", [](auto& v) { return ops::SumAll(v[0]); },
          [](const std::vector<Vec>& x) {
            double s = 0;
            for (double v : x[0]) s += v;
            return Vec{s};
          },
          {R({7, 3})});
  CheckOp("MeanAll", [](auto& v) { return ops::MeanAll(v[0]); },
          [](const std::vector<Vec>& x) {
            double s = 0;
            for (double v : x[0]) s += v;
            return Vec{s / x[0].size()};
          },
          {R({7, 3})});
}

TEST(Ops, Views) {
  // Each view feeds an elementwise op so the gradient flows through a real node.
  CheckOp("Transpose", [](auto& v) -> absl::StatusOr<Variable> {
            ZS_ASSIGN_OR_RETURN(Variable t, ops::Transpose(v[0], 0, 1));
            return ops::Square(t);
          },
          [](const std::vector<Vec>& x) {
            Vec y(12);
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 4; ++j) y[j * 3 + i] = x[0][i * 4 + j] * x[0][i * 4 + j];
            return y;
          },
          {R({3, 4})});
  CheckOp("Permute+Reshape", [](auto& v) -> absl::StatusOr<Variable> {
            ZS_ASSIGN_OR_RETURN(Variable p, ops::Permute(v[0], {2, 0, 1}));
            ZS_ASSIGN_OR_RETURN(Variable r, ops::Reshape(p, {4, 6}));
            return ops::Exp(r);
          },
          [](const std::vector<Vec>& x) {
            Vec y(24);
            int o = 0;
            for (int k = 0; k < 4; ++k)
              for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 3; ++j) y[o++] = std::exp(x[0][(i * 3 + j) * 4 + k]);
            return y;
          },
          {R({2, 3, 4})});
  CheckOp("Narrow", [](auto& v) -> absl::StatusOr<Variable> {
            ZS_ASSIGN_OR_RETURN(Variable n, ops::Narrow(v[0], 1, 1, 2));
            return ops::Square(n);
          },
          [](const std::vector<Vec>& x) {
            Vec y;
            for (int i = 0; i < 3; ++i)
              for (int j = 1; j < 3; ++j) y.push_back(x[0][i * 4 + j] * x[0][i * 4 + j]);
            return y;
          },
          {R({3, 4})});
  CheckOp("Expand+Contiguous", [](auto& v) -> absl::StatusOr<Variable> {
            ZS_ASSIGN_OR_RETURN(Variable e, ops::Expand(v[0], {3, 4}));
            ZS_ASSIGN_OR_RETURN(Variable c, ops::Contiguous(e));
            return ops::Square(c);
          },
          [](const std::vector<Vec>& x) {
            Vec y;
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 4; ++j) y.push_back(x[0][j] * x[0][j]);
            return y;
          },
          {R({1, 4})});
}

TEST(Ops, CastRoundTripsTheGradient) {
  Variable x(R({5}), true);
  ZS_ASSERT_OK_AND_ASSIGN(Variable h, ops::Cast(x, DType::kBF16));
  EXPECT_EQ(h.dtype(), DType::kBF16);
  ZS_ASSERT_OK_AND_ASSIGN(Variable s, ops::SumAll(h));
  ZS_ASSERT_OK(autograd::Backward(s));
  EXPECT_EQ(x.grad().dtype(), DType::kF32);
  EXPECT_EQ(ToDoubles(x.grad()), Vec(5, 1.0));
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

// Reference causal attention in double over q [B, H, T, D] and k, v
// [B, Hkv, T, D]: query head h reads kv head h / (H / Hkv) (Hkv = H: plain
// multi-head attention).
Vec RefAttention(const Vec& q, const Vec& k, const Vec& v, int B, int H, int T, int D, int Hkv = 0) {
  if (Hkv == 0) Hkv = H;
  Vec out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int bh = 0; bh < B * H; ++bh) {
    const int o = bh * T * D;
    const int okv = (bh / H * Hkv + bh % H / (H / Hkv)) * T * D;
    for (int i = 0; i < T; ++i) {
      std::vector<double> s(i + 1);
      double m = -1e300;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += q[o + i * D + d] * k[okv + j * D + d];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (int j = 0; j <= i; ++j) z += std::exp(s[j] - m);
      for (int j = 0; j <= i; ++j) {
        const double p = std::exp(s[j] - m) / z;
        for (int d = 0; d < D; ++d) out[o + i * D + d] += p * v[okv + j * D + d];
      }
    }
  }
  return out;
}

TEST(Ops, CausalAttention) {
  const int B = 2, H = 2, T = 5, D = 3;
  CheckOp("Attention", [](auto& v) { return ops::Attention(v[0], v[1], v[2]); },
          [&](const std::vector<Vec>& x) { return RefAttention(x[0], x[1], x[2], B, H, T, D); },
          {R({B, H, T, D}, -1, 1, 21), R({B, H, T, D}, -1, 1, 22), R({B, H, T, D}, -1, 1, 23)});
}

TEST(Ops, GroupedQueryAttentionGradientsHaveTheShapesOfKAndV) {
  // Grouped-query (Hkv = 2) and multi-query (Hkv = 1) attention: k and v with
  // fewer heads than q, their gradients [B, Hkv, T, D] summed over each
  // group. CheckOp's tolerance (2e-4 relative to 1 + |fd|) covers fp32 sums
  // over the G = H / Hkv = 2 or 4 query heads of a kv head (about G 1e-6 here).
  const int B = 2, H = 4, T = 5, D = 3;
  for (int Hkv : {2, 1}) {
    CheckOp("Attention Hkv " + std::to_string(Hkv),
            [](auto& v) { return ops::Attention(v[0], v[1], v[2]); },
            [&](const std::vector<Vec>& x) { return RefAttention(x[0], x[1], x[2], B, H, T, D, Hkv); },
            {R({B, H, T, D}, -1, 1, 31), R({B, Hkv, T, D}, -1, 1, 32), R({B, Hkv, T, D}, -1, 1, 33)});
    Variable q(R({B, H, T, D}, -1, 1, 34), true), k(R({B, Hkv, T, D}, -1, 1, 35), true),
        v(R({B, Hkv, T, D}, -1, 1, 36), true);
    ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Attention(q, k, v));
    ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(y));
    ZS_ASSERT_OK(autograd::Backward(loss));
    EXPECT_EQ(q.grad().shape(), (Shape{B, H, T, D}));
    EXPECT_EQ(k.grad().shape(), (Shape{B, Hkv, T, D}));
    EXPECT_EQ(v.grad().shape(), (Shape{B, Hkv, T, D}));
  }
  // Heads that do not divide q's are refused with what was found.
  Variable q(R({B, H, T, D}), true), k3(R({B, 3, T, D}), true);
  EXPECT_THAT(ops::Attention(q, k3, k3).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::zeroshard::testing::HasSubstr(
                                                 "k has 3 heads, which does not divide q's 4")));
}

// QkvAttention (Note [Packed attention]): q, k and v read from a packed
// [B, T, 3C] and the heads written side by side into [B, T, C]. Against the
// double reference through finite differences, and bitwise against the
// composition it replaces (Reshape, Permute, Split, Attention, Transpose,
// Reshape: the same kernel on the same values, only strides differ).
TEST(Ops, QkvAttentionIsAttentionOverThePackedHeads) {
  const int B = 2, H = 2, T = 5, D = 3, C = H * D;
  // Element (b, t, part, h, d) of the packed qkv -> (b, h, t, d) of q, k or v.
  auto unpack = [&](const Vec& qkv, int part) {
    Vec r(static_cast<size_t>(B) * H * T * D);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d)
            r[((b * H + h) * T + t) * D + d] = qkv[(b * T + t) * 3 * C + part * C + h * D + d];
    return r;
  };
  auto ref = [&](const std::vector<Vec>& x) {
    const Vec y = RefAttention(unpack(x[0], 0), unpack(x[0], 1), unpack(x[0], 2), B, H, T, D);
    Vec merged(y.size());  // [B, H, T, D] -> [B, T, H, D]
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t)
          for (int d = 0; d < D; ++d) merged[((b * T + t) * H + h) * D + d] = y[((b * H + h) * T + t) * D + d];
    return merged;
  };
  CheckOp("QkvAttention", [](auto& v) { return ops::QkvAttention(v[0], H, {.causal = true}); }, ref,
          {R({B, T, 3 * C}, -1, 1, 41)});

  // The composition, value and gradient bit for bit.
  const Tensor x = R({B, T, 3 * C}, -1, 1, 42), w = R({B, T, C}, -1, 1, 43);
  auto run = [&](bool packed) -> std::pair<Vec, Vec> {
    Variable qkv(x.Clone().value(), true);
    absl::StatusOr<Variable> y;
    if (packed) {
      y = ops::QkvAttention(qkv, H, {.causal = true});
    } else {
      Variable five = ops::Reshape(qkv, {B, T, 3, H, D}).value();
      Variable heads = ops::Permute(five, {2, 0, 3, 1, 4}).value();
      std::vector<Variable> parts = ops::Split(heads, 0, {1, 1, 1}).value();
      Variable q = ops::Reshape(parts[0], {B, H, T, D}).value();
      Variable k = ops::Reshape(parts[1], {B, H, T, D}).value();
      Variable v = ops::Reshape(parts[2], {B, H, T, D}).value();
      Variable a = ops::Attention(q, k, v, {.causal = true}).value();
      y = ops::Reshape(ops::Transpose(a, 1, 2).value(), {B, T, C});
    }
    EXPECT_TRUE(y.ok()) << y.status();
    Variable loss = ops::SumAll(ops::Mul(*y, Variable(w)).value()).value();
    EXPECT_TRUE(autograd::Backward(loss).ok());
    EXPECT_EQ(y->shape(), (Shape{B, T, C}));
    EXPECT_TRUE(y->value().is_contiguous());
    return {ToDoubles(y->value()), ToDoubles(qkv.grad())};
  };
  const auto [y_packed, g_packed] = run(true);
  const auto [y_composed, g_composed] = run(false);
  EXPECT_EQ(y_packed, y_composed);
  EXPECT_EQ(g_packed, g_composed);

  // What is refused, with what was found.
  Variable flat(R({B, 3 * C}), true), odd(R({B, T, 3 * C + 3}), true);
  EXPECT_THAT(ops::QkvAttention(flat, H).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::zeroshard::testing::HasSubstr("expected 3 dims [B, T, 3C]")));
  EXPECT_THAT(ops::QkvAttention(odd, H).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::zeroshard::testing::HasSubstr("21 features and 2 heads")));
}

TEST(Ops, DropoutScalesKeptElementsAndReplaysTheMaskInBackward) {
  PhiloxGenerator gen{.seed = 5};
  Variable x(R({1000}, 0.5f, 1.5f, 3), true);
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Dropout(x, 0.25, gen, /*training=*/true));
  EXPECT_EQ(gen.offset, 1000u);
  ZS_ASSERT_OK_AND_ASSIGN(Variable s, ops::SumAll(y));
  ZS_ASSERT_OK(autograd::Backward(s));
  const Vec xv = ToDoubles(x.value()), yv = ToDoubles(y.value()), g = ToDoubles(x.grad());
  int kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) {
      EXPECT_EQ(g[i], 0.0);
    } else {
      ++kept;
      EXPECT_FLOAT_EQ(yv[i], static_cast<float>(xv[i]) * static_cast<float>(1 / 0.75));
      EXPECT_FLOAT_EQ(g[i], static_cast<float>(1 / 0.75));
    }
  }
  EXPECT_NEAR(kept, 750, 4 * std::sqrt(1000 * 0.25 * 0.75));
  ZS_ASSERT_OK_AND_ASSIGN(Variable e, ops::Dropout(x, 0.25, gen, /*training=*/false));
  EXPECT_TRUE(e.SameAs(x));
  EXPECT_EQ(gen.offset, 1000u);
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

Vec RefSoftmaxRows(const Vec& x, int rows, int c, bool log) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    double m = -1e300, z = 0;
    for (int j = 0; j < c; ++j) m = std::max(m, x[r * c + j]);
    for (int j = 0; j < c; ++j) z += std::exp(x[r * c + j] - m);
    for (int j = 0; j < c; ++j) {
      y[r * c + j] = log ? x[r * c + j] - m - std::log(z) : std::exp(x[r * c + j] - m) / z;
    }
  }
  return y;
}

TEST(Ops, SoftmaxAndLogSoftmax) {
  CheckOp("Softmax", [](auto& v) { return ops::Softmax(v[0]); },
          [](const std::vector<Vec>& x) { return RefSoftmaxRows(x[0], 6, 7, false); }, {R({2, 3, 7}, -2, 2, 31)});
  CheckOp("LogSoftmax", [](auto& v) { return ops::LogSoftmax(v[0]); },
          [](const std::vector<Vec>& x) { return RefSoftmaxRows(x[0], 6, 7, true); }, {R({2, 3, 7}, -2, 2, 32)});
}

TEST(Ops, LayerNorm) {
  const int rows = 6, c = 7;
  CheckOp("LayerNorm", [](auto& v) { return ops::LayerNorm(v[0], v[1], v[2], 1e-5); },
          [&](const std::vector<Vec>& x) {
            Vec y(rows * c);
            for (int r = 0; r < rows; ++r) {
              double mean = 0, var = 0;
              for (int j = 0; j < c; ++j) mean += x[0][r * c + j] / c;
              for (int j = 0; j < c; ++j) var += (x[0][r * c + j] - mean) * (x[0][r * c + j] - mean) / c;
              for (int j = 0; j < c; ++j) {
                y[r * c + j] = (x[0][r * c + j] - mean) / std::sqrt(var + 1e-5) * x[1][j] + x[2][j];
              }
            }
            return y;
          },
          {R({2, 3, c}, -2, 2, 41), R({c}, 0.5f, 1.5f, 42), R({c}, -0.5f, 0.5f, 43)}, 5e-4);
}

TEST(Ops, EmbeddingAndCrossEntropy) {
  const std::vector<int64_t> ids_v = {3, 0, 3, 5, 1, 3};
  const Tensor ids = Tensor::FromVector(ids_v, {2, 3}).value();
  CheckOp("Embedding", [&](auto& v) { return ops::Embedding(v[0], ids); },
          [&](const std::vector<Vec>& x) {
            Vec y;
            for (int64_t id : ids_v)
              for (int j = 0; j < 4; ++j) y.push_back(x[0][id * 4 + j]);
            return y;
          },
          {R({6, 4}, -1, 1, 51)});
  // Row 2 is ignored: the mean is over the other three rows.
  const std::vector<int64_t> tg = {2, 0, -100, 4};
  const Tensor targets = Tensor::FromVector(tg, {4}).value();
  CheckOp("CrossEntropy", [&](auto& v) { return ops::CrossEntropy(v[0], targets); },
          [&](const std::vector<Vec>& x) {
            const Vec lsm = RefSoftmaxRows(x[0], 4, 5, true);
            double s = 0;
            int n = 0;
            for (int r = 0; r < 4; ++r) {
              if (tg[r] < 0) continue;
              s -= lsm[r * 5 + tg[r]];
              ++n;
            }
            return Vec{s / n};
          },
          {R({4, 5}, -2, 2, 52)});
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

TEST(Ops, SplitIntoThreeLikeQkv) {
  // x [2, 9] split along dim 1 into 2, 3, 4; each piece squared and scaled by its index.
  CheckOp("Split", [](auto& v) -> absl::StatusOr<Variable> {
            ZS_ASSIGN_OR_RETURN(std::vector<Variable> p, ops::Split(v[0], 1, {2, 3, 4}));
            ZS_ASSIGN_OR_RETURN(Variable a, ops::Square(p[0]));
            ZS_ASSIGN_OR_RETURN(Variable c, ops::Scale(p[2], 3.0));
            ZS_ASSIGN_OR_RETURN(Variable sa, ops::SumAll(a));
            ZS_ASSIGN_OR_RETURN(Variable sc, ops::SumAll(c));
            return ops::Add(sa, sc);  // the middle piece gets no gradient
          },
          [](const std::vector<Vec>& x) {
            double s = 0;
            for (int r = 0; r < 2; ++r) {
              for (int j = 0; j < 2; ++j) s += x[0][r * 9 + j] * x[0][r * 9 + j];
              for (int j = 5; j < 9; ++j) s += 3 * x[0][r * 9 + j];
            }
            return Vec{s};
          },
          {R({2, 9}, -1, 1, 61)});
}

}  // namespace
}  // namespace zeroshard
