#include "zeroshard/bench/eigen_baseline.h"

#include <Eigen/Core>

namespace zeroshard::bench {

void EigenGemmNative(const float* a, const float* b, float* c, int64_t n, int reps) {
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const M> A(a, n, n), B(b, n, n);
  Eigen::Map<M> C(c, n, n);
  for (int r = 0; r < reps; ++r) C.noalias() = A * B;
}

}  // namespace zeroshard::bench
