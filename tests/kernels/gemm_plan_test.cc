// The row-major -> column-major GEMM mapping of kernels/cuda/gemm_plan.h, run
// on the CPU: a reference column-major GEMM (BLAS semantics, as cuBLAS reads
// its arguments) executes the plan on the caller's row-major buffers, and must
// give the row-major product for every transpose, leading dimension and batch
// layout, folded or not.
#include "zeroshard/kernels/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/tests/kernels/kernel_testing.h"

namespace zeroshard::cuda {
namespace {

using ::zeroshard::testing::RandomValues;

// Column-major D = op(X) op(Y) in double, BLAS style: element (i, j) of a
// stored column-major matrix with leading dimension ld is p[i + j * ld].
void ColumnMajorReference(const ColumnMajorGemm& c, const float* first, const float* second,
                          float* d) {
  for (int64_t b = 0; b < c.batch; ++b) {
    const float* x = first + b * c.stride_first;
    const float* y = second + b * c.stride_second;
    float* out = d + b * c.stride_d;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          const double xv = c.trans_first ? x[l + i * c.ld_first] : x[i + l * c.ld_first];
          const double yv = c.trans_second ? y[j + l * c.ld_second] : y[l + j * c.ld_second];
          acc += xv * yv;
        }
        out[i + j * c.ld_d] = static_cast<float>(acc);
      }
    }
  }
}

// Row-major C = op(A) op(B) in double, straight from the RowMajorGemm's definition.
void RowMajorReference(const RowMajorGemm& g, const float* a, const float* b, float* c) {
  for (int64_t t = 0; t < g.batch; ++t) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const double av = g.transpose_a ? a[t * g.stride_a + l * g.lda + i]
                                          : a[t * g.stride_a + i * g.lda + l];
          const double bv = g.transpose_b ? b[t * g.stride_b + j * g.ldb + l]
                                          : b[t * g.stride_b + l * g.ldb + j];
          acc += av * bv;
        }
        c[t * g.stride_c + i * g.ldc + j] = static_cast<float>(acc);
      }
    }
  }
}

int64_t Extent(int64_t rows, int64_t ld, int64_t batch, int64_t stride) {
  return (batch - 1) * stride + rows * ld + 1;
}

TEST(GemmPlan, ColumnMajorCallComputesTheRowMajorProduct) {
  int cases = 0;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t pad : {0, 3}) {
        for (bool shared_b : {false, true}) {
          for (int64_t batch : {1, 3}) {
            RowMajorGemm g;
            g.m = 5;
            g.n = 7;
            g.k = 4;
            g.transpose_a = ta;
            g.transpose_b = tb;
            g.lda = StoredCols(g.m, g.k, ta) + pad;
            g.ldb = StoredCols(g.k, g.n, tb) + pad;
            g.ldc = g.n + pad;
            g.batch = batch;
            const int64_t a_rows = StoredRows(g.m, g.k, ta), b_rows = StoredRows(g.k, g.n, tb);
            g.stride_a = a_rows * g.lda;
            g.stride_b = shared_b ? 0 : b_rows * g.ldb;
            g.stride_c = g.m * g.ldc;
            ASSERT_EQ(CheckRowMajorGemm(g), nullptr);
            const std::vector<float> a = RandomValues(Extent(a_rows, g.lda, batch, g.stride_a), -1, 1, 1);
            const std::vector<float> b = RandomValues(Extent(b_rows, g.ldb, batch, g.stride_b), -1, 1, 2);
            const int64_t c_size = Extent(g.m, g.ldc, batch, g.stride_c);
            std::vector<float> want(c_size, 0.0f), got(c_size, 0.0f);
            RowMajorReference(g, a.data(), b.data(), want.data());

            RowMajorGemm folded = g;
            const bool did_fold = FoldSharedBatch(folded);
            EXPECT_EQ(did_fold, batch > 1 && shared_b && !ta);
            const ColumnMajorGemm cm = ToColumnMajor(folded);
            // The first operand is our B, the second our A.
            ColumnMajorReference(cm, b.data(), a.data(), got.data());
            for (int64_t t = 0; t < batch; ++t) {
              for (int64_t i = 0; i < g.m; ++i) {
                for (int64_t j = 0; j < g.n; ++j) {
                  const int64_t at = t * g.stride_c + i * g.ldc + j;
                  ASSERT_NEAR(got[at], want[at], 1e-6)
                      << "ta=" << ta << " tb=" << tb << " pad=" << pad << " shared=" << shared_b
                      << " batch=" << batch << " at (" << t << ", " << i << ", " << j << ")";
                }
              }
            }
            // The stored shapes cuBLAS is told fit inside the leading dimensions.
            EXPECT_LE(cm.first_rows, cm.ld_first);
            EXPECT_LE(cm.second_rows, cm.ld_second);
            EXPECT_LE(cm.d_rows, cm.ld_d);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 32);
}

TEST(GemmPlan, ChecksCatchInconsistentCalls) {
  RowMajorGemm g{.m = 2, .n = 3, .k = 4, .lda = 4, .ldb = 3, .ldc = 3};
  EXPECT_EQ(CheckRowMajorGemm(g), nullptr);
  g.lda = 3;
  EXPECT_STREQ(CheckRowMajorGemm(g), "lda below A's row length");
  g.lda = 4;
  g.transpose_b = true;  // B stored [3, 4]: rows of 4
  EXPECT_STREQ(CheckRowMajorGemm(g), "ldb below B's row length");
  g.ldb = 4;
  g.ldc = 2;
  EXPECT_STREQ(CheckRowMajorGemm(g), "ldc below C's row length");
  g.ldc = 3;
  g.batch = 0;
  EXPECT_STREQ(CheckRowMajorGemm(g), "negative size or batch < 1");
}

}  // namespace
}  // namespace zeroshard::cuda
