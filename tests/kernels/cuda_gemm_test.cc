// MatMul on CUDA tensors (cuBLASLt) against the CPU GEMM, and the fused bias /
// GELU epilogues of CublasLtGemm against MatMul + Add + Gelu on the CPU: every
// dtype, transposes, strided and batched operands, a shared B, beta
// accumulation, odd and large shapes. Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/matmul.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::Tol;
using ::zeroshard::testing::ToDoubles;

// fp32 accumulation over k terms of magnitude <= 1 in another order than the
// CPU's; 16-bit outputs add one rounding.
Tol GemmTol(DType in, DType out, int64_t k) {
  const double sum = 1e-6 * static_cast<double>(k);
  if (out == DType::kBF16) return {sum + 1e-2, 1.0 / 64};
  if (out == DType::kF16) return {sum + 2e-3, 1.0 / 256};
  return {sum + (in == DType::kF32 ? 1e-5 : 1e-4), 1e-4};
}

TEST(CudaGemm, MatMulMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  struct Shape3 {
    int64_t m, n, k;
  };
  uint64_t seed = 1;
  std::vector<Shape3> shapes{{1, 1, 1}, {3, 5, 7}, {33, 17, 65}};
  // The GPT-2-sized shapes are for a GPU; the simulated device's reference
  // GEMM (tools/cuda/sim/fake_cublaslt.cc) takes a smaller odd one.
  if (testing::OnCudaSimulator()) {
    shapes.push_back({129, 96, 200});
  } else {
    shapes.push_back({1024, 2304, 768});
    shapes.push_back({4096, 768, 3072});
  }
  for (const Shape3& s : shapes) {
    for (DType dtype : kFloatDTypes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const Tensor a = RandomTensor(ta ? std::vector<int64_t>{s.k, s.m} : std::vector<int64_t>{s.m, s.k},
                                        dtype, -1, 1, ++seed);
          const Tensor b = RandomTensor(tb ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n},
                                        dtype, -1, 1, ++seed);
          const MatMulOptions o{.transpose_a = ta, .transpose_b = tb};
          ZS_ASSERT_OK_AND_ASSIGN(Tensor c, MatMul(a, b, o));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor cd, MatMul(OnGpu(a, &gpu), OnGpu(b, &gpu), o));
          ExpectClose(cd, c, GemmTol(dtype, dtype, s.k),
                      std::string("MatMul ") + std::string(DTypeName(dtype)) + " " +
                          std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                          std::to_string(s.k) + (ta ? " ta" : "") + (tb ? " tb" : ""));
        }
      }
    }
  }
}

TEST(CudaGemm, BatchedSharedStridedMixedAndBeta) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  // [B, T, C] @ W^T with a shared 2-D W (folded into one GEMM), bf16 -> f32 out.
  const Tensor x = RandomTensor({4, 64, 96}, DType::kBF16, -1, 1, 1);
  const Tensor w = RandomTensor({80, 96}, DType::kBF16, -1, 1, 2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty({4, 64, 80}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Tensor::Empty({4, 64, 80}, DType::kF32, &gpu));
  ZS_ASSERT_OK(MatMul(x, w, y, {.transpose_b = true}));
  ZS_ASSERT_OK(MatMul(OnGpu(x, &gpu), OnGpu(w, &gpu), yd, {.transpose_b = true}));
  ExpectClose(yd, y, GemmTol(DType::kBF16, DType::kF32, 96), "shared W");
  // Batched with per-batch B, transposed A (attention-like), f16.
  const Tensor q = RandomTensor({6, 32, 40}, DType::kF16, -1, 1, 3);
  const Tensor k = RandomTensor({6, 32, 24}, DType::kF16, -1, 1, 4);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, MatMul(q, k, {.transpose_a = true}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sd, MatMul(OnGpu(q, &gpu), OnGpu(k, &gpu), {.transpose_a = true}));
  ExpectClose(sd, s, GemmTol(DType::kF16, DType::kF16, 32), "batched ta");
  // Shared B with a transposed A: one GEMM per batch.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor t, MatMul(q, RandomTensor({32, 8}, DType::kF16, -1, 1, 5),
                                           {.transpose_a = true}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor td, MatMul(OnGpu(q, &gpu),
                                            OnGpu(RandomTensor({32, 8}, DType::kF16, -1, 1, 5), &gpu),
                                            {.transpose_a = true}));
  ExpectClose(td, t, GemmTol(DType::kF16, DType::kF16, 32), "shared B, ta");
  // Mixed input dtypes and a column-major (transposed view) operand; beta = 1 accumulates.
  const Tensor a = RandomTensor({50, 30}, DType::kF32, -1, 1, 6);
  const Tensor bt = RandomTensor({20, 50}, DType::kBF16, -1, 1, 7);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b_view, bt.Transpose(0, 1));  // [50, 20], column-major
  ZS_ASSERT_OK_AND_ASSIGN(Tensor acc, Tensor::Full({30, 20}, 0.5, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor accd, Tensor::Full({30, 20}, 0.5, DType::kF32, &gpu));
  const MatMulOptions o{.transpose_a = true, .alpha = 2.0f, .beta = 1.0f};
  ZS_ASSERT_OK(MatMul(a, b_view, acc, o));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bd, OnGpu(bt, &gpu).Transpose(0, 1));
  ZS_ASSERT_OK(MatMul(OnGpu(a, &gpu), bd, accd, o));
  ExpectClose(accd, acc, GemmTol(DType::kF32, DType::kF32, 50), "mixed, column-major, beta");
  // A bf16 output from f32 inputs goes through an f32 buffer.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::Empty({30, 20}, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor hd, Tensor::Empty({30, 20}, DType::kBF16, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bf, b_view.To(DType::kF32));
  ZS_ASSERT_OK(MatMul(a, bf, h, {.transpose_a = true}));
  ZS_ASSERT_OK(MatMul(OnGpu(a, &gpu), OnGpu(bf, &gpu), hd, {.transpose_a = true}));
  ExpectClose(hd, h, GemmTol(DType::kF32, DType::kBF16, 50), "f32 -> bf16 out");
}

