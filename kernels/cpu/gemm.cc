#include "zeroshard/kernels/cpu/gemm.h"

namespace zeroshard::cpu {

void GemmWithIsa(CpuIsa isa, const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c,
                 float alpha, float beta) {
  if (c.rows == 0 || c.cols == 0) return;
  switch (isa) {
    case CpuIsa::kAvx512: return GemmAvx512(a, b, c, alpha, beta);
    case CpuIsa::kAvx2: return GemmAvx2(a, b, c, alpha, beta);
    case CpuIsa::kBaseline: return GemmBaseline(a, b, c, alpha, beta);
  }
}

void Gemm(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c, float alpha,
          float beta) {
  GemmWithIsa(ActiveCpuIsa(), a, b, c, alpha, beta);
}

}  // namespace zeroshard::cpu
