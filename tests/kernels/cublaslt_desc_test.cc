// The cuBLASLt descriptors of our GEMM calls (kernels/cuda/cublaslt_desc.h),
// created by the real cuBLASLt on a machine without a GPU (matmul
// descriptors and matrix layouts need no handle) and read back attribute by
// attribute: compute and scale type, the transposes, the epilogue, the bias
// pointer and type, and each layout's type, order, stored rows and columns,
// leading dimension, batch count and batch stride, against what
// Note [Row-major GEMM on cuBLAS] (kernels/cuda/gemm_plan.h) says they must be.
// Built only with the CUDA toolkit (tests/kernels/BUILD.bazel); no GPU needed.
#include <gtest/gtest.h>

#include <cublasLt.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/cublaslt_desc.h"
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/kernels/cuda/gemm_plan.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::cuda {
namespace {

using ::testing::HasSubstr;

// Stand-in operand addresses: descriptors store the bias pointer only.
const void* const kA = reinterpret_cast<const void*>(uintptr_t{0x1000});
const void* const kB = reinterpret_cast<const void*>(uintptr_t{0x2000});
void* const kC = reinterpret_cast<void*>(uintptr_t{0x3000});
const void* const kBias = reinterpret_cast<const void*>(uintptr_t{0x4000});
void* const kAux = reinterpret_cast<void*>(uintptr_t{0x5000});

template <typename T>
T DescAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(d, attr, &value, sizeof(value), &written),
            CUBLAS_STATUS_SUCCESS)
      << "matmul attribute " << attr;
  EXPECT_EQ(written, sizeof(value)) << "matmul attribute " << attr;
  return value;
}

template <typename T>
T LayoutAttr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(l, attr, &value, sizeof(value), &written),
            CUBLAS_STATUS_SUCCESS)
      << "layout attribute " << attr;
  EXPECT_EQ(written, sizeof(value)) << "layout attribute " << attr;
  return value;
}

// What one layout must hold.
struct WantLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
};

void ExpectLayout(cublasLtMatrixLayout_t l, const WantLayout& want, const char* which) {
  SCOPED_TRACE(which);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(LayoutAttr<uint32_t>(l, CUBLASLT_MATRIX_LAYOUT_TYPE), static_cast<uint32_t>(want.type));
  EXPECT_EQ(LayoutAttr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER), CUBLASLT_ORDER_COL);
  EXPECT_EQ(LayoutAttr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_ROWS), want.rows);
  EXPECT_EQ(LayoutAttr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_COLS), want.cols);
  EXPECT_EQ(LayoutAttr<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_LD), want.ld);
  EXPECT_EQ(LayoutAttr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), want.batch);
  EXPECT_EQ(LayoutAttr<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), want.stride);
  // A column-major layout must not overlap its own columns (cuBLASLt's LD rule).
  EXPECT_GE(want.ld, static_cast<int64_t>(want.rows));
}

// What the matmul descriptor must hold.
struct WantOp {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t trans_first = CUBLAS_OP_N, trans_second = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;  // checked when bias != nullptr
};

void ExpectOp(cublasLtMatmulDesc_t d, const WantOp& want) {
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(DescAttr<int32_t>(d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE), want.compute);
  EXPECT_EQ(DescAttr<int32_t>(d, CUBLASLT_MATMUL_DESC_SCALE_TYPE), CUDA_R_32F);  // alpha, beta are float
  EXPECT_EQ(DescAttr<int32_t>(d, CUBLASLT_MATMUL_DESC_TRANSA), want.trans_first);
  EXPECT_EQ(DescAttr<int32_t>(d, CUBLASLT_MATMUL_DESC_TRANSB), want.trans_second);
  EXPECT_EQ(DescAttr<int32_t>(d, CUBLASLT_MATMUL_DESC_TRANSC), CUBLAS_OP_N);
  EXPECT_EQ(DescAttr<uint32_t>(d, CUBLASLT_MATMUL_DESC_EPILOGUE), static_cast<uint32_t>(want.epilogue));
  EXPECT_EQ(DescAttr<const void*>(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER), want.bias);
  if (want.bias != nullptr) {
    EXPECT_EQ(DescAttr<int32_t>(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), want.bias_type);
  }
}

