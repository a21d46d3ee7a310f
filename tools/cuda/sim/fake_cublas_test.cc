// The simulator's cublasGemmEx (fake_cublas.cc) against a double reference
// computed from the same stored inputs: every transpose combination, each
// type pairing cuda_bench uses (bf16, f16, f32; TF32 compute), beta 0 and not,
// leading dimensions with padding, and the arguments cuBLAS refuses.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "zeroshard/runtime/half.h"

namespace {

using ::zeroshard::BFloat16;
using ::zeroshard::Float16;

const char* TypeName(cudaDataType_t t) {
  return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "f16" : "f32";
}

// A column-major rows x cols matrix of type `type` with leading dimension ld;
// the ld - rows padding elements of each column hold NaN, so an index that
// strays into them shows.
struct Matrix {
  Matrix(cudaDataType_t t, int r, int c, int pad) : type(t), rows(r), cols(c), ld(r + pad) {
    bytes.resize(static_cast<size_t>(ld) * cols * (type == CUDA_R_32F ? 4 : 2));
    for (int64_t i = 0; i < static_cast<int64_t>(ld) * cols; ++i) {
      Set(i, std::numeric_limits<float>::quiet_NaN());
    }
  }
  void Set(int64_t i, float v) {
    switch (type) {
      case CUDA_R_16BF:
        reinterpret_cast<BFloat16*>(bytes.data())[i] = BFloat16(v);
        break;
      case CUDA_R_16F:
        reinterpret_cast<Float16*>(bytes.data())[i] = Float16(v);
        break;
      default:
        reinterpret_cast<float*>(bytes.data())[i] = v;
    }
  }
  double Get(int64_t i) const {
    switch (type) {
      case CUDA_R_16BF:
        return static_cast<float>(reinterpret_cast<const BFloat16*>(bytes.data())[i]);
      case CUDA_R_16F:
        return static_cast<float>(reinterpret_cast<const Float16*>(bytes.data())[i]);
      default:
        return reinterpret_cast<const float*>(bytes.data())[i];
    }
  }
  double At(int r, int c) const { return Get(r + static_cast<int64_t>(c) * ld); }
  // Fills the rows x cols elements (not the padding) from [-1, 1).
  void Fill(uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < rows; ++r) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float unit = static_cast<float>(s >> 40) / 16777216.0f;  // [0, 1)
        Set(r + static_cast<int64_t>(c) * ld, -1.0f + 2.0f * unit);
      }
    }
  }
  void* data() { return bytes.data(); }
  cudaDataType_t type;
  int rows, cols, ld;
  std::vector<unsigned char> bytes;
};

// Unit roundoff of storing into `t` (round to nearest): half an ulp relative.
double UnitRoundoff(cudaDataType_t t) {
  return t == CUDA_R_16BF ? std::ldexp(1.0, -8) : t == CUDA_R_16F ? std::ldexp(1.0, -11)
                                                                    : std::ldexp(1.0, -24);
}

struct TypeCase {
  cudaDataType_t ab, c;
  cublasComputeType_t compute;
};

class FakeCublasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS); }
  cublasHandle_t handle_ = nullptr;
};

