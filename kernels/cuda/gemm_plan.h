// The row-major GEMM our tensors describe, as the column-major call cuBLAS(Lt)
// takes. Plain C++ (no CUDA headers), so tests/kernels/gemm_plan_test.cc runs
// every mapping on the CPU against a reference.
//
//   RowMajorGemm g{.m = 4096, .n = 2304, .k = 768, .transpose_b = true,
//                  .lda = 768, .ldb = 768, .ldc = 2304};     // y = x @ W^T
//   FoldSharedBatch(g);                                       // [B, T, C] @ W: one GEMM
//   const ColumnMajorGemm cm = ToColumnMajor(g);              // what cublasLtMatmul gets
//
// Note [Row-major GEMM on cuBLAS]
// cuBLAS reads matrices column-major. A row-major matrix X [r, c] with leading
// dimension ld (elements between rows) is, read column-major, X^T [c, r] with
// the same ld. So C = op(A) op(B) (row-major, C [M, N]) is computed as
// C^T = op(B)^T op(A)^T (column-major, C^T [N, M]): the first operand of the
// call is our B, the second our A, and a row-major transpose flag becomes
// "no transpose" on the column-major side and vice versa:
//   first  (our B): stored column-major [N, K] when B is [K, N]  -> op N
//                                       [K, N] when B is [N, K]^T -> op T
//   second (our A): stored column-major [K, M] when A is [M, K]  -> op N
//                                       [M, K] when A is [K, M]^T -> op T
//   result: column-major [N, M], ld = ldc.
// A bias of N values (one per column of C) is then one per row of C^T: the
// "bias vector of length rows(D)" that cuBLASLt's BIAS epilogue adds.
#ifndef ZEROSHARD_KERNELS_CUDA_GEMM_PLAN_H_
#define ZEROSHARD_KERNELS_CUDA_GEMM_PLAN_H_

#include <cstdint>

namespace zeroshard::cuda {

// C [M, N] = alpha op(A) [M, K] op(B) [K, N] + beta C, all row-major:
// A stored [M, K] (or [K, M] when transpose_a) with `lda` elements between
// rows; likewise B and C. Batches are `stride_*` elements apart (stride_b = 0:
// one B for every batch).
struct RowMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// The column-major call: D [rows_d, cols_d] = op(first) op(second).
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // D is m x n, op(first) m x k, op(second) k x n
  bool trans_first = false;
  bool trans_second = false;
  // Stored shapes (before op) and leading dimensions; first = our B, second = our A.
  int64_t first_rows = 0, first_cols = 0, ld_first = 0;
  int64_t second_rows = 0, second_cols = 0, ld_second = 0;
  int64_t d_rows = 0, d_cols = 0, ld_d = 0;
  int64_t batch = 1;
  int64_t stride_first = 0, stride_second = 0, stride_d = 0;
};

// The stored (row-major) shape of an operand: rows x cols.
inline int64_t StoredRows(int64_t rows_op, int64_t cols_op, bool transpose) {
  return transpose ? cols_op : rows_op;
}
inline int64_t StoredCols(int64_t rows_op, int64_t cols_op, bool transpose) {
  return transpose ? rows_op : cols_op;
}

// Null when `g` is consistent (leading dimensions cover the stored rows,
// sizes and batch strides non-negative), else what is wrong.
inline const char* CheckRowMajorGemm(const RowMajorGemm& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 1) return "negative size or batch < 1";
  if (g.lda < StoredCols(g.m, g.k, g.transpose_a) || g.lda < 1) return "lda below A's row length";
  if (g.ldb < StoredCols(g.k, g.n, g.transpose_b) || g.ldb < 1) return "ldb below B's row length";
  if (g.ldc < g.n || g.ldc < 1) return "ldc below C's row length";
  if (g.stride_a < 0 || g.stride_b < 0 || g.stride_c < 0) return "negative batch stride";
  return nullptr;
}

// With one B for every batch, an untransposed A whose batches follow each
// other (stride m * lda) and C likewise, the batches are one GEMM of batch * m
// rows: fewer, larger tiles. Returns whether it folded.
inline bool FoldSharedBatch(RowMajorGemm& g) {
  if (g.batch == 1 || g.stride_b != 0 || g.transpose_a) return false;
  if (g.stride_a != g.m * g.lda || g.stride_c != g.m * g.ldc) return false;
  g.m *= g.batch;
  g.batch = 1;
  g.stride_a = g.stride_c = 0;
  return true;
}

inline ColumnMajorGemm ToColumnMajor(const RowMajorGemm& g) {
  ColumnMajorGemm c;
  c.m = g.n;
  c.n = g.m;
  c.k = g.k;
  // First operand: our B, stored row-major [K, N] (or [N, K]) = column-major [N, K] (or [K, N]).
  c.trans_first = g.transpose_b;
  c.first_rows = StoredCols(g.k, g.n, g.transpose_b);
  c.first_cols = StoredRows(g.k, g.n, g.transpose_b);
  c.ld_first = g.ldb;
  // Second operand: our A, stored row-major [M, K] (or [K, M]) = column-major [K, M] (or [M, K]).
  c.trans_second = g.transpose_a;
  c.second_rows = StoredCols(g.m, g.k, g.transpose_a);
  c.second_cols = StoredRows(g.m, g.k, g.transpose_a);
  c.ld_second = g.lda;
  c.d_rows = g.n;
  c.d_cols = g.m;
  c.ld_d = g.ldc;
  c.batch = g.batch;
  c.stride_first = g.stride_b;
  c.stride_second = g.stride_a;
  c.stride_d = g.stride_c;
  return c;
}

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_GEMM_PLAN_H_