GemmCall Call(RowMajorGemm shape, DType ab, DType c) {
  GemmCall call;
  call.shape = shape;
  call.ab_dtype = ab;
  call.c_dtype = c;
  call.a = kA;
  call.b = kB;
  call.c = kC;
  return call;
}

// ---------------------------------------------------------------- worked examples
// Each written out by hand from the Note, not from ToColumnMajor.

// A linear layer's forward, y [M, N] = x [M, K] @ W^T (W [N, K]) + b, then GELU:
// cuBLASLt's A is W read column-major, [K, N] with ld K, transposed; its B is
// x, [K, M] with ld K; D is y^T, [N, M] with ld N; the bias has N values.
TEST(CublasLtDesc, LinearForwardWithBiasAndGelu) {
  const int64_t M = 96, N = 3 * 64, K = 64;
  GemmCall call = Call({.m = M, .n = N, .k = K, .transpose_b = true, .lda = K, .ldb = K, .ldc = N},
                       DType::kBF16, DType::kBF16);
  call.bias = kBias;
  call.gelu = true;
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.trans_first = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_GELU_BIAS,
                  .bias = kBias, .bias_type = CUDA_R_16BF});
  ExpectLayout(d.first, {CUDA_R_16BF, K, N, K, 1, 0}, "first (W)");
  ExpectLayout(d.second, {CUDA_R_16BF, K, M, K, 1, 0}, "second (x)");
  ExpectLayout(d.d, {CUDA_R_16BF, N, M, N, 1, 0}, "d (y)");
}

// The weight gradient, dW [N, K] = dy^T [N, M] @ x [M, K]: A (ours) is dy
// stored [M, N], transposed; cuBLASLt's B is dy, [N, M] with ld N, op T.
TEST(CublasLtDesc, WeightGradientTransposesOurA) {
  const int64_t M = 50, N = 24, K = 40;
  GemmCall call = Call({.m = N, .n = K, .k = M, .transpose_a = true, .lda = N, .ldb = K, .ldc = K},
                       DType::kF16, DType::kF32);
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.trans_second = CUBLAS_OP_T});
  ExpectLayout(d.first, {CUDA_R_16F, K, M, K, 1, 0}, "first (x)");
  ExpectLayout(d.second, {CUDA_R_16F, N, M, N, 1, 0}, "second (dy)");
  ExpectLayout(d.d, {CUDA_R_32F, K, N, K, 1, 0}, "d (dW)");
}

// The same GEMM with the bias gradient db [N] = the column sums of dy [M, N]
// (Note [Bias gradient in the GEMM]): dy is cuBLASLt's B, so the epilogue is
// BGRADB ("the number of columns of D", N), reduced over K (our M rows), its
// vector in the bias pointer with D's type by default.
TEST(CublasLtDesc, BiasGradientIsBgradbOnOurA) {
  const int64_t M = 50, N = 24, K = 40;
  GemmCall call = Call({.m = N, .n = K, .k = M, .transpose_a = true, .lda = N, .ldb = K, .ldc = K},
                       DType::kBF16, DType::kBF16);
  call.bias_grad = const_cast<void*>(kBias);
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.trans_second = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_BGRADB,
                  .bias = kBias, .bias_type = CUDA_R_16BF});
  ExpectLayout(d.second, {CUDA_R_16BF, N, M, N, 1, 0}, "second (dy)");
  ExpectLayout(d.d, {CUDA_R_16BF, K, N, K, 1, 0}, "d (dW)");
  call.bias_dtype = DType::kF32;  // an f32 gradient of a bf16 GEMM
  CublasLtDescriptors f;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, f));
  ExpectOp(f.op, {.trans_second = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_BGRADB,
                  .bias = kBias, .bias_type = CUDA_R_32F});
}

