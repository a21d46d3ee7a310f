// MatMul against a double-precision reference: odd sizes, transposes, strided
// views, batches, a shared right operand, beta accumulation, 16-bit dtypes,
// every instruction set, and the errors.
#include "zeroshard/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/kernels/cpu/gemm.h"
#include "zeroshard/kernels/elementwise.h"
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

// Reference: batch of op(a) @ op(b) from materialised (contiguous) inputs.
std::vector<double> Reference(const Tensor& a, const Tensor& b, const MatMulOptions& o,
                              const std::vector<double>* prior = nullptr) {
  const std::vector<double> av = ToDoubles(a), bv = ToDoubles(b);
  const int64_t ar = a.size(-2), ac = a.size(-1), br = b.size(-2), bc = b.size(-1);
  const int64_t m = o.transpose_a ? ac : ar, k = o.transpose_a ? ar : ac;
  const int64_t n = o.transpose_b ? br : bc;
  const int64_t batch = a.numel() / (ar * ac);
  const bool shared = b.dim() == 2;
  std::vector<double> out(batch * m * n);
  for (int64_t t = 0; t < batch; ++t) {
    const double* A = av.data() + t * ar * ac;
    const double* B = bv.data() + (shared ? 0 : t * br * bc);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = o.transpose_a ? A[p * ac + i] : A[i * ac + p];
          const double y = o.transpose_b ? B[j * bc + p] : B[p * bc + j];
          s += x * y;
        }
        const int64_t idx = t * m * n + i * n + j;
        out[idx] = o.alpha * s + (prior ? o.beta * (*prior)[idx] : 0.0);
      }
  }
  return out;
}

TEST(MatMul, OddSizesEveryTransposeAgainstReference) {
  uint64_t seed = 1;
  for (int64_t m : {1, 7, 33}) {
    for (int64_t k : {1, 7, 257}) {
      for (int64_t n : {1, 33}) {
        for (bool ta : {false, true}) {
          for (bool tb : {false, true}) {
            MatMulOptions o{.transpose_a = ta, .transpose_b = tb};
            Tensor a = ta ? RandomTensor({k, m}, DType::kF32, -1, 1, seed++)
                          : RandomTensor({m, k}, DType::kF32, -1, 1, seed++);
            Tensor b = tb ? RandomTensor({n, k}, DType::kF32, -1, 1, seed++)
                          : RandomTensor({k, n}, DType::kF32, -1, 1, seed++);
            ZS_ASSERT_OK_AND_ASSIGN(Tensor c, MatMul(a, b, o));
            ExpectClose(c, Reference(a, b, o), 1e-5, 1e-5,
                        absl::StrCat("m", m, " k", k, " n", n, " ta", ta, " tb", tb));
          }
        }
      }
    }
  }
}

TEST(MatMul, StridedViewsAreUsedWithoutCopiesAndMatch) {
  // a is a column slice of a wider buffer; b a transposed view.
  Tensor wide = RandomTensor({33, 100}, DType::kF32, -1, 1, 7);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, wide.Narrow(1, 10, 57));  // [33, 57], row stride 100
  Tensor bt = RandomTensor({40, 57}, DType::kF32, -1, 1, 8);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, bt.Transpose(0, 1));      // [57, 40], column-major
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a_copy, a.Contiguous());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b_copy, b.Contiguous());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor outbuf, Tensor::Zeros({40, 33}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, outbuf.Transpose(0, 1));  // write column-major
  ZS_ASSERT_OK(MatMul(a, b, out));
  ExpectClose(out, Reference(a_copy, b_copy, {}), 1e-5, 1e-5, "strided");
}

