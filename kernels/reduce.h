// Reductions: along one axis (sum, mean, max, argmax), to a broadcast source
// shape (the backward of broadcasting), and over a whole buffer (sum of squares).
//
//   ZS_ASSIGN_OR_RETURN(Tensor s, Sum(x, /*dim=*/-1));                // [N, C] -> [N]
//   ZS_RETURN_IF_ERROR(Sum(dy2d, 0, dbias));                          // [N, C] -> [C]
//   ZS_RETURN_IF_ERROR(ArgMax(logits, -1, ids));                      // i64 output
//   ZS_RETURN_IF_ERROR(SumToShape(grad, {1, C}, out));                // undo a broadcast
//   ZS_ASSIGN_OR_RETURN(double ss, SumOfSquares(flat_grad_shard));    // for grad-norm clipping
//
// The output of an axis reduction has x's shape with `dim` removed, or with
// `dim` kept as size 1 (either is accepted; the allocating forms take
// `keepdim`). Float inputs (f32/bf16/f16) accumulate in fp32 with a fixed
// order, so results are identical run to run and for any thread count on one
// instruction set; i32/i64 sum in int64 and max exactly. Max and ArgMax
// propagate NaN (ArgMax returns the first NaN's index, else the first maximum's).
#ifndef ZEROSHARD_KERNELS_REDUCE_H_
#define ZEROSHARD_KERNELS_REDUCE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

enum class ReduceKind { kSum, kMean, kMax };

absl::Status Reduce(ReduceKind kind, const Tensor& x, int64_t dim, const Tensor& out);
absl::StatusOr<Tensor> Reduce(ReduceKind kind, const Tensor& x, int64_t dim, bool keepdim = false);

inline absl::Status Sum(const Tensor& x, int64_t dim, const Tensor& out) {
  return Reduce(ReduceKind::kSum, x, dim, out);
}
inline absl::Status Mean(const Tensor& x, int64_t dim, const Tensor& out) {
  return Reduce(ReduceKind::kMean, x, dim, out);
}
inline absl::Status Max(const Tensor& x, int64_t dim, const Tensor& out) {
  return Reduce(ReduceKind::kMax, x, dim, out);
}
inline absl::StatusOr<Tensor> Sum(const Tensor& x, int64_t dim, bool keepdim = false) {
  return Reduce(ReduceKind::kSum, x, dim, keepdim);
}
inline absl::StatusOr<Tensor> Mean(const Tensor& x, int64_t dim, bool keepdim = false) {
  return Reduce(ReduceKind::kMean, x, dim, keepdim);
}
inline absl::StatusOr<Tensor> Max(const Tensor& x, int64_t dim, bool keepdim = false) {
  return Reduce(ReduceKind::kMax, x, dim, keepdim);
}

// Index of the maximum along `dim`; `out` is i64 (or i32).
absl::Status ArgMax(const Tensor& x, int64_t dim, const Tensor& out);
absl::StatusOr<Tensor> ArgMax(const Tensor& x, int64_t dim, bool keepdim = false);

// Sums `x` down to `out`'s shape, where `x`'s shape is a broadcast of it
// (numpy rules): leading dims are summed away and size-1 dims summed over.
absl::Status SumToShape(const Tensor& x, const Tensor& out);

// Sum of all elements, in double (f32 chunks of fixed size added in order).
absl::StatusOr<double> SumAll(const Tensor& x);
// Sum of squares of all elements, in double, with the same fixed order.
absl::StatusOr<double> SumOfSquares(const Tensor& x);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_REDUCE_H_