// Batched attention-style product with padded rows: S [B H, T, T] = Q K^T,
// Q and K rows 3C apart (views of qkv), batches T 3C apart.
TEST(CublasLtDesc, BatchedStridedViews) {
  const int64_t T = 17, D = 64, C = 128, batch = 6;
  GemmCall call = Call({.m = T, .n = T, .k = D, .transpose_b = true, .lda = 3 * C, .ldb = 3 * C,
                        .ldc = T, .batch = batch, .stride_a = T * 3 * C, .stride_b = T * 3 * C,
                        .stride_c = T * T},
                       DType::kBF16, DType::kF32);
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.trans_first = CUBLAS_OP_T});
  ExpectLayout(d.first, {CUDA_R_16BF, D, T, 3 * C, batch, T * 3 * C}, "first (K)");
  ExpectLayout(d.second, {CUDA_R_16BF, D, T, 3 * C, batch, T * 3 * C}, "second (Q)");
  ExpectLayout(d.d, {CUDA_R_32F, T, T, T, batch, T * T}, "d (S)");
}

// Note [GELU in the GEMM]: the fc forward keeping GELU's input. The aux matrix
// is laid out as D (column-major [N, M], ld = aux_ld) in D's type: the
// pointer and ld are set, the aux type left at its default (-1: D's).
TEST(CublasLtDesc, GeluAuxKeepsGelusInputLaidOutAsD) {
  const int64_t M = 96, N = 256, K = 64;
  GemmCall call = Call({.m = M, .n = N, .k = K, .transpose_b = true, .lda = K, .ldb = K, .ldc = N},
                       DType::kBF16, DType::kBF16);
  call.bias = kBias;
  call.gelu = true;
  call.gelu_aux = kAux;
  call.aux_ld = N;
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.trans_first = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                  .bias = kBias, .bias_type = CUDA_R_16BF});
  EXPECT_EQ(DescAttr<const void*>(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), kAux);
  EXPECT_EQ(DescAttr<int64_t>(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), N);
  EXPECT_EQ(DescAttr<int32_t>(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE), -1);
  ExpectLayout(d.d, {CUDA_R_16BF, N, M, N, 1, 0}, "d (a)");
  call.bias = nullptr;  // without a bias: GELU_AUX
  CublasLtDescriptors e;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, e));
  ExpectOp(e.op, {.trans_first = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_GELU_AUX});
}

// GELU's backward in the proj layer's input gradient: dh [M, H] = dy [M, C] @
// W2 [C, H] times gelu'(h), h the aux input laid out as D.
TEST(CublasLtDesc, GeluGradientReadsTheAuxInput) {
  const int64_t M = 96, C = 64, H = 256;
  GemmCall call = Call({.m = M, .n = H, .k = C, .lda = C, .ldb = H, .ldc = H}, DType::kF16, DType::kF16);
  call.dgelu_aux = kAux;
  call.aux_ld = H;
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.epilogue = CUBLASLT_EPILOGUE_DGELU});
  EXPECT_EQ(DescAttr<const void*>(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), kAux);
  EXPECT_EQ(DescAttr<int64_t>(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), H);
  ExpectLayout(d.first, {CUDA_R_16F, H, C, H, 1, 0}, "first (W2)");
  ExpectLayout(d.second, {CUDA_R_16F, C, M, C, 1, 0}, "second (dy)");
  ExpectLayout(d.d, {CUDA_R_16F, H, M, H, 1, 0}, "d (dh)");
}

TEST(CublasLtDesc, Tf32ComputeAndBiasOnly) {
  GemmCall call = Call({.m = 8, .n = 16, .k = 32, .lda = 32, .ldb = 16, .ldc = 16}, DType::kF32,
                       DType::kF32);
  call.allow_tf32 = true;
  call.bias = kBias;
  CublasLtDescriptors d;
  ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
  ExpectOp(d.op, {.compute = CUBLAS_COMPUTE_32F_FAST_TF32, .epilogue = CUBLASLT_EPILOGUE_BIAS,
                  .bias = kBias, .bias_type = CUDA_R_32F});
  ExpectLayout(d.first, {CUDA_R_32F, 16, 32, 16, 1, 0}, "first");
  ExpectLayout(d.second, {CUDA_R_32F, 32, 8, 32, 1, 0}, "second");
  ExpectLayout(d.d, {CUDA_R_32F, 16, 8, 16, 1, 0}, "d");
}

