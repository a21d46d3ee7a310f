// Gradient-norm clipping (torch.nn.utils.clip_grad_norm_, L2 norm) and the
// Inf/NaN check of fp16 loss scaling, split so that a sharded run can
// all-reduce the local parts before the final step.
//
//   // Unsharded:
//   ZS_ASSIGN_OR_RETURN(GradClip clip, ClipGradNorm({flat_grad}, /*max_norm=*/1.0));
//   step.grad_scale = clip.grad_scale;         // folded into the optimizer step
//   // Sharded (each rank holds a gradient shard):
//   ZS_ASSIGN_OR_RETURN(double local, LocalSumOfSquares({grad_shard}));
//   double total = AllReduceSum(local);        // one all-reduce of one double
//   GradClip clip = GradClipFromSumOfSquares(total, max_norm, /*grad_scale=*/1 / loss_scale);
//
//   // fp16 loss scaling: skip the step when any gradient overflowed.
//   ZS_ASSIGN_OR_RETURN(bool overflow, HasNonFinite(grad_shard));
//
// The clip coefficient is min(1, max_norm / (norm + 1e-6)), as PyTorch's. Rather
// than rescaling the gradients in a separate pass, pass `grad_scale` as
// StepOptions::grad_scale: the step multiplies each gradient as it reads it.
// With clipping on, the Inf/NaN check is free: an Inf or NaN gradient makes the
// sum of squares Inf or NaN (it may also be Inf when finite gradients square
// past float range, a norm above ~1.8e19, which is an overflow too).
#ifndef ZEROSHARD_OPTIM_GRAD_CLIP_H_
#define ZEROSHARD_OPTIM_GRAD_CLIP_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::optim {

// torch.nn.utils.clip_grad_norm_'s epsilon in max_norm / (norm + eps).
inline constexpr double kClipEps = 1e-6;

struct GradClip {
  double norm = 0;        // L2 norm of the (unscaled) gradients; Inf/NaN when they are
  double clip_coef = 1;   // min(1, max_norm / (norm + 1e-6)); NaN when norm is NaN
  double grad_scale = 1;  // the input grad_scale times clip_coef: StepOptions::grad_scale
};

// Sum of squares of every element of every tensor (f32/bf16/f16, any device
// kernels/reduce.h supports), in double: the local part of the global norm.
absl::StatusOr<double> LocalSumOfSquares(absl::Span<const Tensor> grads);

// From the (all-reduced) sum of squares of the stored gradients: the norm of
// the true gradients, norm = sqrt(sum_of_squares) * grad_scale (grad_scale =
// 1 / loss_scale for loss-scaled gradients), and the coefficient to clip them
// to max_norm. max_norm must be > 0 (not checked here; ClipGradNorm checks).
GradClip GradClipFromSumOfSquares(double sum_of_squares, double max_norm, double grad_scale = 1.0);

// LocalSumOfSquares + GradClipFromSumOfSquares for unsharded gradients.
absl::StatusOr<GradClip> ClipGradNorm(absl::Span<const Tensor> grads, double max_norm,
                                      double grad_scale = 1.0);

// True when any element of `x` (a contiguous or not, f32/bf16/f16 CPU tensor) is Inf or NaN.
absl::StatusOr<bool> HasNonFinite(const Tensor& x);

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_GRAD_CLIP_H_