TEST(MatMul, BatchedSharedAndAccumulating) {
  Tensor a = RandomTensor({2, 3, 7, 33}, DType::kF32, -1, 1, 9);
  Tensor b = RandomTensor({2, 3, 33, 5}, DType::kF32, -1, 1, 10);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor c, MatMul(a, b));
  EXPECT_EQ(c.shape(), (Shape{2, 3, 7, 5}));
  ExpectClose(c, Reference(a, b, {}), 1e-5, 1e-5, "batched");
  Tensor w = RandomTensor({9, 33}, DType::kF32, -1, 1, 11);  // nn.Linear weight [out, in]
  MatMulOptions lin{.transpose_b = true};
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, MatMul(a, w, lin));
  ExpectClose(y, Reference(a, w, lin), 1e-5, 1e-5, "shared b");
  // Accumulate: out = 0.5 * a @ b + 2 * out.
  Tensor prior = RandomTensor({2, 3, 7, 5}, DType::kF32, -1, 1, 12);
  const std::vector<double> pv = ToDoubles(prior);
  MatMulOptions acc{.alpha = 0.5f, .beta = 2.0f};
  ZS_ASSERT_OK(MatMul(a, b, prior, acc));
  ExpectClose(prior, Reference(a, b, acc, &pv), 1e-5, 1e-5, "beta");
  // Many small products run one per thread.
  Tensor q = RandomTensor({64, 8, 16}, DType::kF32, -1, 1, 13);
  Tensor kk = RandomTensor({64, 8, 16}, DType::kF32, -1, 1, 14);
  MatMulOptions qk{.transpose_b = true};
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, MatMul(q, kk, qk));
  ExpectClose(s, Reference(q, kk, qk), 1e-5, 1e-5, "many small");
}

TEST(MatMul, SixteenBitInputsAccumulateInFp32) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Tensor a = RandomTensor({7, 257}, dtype, -1, 1, 15);
    Tensor b = RandomTensor({257, 33}, dtype, -1, 1, 16);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor c, MatMul(a, b));
    EXPECT_EQ(c.dtype(), dtype);
    // Inputs are exact in double; only the output rounding (and fp32 sums) differ.
    ExpectClose(c, Reference(a, b, {}), 1e-4, RoundingRtol(dtype) + 1e-5,
                std::string(DTypeName(dtype)));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor c32, Tensor::Empty({7, 33}, DType::kF32));
    ZS_ASSERT_OK(MatMul(a, b, c32));
    ExpectClose(c32, Reference(a, b, {}), 1e-5, 1e-5, std::string(DTypeName(dtype)) + "->f32");
  }
}