TEST(CudaGemm, BiasAndGeluEpiloguesMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<cuda::CublasLtGemm> gemm,
                          cuda::CublasLtGemm::Create(0, &gpu));
  const int64_t m = 257, n = 384, k = 96;  // h = gelu(x @ W^T + b)
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (bool bias : {false, true}) {
      for (bool gelu : {false, true}) {
        const Tensor x = RandomTensor({m, k}, dtype, -1, 1, 10);
        const Tensor w = RandomTensor({n, k}, dtype, -0.2, 0.2, 11);
        const Tensor b = RandomTensor({n}, dtype, -1, 1, 12);
        // CPU reference: the f32 product, + bias, GELU, rounded once into dtype.
        ZS_ASSERT_OK_AND_ASSIGN(Tensor ref, Tensor::Empty({m, n}, DType::kF32));
        ZS_ASSERT_OK(MatMul(x, w, ref, {.transpose_b = true}));
        if (bias) ZS_ASSERT_OK(Add(ref, b, ref));
        if (gelu) ZS_ASSERT_OK(Unary(UnaryOp::kGelu, ref, ref));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor want, ref.To(dtype));

        const Tensor xd = OnGpu(x, &gpu), wd = OnGpu(w, &gpu), bd = OnGpu(b, &gpu);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor hd, Tensor::Empty({m, n}, dtype, &gpu));
        cuda::GemmCall call;
        call.shape = {.m = m, .n = n, .k = k, .transpose_b = true, .lda = k, .ldb = k, .ldc = n};
        call.ab_dtype = call.c_dtype = dtype;
        call.a = xd.raw_data();
        call.b = wd.raw_data();
        call.c = hd.raw_data();
        call.bias = bias ? bd.raw_data() : nullptr;
        call.gelu = gelu;
        ZS_ASSERT_OK(gemm->Run(call, nullptr));
        const Tol tol = GemmTol(dtype, dtype, k);
        ExpectClose(hd, want, {tol.atol + 1e-3, tol.rtol},
                    std::string("epilogue ") + std::string(DTypeName(dtype)) +
                        (bias ? " bias" : "") + (gelu ? " gelu" : ""));
      }
    }
  }
  // The algorithm cache: the same call again needs no new heuristic query.
  const int64_t before = gemm->heuristic_queries();
  const Tensor x = OnGpu(RandomTensor({m, k}, DType::kF32, -1, 1, 1), &gpu);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty({m, m}, DType::kF32, &gpu));
  cuda::GemmCall call;
  call.shape = {.m = m, .n = m, .k = k, .transpose_b = true, .lda = k, .ldb = k, .ldc = m};
  call.a = call.b = x.raw_data();
  call.c = y.raw_data();
  call.allow_tf32 = true;
  ZS_ASSERT_OK(gemm->Run(call, nullptr));
  ZS_ASSERT_OK(gemm->Run(call, nullptr));
  EXPECT_EQ(gemm->heuristic_queries(), before + 1);
  // Unsupported types are refused before cuBLASLt sees them.
  call.ab_dtype = DType::kBF16;
  call.c_dtype = DType::kF16;
  call.allow_tf32 = false;
  EXPECT_EQ(gemm->Run(call, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// MatMulOptions::bias through cuBLASLt's bias epilogue (nn.Linear on CUDA).
TEST(CudaGemm, MatMulBiasMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  for (DType dtype : kFloatDTypes) {
    const Tensor x = RandomTensor({3, 37, 65}, dtype, -1, 1, 40);
    const Tensor w = RandomTensor({129, 65}, dtype, -1, 1, 41);
    const Tensor bias = RandomTensor({129}, DType::kF32, -1, 1, 42);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, MatMul(x, w, {.transpose_b = true, .bias = bias}));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, MatMul(OnGpu(x, &gpu), OnGpu(w, &gpu),
                                               {.transpose_b = true, .bias = OnGpu(bias, &gpu)}));
    // The CPU rounds the product then adds; cuBLASLt adds in fp32 and rounds once.
    Tol tol = GemmTol(dtype, dtype, 65);
    tol.rtol *= 2;
    ExpectClose(got, want, tol, std::string("bias ") + std::string(DTypeName(dtype)));
  }
}

