// Softmax and log-softmax over the last axis, numerically stable, and their
// backwards (which the autograd layer calls with the saved forward output).
//
//   ZS_RETURN_IF_ERROR(Softmax(logits, probs));                    // [..., C] -> [..., C]
//   ZS_RETURN_IF_ERROR(LogSoftmax(logits, logp));
//   ZS_RETURN_IF_ERROR(SoftmaxBackward(probs, dprobs, dlogits));    // dx = y (dy - sum(dy y))
//   ZS_RETURN_IF_ERROR(LogSoftmaxBackward(logp, dlogp, dlogits));   // dx = dy - exp(y) sum(dy)
//   ZS_ASSIGN_OR_RETURN(Tensor p, Softmax(logits));                // allocates
//
// Rules (each violation is an InvalidArgument saying what was found):
// - Every tensor is [..., C] with at least one dimension, all of the same
//   shape; each row of C values is normalised on its own.
// - Float data, any mix of f32/bf16/f16. Arithmetic and row sums are fp32; the
//   result is rounded once into the output's dtype. Backward inputs of
//   different dtypes are widened to f32 first (a copy).
// - Any strides: rows with a unit last stride are read and written where they
//   are (a slice of a bigger buffer costs nothing); others go through a copy.
// - The output may be exactly the same view as an input (in place); any other
//   overlap is refused.
// - Stability: exponents are taken of x - max(x); a row holding NaN, or only
//   -Inf, gives NaN. Results do not depend on the thread count or the
//   instruction set (fixed summation order; math/softmax_ops.h).
#ifndef ZEROSHARD_KERNELS_SOFTMAX_H_
#define ZEROSHARD_KERNELS_SOFTMAX_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// out = exp(x - max) / sum(exp(x - max)), per row.
absl::Status Softmax(const Tensor& x, const Tensor& out);
// out = x - max - log(sum(exp(x - max))), per row.
absl::Status LogSoftmax(const Tensor& x, const Tensor& out);
// dx = y * (dy - sum(dy * y)), per row; y is the softmax output.
absl::Status SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx);
// dx = dy - exp(y) * sum(dy), per row; y is the log-softmax output.
absl::Status LogSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx);

// Allocating forms: a contiguous result of x's (resp. dy's) dtype and x's allocator.
absl::StatusOr<Tensor> Softmax(const Tensor& x);
absl::StatusOr<Tensor> LogSoftmax(const Tensor& x);
absl::StatusOr<Tensor> SoftmaxBackward(const Tensor& y, const Tensor& dy);
absl::StatusOr<Tensor> LogSoftmaxBackward(const Tensor& y, const Tensor& dy);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_SOFTMAX_H_