// The bias option (nn.Linear): out = a b^T + bias, also with beta and batches.
TEST(MatMul, BiasIsAddedToEveryRow) {
  Tensor x = RandomTensor({2, 5, 9}, DType::kF32, -1, 1, 30);
  Tensor w = RandomTensor({4, 9}, DType::kF32, -1, 1, 31);
  Tensor bias = RandomTensor({4}, DType::kF32, -1, 1, 32);
  const MatMulOptions nt{.transpose_b = true};
  std::vector<double> want = Reference(x, w, nt);
  const std::vector<double> bv = ToDoubles(bias);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 4];
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, MatMul(x, w, {.transpose_b = true, .bias = bias}));
  ExpectClose(y, want, 1e-5, 1e-5, "bias");
  // bf16 bias into an f32 output, with beta accumulation.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b16, bias.To(DType::kBF16));
  Tensor prior = RandomTensor({2, 5, 4}, DType::kF32, -1, 1, 33);
  const std::vector<double> pv = ToDoubles(prior), b16v = ToDoubles(b16);
  std::vector<double> want2 = Reference(x, w, {.transpose_b = true, .beta = 1.0f}, &pv);
  for (size_t i = 0; i < want2.size(); ++i) want2[i] += b16v[i % 4];
  ZS_ASSERT_OK(MatMul(x, w, prior, {.transpose_b = true, .beta = 1.0f, .bias = b16}));
  ExpectClose(prior, want2, 1e-5, 1e-5, "bias + beta");
  EXPECT_THAT(MatMul(x, w, {.transpose_b = true, .bias = w}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a float [4] (N)")));
}

// bias_grad: the sums over K of op(a) (the bias gradient beside dW = dy^T x),
// against sums in double; then what it refuses.
TEST(MatMul, BiasGradIsTheSumOverK) {
  Tensor dy = RandomTensor({7, 4}, DType::kF32, -1, 1, 40);
  Tensor x = RandomTensor({7, 3}, DType::kF32, -1, 1, 41);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, MatMul(dy, x, {.transpose_a = true, .bias_grad = db}));
  ExpectClose(dw, Reference(dy, x, {.transpose_a = true}), 1e-5, 1e-5, "dW");
  const std::vector<double> dyv = ToDoubles(dy);
  std::vector<double> want(4, 0.0), want_rows(7, 0.0);
  for (int r = 0; r < 7; ++r) {
    for (int c = 0; c < 4; ++c) {
      want[c] += dyv[r * 4 + c];
      want_rows[r] += dyv[r * 4 + c];
    }
  }
  // A column sum is 6 fp32 additions of 7 exact terms |x| <= 1: each rounds by at
  // most 2^-24 of a partial sum, itself at most 7, so in any order the error is
  // at most 6 * 7 * 2^-24 (2.5e-6); a row sum (3 additions of 4) less.
  const double sum_bound = 6 * 7 * std::ldexp(1.0, -24);
  ExpectClose(db, want, sum_bound, 0, "db = column sums of dy");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rows, Tensor::Empty({7}, DType::kF32));
  Tensor w = RandomTensor({4, 5}, DType::kF32, -1, 1, 42);
  ZS_ASSERT_OK(MatMul(dy, w, {.bias_grad = rows}).status());  // untransposed: K is a's rows' length
  ExpectClose(rows, want_rows, sum_bound, 0, "row sums of an untransposed a");
  EXPECT_THAT(MatMul(dy, x, {.transpose_a = true, .bias_grad = rows}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a float [4] (M)")));
  Tensor dy3 = RandomTensor({2, 7, 4}, DType::kF32, -1, 1, 43);
  EXPECT_THAT(MatMul(dy3, x, {.transpose_a = true, .bias_grad = db}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a 2-D a and no bias")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dy_row, dy.Select(0, 0));  // [4], inside dy
  EXPECT_THAT(MatMul(dy, x, {.transpose_a = true, .bias_grad = dy_row}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bias_grad overlaps")));
}

// gelu / pre_gelu / dgelu_pre (Note [GELU in the GEMM]): on the CPU the bits
// of MatMul followed by Gelu (forward) or GeluBackward (backward), in f32 and
// bf16, batched; then what is refused.
TEST(MatMul, GeluAndItsGradientAreTheUnfusedBits) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = RandomTensor({3, 5, 8}, dtype, -1, 1, 50), w = RandomTensor({16, 8}, dtype, -1, 1, 51);
    const Tensor b = RandomTensor({16}, dtype, -1, 1, 52);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor h_want, MatMul(x, w, {.transpose_b = true, .bias = b}));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor a_want, Unary(UnaryOp::kGelu, h_want));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::Empty({3, 5, 16}, dtype));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Empty({3, 5, 16}, dtype));
    ZS_ASSERT_OK(MatMul(x, w, a, {.transpose_b = true, .bias = b, .gelu = true, .pre_gelu = h}));
    EXPECT_EQ(ToDoubles(h), ToDoubles(h_want));
    EXPECT_EQ(ToDoubles(a), ToDoubles(a_want));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor a_only, Tensor::Empty({3, 5, 16}, dtype));
    ZS_ASSERT_OK(MatMul(x, w, a_only, {.transpose_b = true, .bias = b, .gelu = true}));
    EXPECT_EQ(ToDoubles(a_only), ToDoubles(a_want));

    const Tensor dy = RandomTensor({3, 5, 4}, dtype, -1, 1, 53), w2 = RandomTensor({4, 16}, dtype, -1, 1, 54);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor da, MatMul(dy, w2));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dh_want, Binary(BinaryOp::kGeluBackward, h, da));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dh, Tensor::Empty({3, 5, 16}, dtype));
    ZS_ASSERT_OK(MatMul(dy, w2, dh, {.dgelu_pre = h}));
    EXPECT_EQ(ToDoubles(dh), ToDoubles(dh_want));
  }
  const Tensor x = RandomTensor({4, 8}, DType::kF32, -1, 1, 55), w = RandomTensor({6, 8}, DType::kF32, -1, 1, 56);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({4, 6}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor pre, Tensor::Empty({4, 6}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wrong, Tensor::Empty({4, 5}, DType::kF32));
  const Tensor b = RandomTensor({6}, DType::kF32, -1, 1, 57);
  EXPECT_THAT(MatMul(x, w, out, {.transpose_b = true, .pre_gelu = pre}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pre_gelu is written only with gelu = true")));
  EXPECT_THAT(MatMul(x, w, out, {.transpose_b = true, .beta = 1.0f, .gelu = true}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gelu takes beta 0, got 1")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({4}, DType::kF32));
  EXPECT_THAT(MatMul(x, w, out, {.transpose_b = true, .bias_grad = db, .gelu = true}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gelu takes no bias_grad")));
  EXPECT_THAT(MatMul(x, w, out, {.transpose_b = true, .bias = b, .dgelu_pre = pre}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dgelu_pre takes no gelu, bias, bias_grad or beta")));
  EXPECT_THAT(MatMul(x, w, out, {.transpose_b = true, .gelu = true, .pre_gelu = wrong}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pre_gelu is f32 [4, 5], expected a float [4, 6] (out's shape)")));
  EXPECT_THAT(MatMul(x, w, out, {.transpose_b = true, .dgelu_pre = out}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dgelu_pre overlaps an operand or the output")));
}

TEST(MatMul, EveryInstructionSetAgreesWithReference) {
  Tensor a = RandomTensor({65, 130}, DType::kF32, -1, 1, 17);
  Tensor b = RandomTensor({130, 97}, DType::kF32, -1, 1, 18);
  const std::vector<double> want = Reference(a, b, {});
  std::vector<float> c(65 * 97);
  for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
    cpu::GemmWithIsa(isa, {a.data<float>(), 65, 130, 130, 1}, {b.data<float>(), 130, 97, 97, 1},
                     {c.data(), 65, 97, 97, 1}, 1.0f, 0.0f);
    std::vector<double> got(c.begin(), c.end());
    ExpectClose(got, want, 1e-5, 1e-5, std::string(cpu::CpuIsaName(isa)));
  }
}

TEST(MatMul, Errors) {
  Tensor a = RandomTensor({3, 4}, DType::kF32, -1, 1, 1);
  Tensor b = RandomTensor({5, 2}, DType::kF32, -1, 1, 2);
  EXPECT_THAT(MatMul(a, b), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("inner dimensions differ: op(a) is [3, 4] (a [3, "
                                               "4]) and op(b) is [5, 2]")));
  Tensor v = RandomTensor({4}, DType::kF32, -1, 1, 3);
  EXPECT_THAT(MatMul(a, v), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("at least 2 dims")));
  Tensor a3 = RandomTensor({2, 3, 4}, DType::kF32, -1, 1, 4);
  Tensor b3 = RandomTensor({3, 4, 2}, DType::kF32, -1, 1, 5);
  EXPECT_THAT(MatMul(a3, b3), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("batch dimensions differ")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({3, 3}, DType::kF32));
  Tensor b2 = RandomTensor({4, 2}, DType::kF32, -1, 1, 6);
  EXPECT_THAT(MatMul(a, b2, out), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("output has shape [3, 3], expected [3, 2]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({4, 2}, DType::kI32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out2, Tensor::Empty({3, 2}, DType::kF32));
  EXPECT_THAT(MatMul(a, ints, out2), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("expected f32, bf16 or f16")));
}

}  // namespace
}  // namespace zeroshard
