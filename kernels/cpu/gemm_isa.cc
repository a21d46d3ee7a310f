// Compiled once per instruction set (see kernels/BUILD.bazel): ZS_GEMM_NAME is
// GemmBaseline, GemmAvx2 or GemmAvx512, and `Eigen` is renamed on the command
// line so that each copy's Eigen templates are distinct symbols. Include
// nothing here but Eigen and the plain declarations: any inline function
// shared with other files could otherwise be emitted with AVX-512 code and
// picked by the linker for everyone.
#include <Eigen/Core>

#include "zeroshard/kernels/cpu/gemm.h"

#ifndef ZS_GEMM_NAME
#error "ZS_GEMM_NAME must be defined by the build"
#endif

namespace zeroshard::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<Eigen::Dynamic>;

template <typename Fn>
void WithConstMap(const ConstMatrixRef& m, Fn&& fn) {
  if (m.col_stride == 1 || m.cols == 1) {
    fn(Eigen::Map<const RowMajor, Eigen::Unaligned, Stride>(m.data, m.rows, m.cols,
                                                            Stride(m.row_stride)));
  } else {
    fn(Eigen::Map<const ColMajor, Eigen::Unaligned, Stride>(m.data, m.rows, m.cols,
                                                            Stride(m.col_stride)));
  }
}

template <typename Fn>
void WithMap(const MatrixRef& m, Fn&& fn) {
  if (m.col_stride == 1 || m.cols == 1) {
    fn(Eigen::Map<RowMajor, Eigen::Unaligned, Stride>(m.data, m.rows, m.cols, Stride(m.row_stride)));
  } else {
    fn(Eigen::Map<ColMajor, Eigen::Unaligned, Stride>(m.data, m.rows, m.cols, Stride(m.col_stride)));
  }
}

}  // namespace

void ZS_GEMM_NAME(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c,
                  float alpha, float beta) {
  WithConstMap(a, [&](const auto& A) {
    WithConstMap(b, [&](const auto& B) {
      WithMap(c, [&](auto C) {
        if (beta == 0.0f) {
          if (alpha == 1.0f) {
            C.noalias() = A * B;
          } else {
            C.noalias() = alpha * (A * B);
          }
        } else {
          if (beta != 1.0f) C *= beta;
          if (alpha == 1.0f) {
            C.noalias() += A * B;
          } else {
            C.noalias() += alpha * (A * B);
          }
        }
      });
    });
  });
}

}  // namespace zeroshard::cpu