TEST_F(FakeCublasTest, GemmExMatchesDoubleReference) {
  ASSERT_EQ(cublasSetStream(handle_, nullptr), CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 7, k = 37;  // all different, so a swapped dimension shows
  const TypeCase cases[] = {
      {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F}, {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F},
      {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F},   {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
      {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
      {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
  };
  const double u32 = std::ldexp(1.0, -24);
  for (const TypeCase& tc : cases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, -0.75f}) {
          const std::string what = std::string(TypeName(tc.ab)) + " -> " + TypeName(tc.c) +
                                   (tc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? " tf32" : "") +
                                   " op(A) " + (ta ? "T" : "N") + " op(B) " + (tb ? "T" : "N") +
                                   " beta " + std::to_string(beta);
          SCOPED_TRACE(what);
          // A is stored m x k (k x m transposed), B k x n (n x k); each with its own padding.
          Matrix a(tc.ab, ta ? k : m, ta ? m : k, 3);
          Matrix b(tc.ab, tb ? n : k, tb ? k : n, 1);
          Matrix c(tc.c, m, n, 2);
          a.Fill(1);
          b.Fill(2);
          // With beta 0, C stays NaN: cuBLAS does not read it then.
          if (beta != 0.0f) c.Fill(3);
          const Matrix c_in = c;
          const float alpha = 1.5f;
          ASSERT_EQ(cublasGemmEx(handle_, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, a.data(), tc.ab,
                                 a.ld, b.data(), tc.ab, b.ld, &beta, c.data(), tc.c, c.ld,
                                 tc.compute, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
          for (int j = 0; j < n; ++j) {
            for (int i = 0; i < m; ++i) {
              double want = 0, magnitude = 0;
              for (int q = 0; q < k; ++q) {
                const double p = (ta ? a.At(q, i) : a.At(i, q)) * (tb ? b.At(j, q) : b.At(q, j));
                want += p;
                magnitude += std::fabs(p);
              }
              want *= alpha;
              magnitude *= std::fabs(alpha);
              if (beta != 0.0f) {
                want += beta * c_in.At(i, j);
                magnitude += std::fabs(beta * c_in.At(i, j));
              }
              // fp32 arithmetic: each of the k products rounds (exact for bf16 and
              // f16 inputs, not for f32), the k - 1 additions of the running sum,
              // alpha's product, beta C's product and its addition each add at most
              // one unit roundoff u of the terms' magnitude: (k + 3) u, plus u for
              // second-order terms. Then one rounding to C's type, relative to the
              // value (and f16's subnormal half-spacing 2^-25 near zero).
              const double e = (k + 4) * u32 * magnitude;
              const double tol = UnitRoundoff(tc.c) * (std::fabs(want) + e) + e +
                                 (tc.c == CUDA_R_16F ? std::ldexp(1.0, -25) : 0.0);
              EXPECT_NEAR(c.At(i, j), want, tol) << "C[" << i << ", " << j << "]";
            }
            for (int pad = m; pad < c.ld; ++pad) {
              EXPECT_TRUE(std::isnan(c.Get(pad + static_cast<int64_t>(j) * c.ld)))
                  << "padding below column " << j << " was written";
            }
          }
        }
      }
    }
  }
}

TEST_F(FakeCublasTest, GemmExWithKZeroScalesC) {
  Matrix a(CUDA_R_32F, 2, 1, 0), b(CUDA_R_32F, 1, 3, 0), c(CUDA_R_32F, 2, 3, 0);
  c.Fill(4);
  const Matrix c_in = c;
  const float alpha = 1.0f, beta = 2.0f;
  ASSERT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 0, &alpha, a.data(), CUDA_R_32F,
                         2, b.data(), CUDA_R_32F, 1, &beta, c.data(), CUDA_R_32F, 2,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  // 2 x is exact in fp32.
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 2; ++i) EXPECT_EQ(c.At(i, j), 2 * c_in.At(i, j)) << i << ", " << j;
  }
}

TEST_F(FakeCublasTest, GemmExRefusesWhatCublasRefuses) {
  Matrix a(CUDA_R_32F, 4, 4, 0), b(CUDA_R_32F, 4, 4, 0), c(CUDA_R_32F, 4, 4, 0);
  Matrix h(CUDA_R_16BF, 4, 4, 0);
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](cublasHandle_t handle, cublasOperation_t ta, int m, int lda, int ldb, int ldc,
                  cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                  cublasComputeType_t compute, const float* alpha) {
    return cublasGemmEx(handle, ta, CUBLAS_OP_N, m, 4, 4, alpha,
                        at == CUDA_R_32F ? a.data() : h.data(), at, lda,
                        bt == CUDA_R_32F ? b.data() : h.data(), bt, ldb, &zero, c.data(), ct, ldc,
                        compute, CUBLAS_GEMM_DEFAULT);
  };
  const auto f32 = CUDA_R_32F, bf16 = CUDA_R_16BF;
  const auto c32 = CUBLAS_COMPUTE_32F, tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 4, f32, f32, f32, c32, &one),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gemm(nullptr, CUBLAS_OP_N, 4, 4, 4, 4, f32, f32, f32, c32, &one),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, -1, 4, 4, 4, f32, f32, f32, c32, &one),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 3, 4, 4, f32, f32, f32, c32, &one),  // lda < m
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 3, 4, f32, f32, f32, c32, &one),  // ldb < k
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 3, f32, f32, f32, c32, &one),  // ldc < m
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 4, f32, f32, f32, c32, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_C, 4, 4, 4, 4, f32, f32, f32, c32, &one),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 4, bf16, f32, f32, c32, &one),  // A and B differ
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 4, f32, f32, bf16, c32, &one),  // f32 into bf16
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 4, bf16, bf16, bf16, tf32, &one),  // TF32 is f32's
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(handle_, CUBLAS_OP_N, 4, 4, 4, 4, f32, f32, f32, CUBLAS_COMPUTE_16F, &one),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