// MatMulOptions::bias_grad (Note [Bias gradient in the GEMM]): the weight
// gradient dW = dy^T x with db = dy's column sums in cuBLASLt's BGRADB
// epilogue, and the fallback (the epilogue switched off, as when cuBLASLt has
// no algorithm): plain GEMM + our column reduction, counted as a fallback.
// Against the CPU's GEMM and Sum. db sums `rows` terms in [-1, 1] in fp32 in
// another order, rounded once into its dtype: the GEMM's tolerance for k = rows.
TEST(CudaGemm, MatMulBiasGradMatchesCpuFusedAndFallback) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t rows = 193, out_f = 129, in_f = 65;
  for (DType dtype : kFloatDTypes) {
    for (bool transposed : {true, false}) {  // dy [rows, out] read as dy^T, or a [out, rows] view
      const Tensor dy = RandomTensor(transposed ? std::vector<int64_t>{rows, out_f}
                                                : std::vector<int64_t>{out_f, rows},
                                     dtype, -1, 1, 50);
      const Tensor x = RandomTensor({rows, in_f}, dtype, -1, 1, 51);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor db_want, Tensor::Empty({out_f}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dw_want,
                              MatMul(dy, x, {.transpose_a = transposed, .bias_grad = db_want}));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor db_sum, Sum(dy, transposed ? 0 : 1));
      ExpectClose(db_want, db_sum, {0, 0}, "CPU bias_grad is Sum's bits");
      for (bool fused : {true, false}) {
        const std::string what = std::string(DTypeName(dtype)) + (transposed ? " dy^T" : " dy") +
                                 (fused ? " epilogue" : " fallback");
        cuda::SetBiasGradEpilogue(fused);
        const cuda::BiasGradEpilogueCounts before = cuda::BiasGradEpilogueCountsNow();
        ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({out_f}, dtype, &gpu));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, MatMul(OnGpu(dy, &gpu), OnGpu(x, &gpu),
                                                  {.transpose_a = transposed, .bias_grad = db}));
        cuda::SetBiasGradEpilogue(true);
        const cuda::BiasGradEpilogueCounts after = cuda::BiasGradEpilogueCountsNow();
        // The simulator's stand-in takes every epilogue; a real cuBLASLt may refuse
        // one, which must then show as a fallback, never silently.
        EXPECT_EQ(after.fused + after.fallback, before.fused + before.fallback + 1) << what;
        if (!fused || testing::OnCudaSimulator()) {
          EXPECT_EQ(after.fallback - before.fallback, fused ? 0 : 1) << what;
        }
        ExpectClose(dw, dw_want, GemmTol(dtype, dtype, rows), "dW " + what);
        ExpectClose(db, db_want, GemmTol(dtype, dtype, rows), "db " + what);
      }
    }
  }
  // An f32 gradient of a bf16 GEMM goes through a bf16 vector, then a cast.
  const Tensor dy = RandomTensor({rows, out_f}, DType::kBF16, -1, 1, 52);
  const Tensor x = RandomTensor({rows, in_f}, DType::kBF16, -1, 1, 53);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor db_f32, Tensor::Empty({out_f}, DType::kF32, &gpu));
  ZS_ASSERT_OK(MatMul(OnGpu(dy, &gpu), OnGpu(x, &gpu), {.transpose_a = true, .bias_grad = db_f32})
                   .status());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Sum(dy, 0));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_f32, want.To(DType::kF32));
  ExpectClose(db_f32, want_f32, GemmTol(DType::kBF16, DType::kBF16, rows), "db f32 of bf16");
}

