// Gemm: the one fp32 matrix multiply of the CPU kernels, Eigen's GEMM compiled
// once per instruction set and chosen at run time.
//
//   // C (M x N) = alpha * A (M x K) * B (K x N) + beta * C
//   Gemm(ConstMatrixRef{a, M, K, K, 1}, ConstMatrixRef{b, K, N, 1, K} /* B^T stored */,
//        MatrixRef{c, M, N, N, 1}, 1.0f, 0.0f);
//
// Each operand is a strided 2-D view where one of the two strides is 1 (a
// row-major or a column-major matrix, i.e. a transpose is free). Eigen's
// templates pick their packet kernels with the preprocessor, so gemm_isa.cc is
// compiled three times (plain x86-64, AVX2+FMA, AVX-512) with Eigen's namespace
// renamed per copy (`-DEigen=ZsEigen<isa>`), which keeps the three copies'
// symbols apart. Threads: OpenMP inside Eigen; a call made from inside an
// OpenMP parallel region runs on its calling thread.
#ifndef ZEROSHARD_KERNELS_CPU_GEMM_H_
#define ZEROSHARD_KERNELS_CPU_GEMM_H_

#include <cstdint>

#include "zeroshard/kernels/cpu/isa.h"

namespace zeroshard::cpu {

struct ConstMatrixRef {
  const float* data;
  int64_t rows;
  int64_t cols;
  int64_t row_stride;  // elements between rows
  int64_t col_stride;  // elements between columns; row_stride or col_stride is 1
};

struct MatrixRef {
  float* data;
  int64_t rows;
  int64_t cols;
  int64_t row_stride;
  int64_t col_stride;
};

// C = alpha * A * B + beta * C. beta == 0 ignores C's previous contents (NaNs included).
void Gemm(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c, float alpha,
          float beta);
// The same with an explicit instruction set (benchmarks and tests compare them).
void GemmWithIsa(CpuIsa isa, const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c,
                 float alpha, float beta);

// One instantiation per instruction set, defined in gemm_isa.cc.
void GemmBaseline(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c,
                  float alpha, float beta);
void GemmAvx2(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c, float alpha,
              float beta);
void GemmAvx512(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c, float alpha,
                float beta);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_GEMM_H_
