// The baseline of the GEMM benchmark: Eigen's own GEMM, called directly on
// plain Eigen matrices, compiled with -march=native (Eigen at its best on the
// machine running the benchmark).
#ifndef ZEROSHARD_BENCH_EIGEN_BASELINE_H_
#define ZEROSHARD_BENCH_EIGEN_BASELINE_H_

#include <cstdint>

namespace zeroshard::bench {

// C (n x n, row-major) = A * B, all row-major, repeated `reps` times.
void EigenGemmNative(const float* a, const float* b, float* c, int64_t n, int reps);

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_EIGEN_BASELINE_H_