// MatMulOptions::gelu / pre_gelu / dgelu_pre (Note [GELU in the GEMM]): the
// fc GEMM with bias, GELU and GELU's input kept (GELU_AUX_BIAS), and the proj
// layer's input-gradient GEMM times gelu'(h) (DGELU), fused and through the
// fallback (switched off, and a hidden width whose ld is not a multiple of 8,
// which cuBLASLt's aux rule refuses), counted. Against the CPU in f32, rounded
// once. Bounds: pre_gelu is a GEMM result plus the bias (GemmTol); GELU's
// output adds at most 4.8e-4 (the tanh and erf forms of GELU differ by less,
// should cuBLASLt use the other) and is 1e-3 looser; dh is the GEMM result P
// times gelu'(h), |gelu'| <= 1.129, so P's error grows by that factor, plus
// |P| times the two forms' largest derivative difference, 8.7e-4 (the three
// maxima taken in double over [-8, 8] in steps of 1e-3, derivatives by central
// differences; beyond 8 both forms equal x or 0 to within 1e-14).
TEST(CudaGemm, MatMulGeluAuxAndGradientFusedAndFallback) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t rows = 193, in_f = 96, out_f = 64;
  for (DType dtype : kFloatDTypes) {
    for (int64_t hidden : {384, 100}) {  // 100: aux ld not a multiple of 8
      const Tensor x = RandomTensor({rows, in_f}, dtype, -1, 1, 70);
      const Tensor w1 = RandomTensor({hidden, in_f}, dtype, -0.2, 0.2, 71);
      const Tensor b1 = RandomTensor({hidden}, dtype, -1, 1, 72);
      const Tensor dy = RandomTensor({rows, out_f}, dtype, -1, 1, 73);
      const Tensor w2 = RandomTensor({out_f, hidden}, dtype, -0.2, 0.2, 74);
      // CPU references in f32, each rounded once into dtype.
      ZS_ASSERT_OK_AND_ASSIGN(Tensor pre32, Tensor::Empty({rows, hidden}, DType::kF32));
      ZS_ASSERT_OK(MatMul(x, w1, pre32, {.transpose_b = true}));
      ZS_ASSERT_OK(Add(pre32, b1, pre32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor a32, Unary(UnaryOp::kGelu, pre32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor want_pre, pre32.To(dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor want_a, a32.To(dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor p32, Tensor::Empty({rows, hidden}, DType::kF32));
      ZS_ASSERT_OK(MatMul(dy, w2, p32));
      double p_max = 0;
      for (double v : ToDoubles(p32)) p_max = std::max(p_max, std::fabs(v));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dh32, Binary(BinaryOp::kGeluBackward, want_pre, p32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor want_dh, dh32.To(dtype));
      const Tol fwd = GemmTol(dtype, dtype, in_f), bwd = GemmTol(dtype, dtype, out_f);

      const Tensor xd = OnGpu(x, &gpu), w1d = OnGpu(w1, &gpu), b1d = OnGpu(b1, &gpu);
      const Tensor dyd = OnGpu(dy, &gpu), w2d = OnGpu(w2, &gpu), hd = OnGpu(want_pre, &gpu);
      for (bool enabled : {true, false}) {
        const std::string what = std::string(DTypeName(dtype)) + " hidden " + std::to_string(hidden) +
                                 (enabled ? "" : ", epilogue switched off");
        const bool expect_fused = enabled && hidden % 8 == 0;
        cuda::SetEpilogueEnabled(cuda::FusedEpilogue::kGelu, enabled);
        const cuda::EpilogueCounts before = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor ad, Tensor::Empty({rows, hidden}, dtype, &gpu));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor pred, Tensor::Empty({rows, hidden}, dtype, &gpu));
        ZS_ASSERT_OK(MatMul(xd, w1d, ad, {.transpose_b = true, .bias = b1d, .gelu = true, .pre_gelu = pred}));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dhd, Tensor::Empty({rows, hidden}, dtype, &gpu));
        ZS_ASSERT_OK(MatMul(dyd, w2d, dhd, {.dgelu_pre = hd}));
        cuda::SetEpilogueEnabled(cuda::FusedEpilogue::kGelu, true);
        const cuda::EpilogueCounts after = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
        EXPECT_EQ(after.fused + after.fallback, before.fused + before.fallback + 2) << what;
        // The simulator's stand-in takes every call cuBLASLt's rules allow; a
        // real cuBLASLt may refuse more, which must then show as a fallback.
        if (!expect_fused || testing::OnCudaSimulator()) {
          EXPECT_EQ(after.fallback - before.fallback, expect_fused ? 0 : 2) << what;
        }
        ExpectClose(pred, want_pre, fwd, "pre_gelu " + what);
        ExpectClose(ad, want_a, {fwd.atol + 1e-3, fwd.rtol}, "gelu " + what);
        ExpectClose(dhd, want_dh, {1.13 * bwd.atol + 8.7e-4 * p_max, bwd.rtol}, "dgelu " + what);
      }
    }
  }
  // Without pre_gelu the plain GELU epilogue runs (no aux matrix to lay out).
  const Tensor x = RandomTensor({33, 40}, DType::kF32, -1, 1, 75);
  const Tensor w = RandomTensor({20, 40}, DType::kF32, -1, 1, 76);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want, MatMul(x, w, {.transpose_b = true}));
  ZS_ASSERT_OK(Unary(UnaryOp::kGelu, want, want));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor got, Tensor::Empty({33, 20}, DType::kF32, &gpu));
  const cuda::EpilogueCounts before = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
  ZS_ASSERT_OK(MatMul(OnGpu(x, &gpu), OnGpu(w, &gpu), got, {.transpose_b = true, .gelu = true}));
  const cuda::EpilogueCounts after = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
  EXPECT_EQ(after.fused, before.fused + 1);
  const Tol tol = GemmTol(DType::kF32, DType::kF32, 40);
  ExpectClose(got, want, {tol.atol + 1e-3, tol.rtol}, "gelu without pre_gelu");
}