// ---------------------------------------------------------------- a sweep against the plan

// Every combination of transposes, dtypes, epilogues, padding and batching:
// the descriptors hold exactly ToColumnMajor's numbers.
TEST(CublasLtDesc, SweepMatchesThePlan) {
  int64_t checked = 0;
  struct Types {
    DType ab, c;
    std::optional<DType> bias;
    bool tf32;
  };
  const Types types[] = {
      {DType::kF32, DType::kF32, std::nullopt, false}, {DType::kF32, DType::kF32, std::nullopt, true},
      {DType::kBF16, DType::kBF16, std::nullopt, false}, {DType::kBF16, DType::kF32, std::nullopt, false},
      {DType::kBF16, DType::kBF16, DType::kF32, false}, {DType::kF16, DType::kF16, std::nullopt, false},
      {DType::kF16, DType::kF32, std::nullopt, false},
  };
  for (const Types& t : types) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (int64_t pad : {0, 8}) {
          for (int64_t batch : {1, 3}) {
            for (int epi = 0; epi < 4; ++epi) {  // none, bias, gelu, bias + gelu
              const int64_t m = 33, n = 40, k = 24;
              RowMajorGemm g{.m = m, .n = n, .k = k, .transpose_a = ta, .transpose_b = tb};
              g.lda = StoredCols(m, k, ta) + pad;
              g.ldb = StoredCols(k, n, tb) + pad;
              g.ldc = n + pad;
              g.batch = batch;
              if (batch > 1) {
                g.stride_a = StoredRows(m, k, ta) * g.lda;
                g.stride_b = StoredRows(k, n, tb) * g.ldb;
                g.stride_c = m * g.ldc;
              }
              GemmCall call = Call(g, t.ab, t.c);
              call.allow_tf32 = t.tf32;
              call.bias_dtype = t.bias;
              if (epi & 1) call.bias = kBias;
              call.gelu = (epi & 2) != 0;
              SCOPED_TRACE(absl::StrCat(DTypeName(t.ab), "->", DTypeName(t.c), t.tf32 ? " tf32" : "",
                                        " ta=", ta, " tb=", tb, " pad=", pad, " batch=", batch,
                                        " epilogue=", epi));
              CublasLtDescriptors d;
              ZS_ASSERT_OK(MakeCublasLtDescriptors(call, d));
              const ColumnMajorGemm cm = ToColumnMajor(g);
              const cublasLtEpilogue_t epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                                      CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS};
              ExpectOp(d.op, {.compute = t.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                              .trans_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                              .trans_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              .epilogue = epilogues[epi],
                              .bias = call.bias,
                              .bias_type = CublasLtDataType(t.bias.value_or(t.c))});
              const auto b32 = static_cast<int32_t>(batch);
              ExpectLayout(d.first, {CublasLtDataType(t.ab), static_cast<uint64_t>(cm.first_rows),
                                     static_cast<uint64_t>(cm.first_cols), cm.ld_first, b32,
                                     batch > 1 ? cm.stride_first : 0}, "first");
              ExpectLayout(d.second, {CublasLtDataType(t.ab), static_cast<uint64_t>(cm.second_rows),
                                      static_cast<uint64_t>(cm.second_cols), cm.ld_second, b32,
                                      batch > 1 ? cm.stride_second : 0}, "second");
              ExpectLayout(d.d, {CublasLtDataType(t.c), static_cast<uint64_t>(n), static_cast<uint64_t>(m),
                                 g.ldc, b32, batch > 1 ? g.stride_c : 0}, "d");
              // The product's shape: op(first) is n x k, op(second) k x m.
              EXPECT_EQ(tb ? cm.first_cols : cm.first_rows, n);
              EXPECT_EQ(ta ? cm.second_rows : cm.second_cols, m);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 7 * 2 * 2 * 2 * 2 * 4);
}

// ---------------------------------------------------------------- refusals

TEST(CublasLtDesc, InconsistentCallsAreRefusedBeforeCuBlasLt) {
  const RowMajorGemm ok{.m = 4, .n = 8, .k = 16, .lda = 16, .ldb = 8, .ldc = 8};
  struct Bad {
    GemmCall call;
    const char* says;
  };
  std::vector<Bad> bad;
  bad.push_back({Call(ok, DType::kBF16, DType::kF16), "inputs bf16 with output f16"});
  bad.push_back({Call(ok, DType::kF32, DType::kBF16), "inputs f32 with output bf16"});
  GemmCall tf32 = Call(ok, DType::kBF16, DType::kBF16);
  tf32.allow_tf32 = true;
  bad.push_back({tf32, "allow_tf32 applies to f32 inputs only"});
  RowMajorGemm short_lda = ok;
  short_lda.lda = 15;
  bad.push_back({Call(short_lda, DType::kF32, DType::kF32), "lda below A's row length"});
  GemmCall null_c = Call(ok, DType::kF32, DType::kF32);
  null_c.c = nullptr;
  bad.push_back({null_c, "null operand"});
  GemmCall grad_and_bias = Call(ok, DType::kF32, DType::kF32);
  grad_and_bias.bias_grad = const_cast<void*>(kBias);
  grad_and_bias.bias = kBias;
  bad.push_back({grad_and_bias, "the bias-gradient epilogue takes no bias and no GELU"});
  GemmCall batched_grad = Call({.m = 4, .n = 8, .k = 16, .lda = 16, .ldb = 8, .ldc = 8, .batch = 2,
                                .stride_a = 64, .stride_b = 128, .stride_c = 32},
                               DType::kF32, DType::kF32);
  batched_grad.bias_grad = const_cast<void*>(kBias);
  bad.push_back({batched_grad, "the bias-gradient epilogue needs batch 1, got 2"});
  const RowMajorGemm wide{.m = 4, .n = 16, .k = 16, .lda = 16, .ldb = 16, .ldc = 16};
  GemmCall aux_without_gelu = Call(wide, DType::kBF16, DType::kBF16);
  aux_without_gelu.gelu_aux = kAux;
  aux_without_gelu.aux_ld = 16;
  bad.push_back({aux_without_gelu, "gelu_aux is written by the GELU epilogue only"});
  GemmCall dgelu_and_bias = Call(wide, DType::kBF16, DType::kBF16);
  dgelu_and_bias.dgelu_aux = kAux;
  dgelu_and_bias.aux_ld = 16;
  dgelu_and_bias.bias = kBias;
  bad.push_back({dgelu_and_bias, "the GELU-gradient epilogue takes no bias, GELU or bias gradient"});
  GemmCall odd_ld = Call(wide, DType::kBF16, DType::kBF16);
  odd_ld.gelu = true;
  odd_ld.gelu_aux = kAux;
  odd_ld.aux_ld = 20;
  bad.push_back({odd_ld, "aux_ld must be a multiple of 8 and at least N = 16, got 20"});
  GemmCall aux_beta = odd_ld;
  aux_beta.aux_ld = 16;
  aux_beta.beta = 1.0f;
  bad.push_back({aux_beta, "the GELU aux epilogues need batch 1 and beta 0, got batch 1, beta 1"});
  for (const Bad& b : bad) {
    CublasLtDescriptors d;
    const absl::Status s = MakeCublasLtDescriptors(b.call, d);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.says;
    EXPECT_THAT(s.message(), HasSubstr(b.says));
    EXPECT_EQ(d.op, nullptr);
  }
}

}  // namespace
}  // namespace zeroshard::cuda