// SetMatMulAllowTf32: f32 GEMMs reach cuBLASLt with TF32 compute (a call of its
// own: a new algorithm query for the same shape), within TF32's bound, and off
// again after. TF32 rounds each input to a 10-bit mantissa (relative 2^-11), so
// a product term errs by about 2^-10 and k terms in [-1, 1] by k 2^-10 at most.
TEST(CudaGemm, Tf32IsAProcessWideOptionForF32) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  ZS_ASSERT_OK_AND_ASSIGN(cuda::CublasLtGemm * lt, cuda::DefaultCublasLtGemm(0));
  const int64_t k = 96;
  const Tensor a = RandomTensor({33, k}, DType::kF32, -1, 1, 60);
  const Tensor b = RandomTensor({k, 17}, DType::kF32, -1, 1, 61);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want, MatMul(a, b));
  const Tensor ad = OnGpu(a, &gpu), bd = OnGpu(b, &gpu);
  ASSERT_FALSE(MatMulAllowTf32());
  ZS_ASSERT_OK(MatMul(ad, bd).status());
  const int64_t f32_queries = lt->heuristic_queries();
  ZS_ASSERT_OK(MatMul(ad, bd).status());
  EXPECT_EQ(lt->heuristic_queries(), f32_queries) << "the same f32 call is cached";
  SetMatMulAllowTf32(true);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor got, MatMul(ad, bd));
  SetMatMulAllowTf32(false);
  EXPECT_EQ(lt->heuristic_queries(), f32_queries + 1) << "TF32 is another cuBLASLt call";
  ExpectClose(got, want, {static_cast<double>(k) / 1024, 0}, "tf32");
  ZS_ASSERT_OK(MatMul(ad, bd).status());
  EXPECT_EQ(lt->heuristic_queries(), f32_queries + 1) << "back to the cached f32 call";
}

TEST(CudaGemm, WithoutADeviceCreateFailsCleanly) {
  if (testing::HasCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  CpuAllocator host;
  EXPECT_FALSE(cuda::CublasLtGemm::Create(0, &host).ok());
}

}  // namespace
}  // namespace zeroshard
