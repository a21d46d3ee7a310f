// Differentiable image ops on NCHW Variables: Conv2d, BatchNorm, pooling,
// Flatten. Each runs the kernel of the same name (kernels/conv2d.h,
// batchnorm.h, pool2d.h) and records a node that saves exactly what its
// backward reads; gradients come back in each input's dtype.
//
//   ZS_ASSIGN_OR_RETURN(Variable h, ops::Conv2d(x, w, Variable(), {.stride = {2, 2}, .padding = {3, 3}}));
//   ZS_ASSIGN_OR_RETURN(h, ops::BatchNorm(h, gamma, beta, running_mean, running_var, {.training = true}));
//   ZS_ASSIGN_OR_RETURN(h, ops::Relu(h));                                  // autograd/ops.h
//   ZS_ASSIGN_OR_RETURN(h, ops::MaxPool2d(h, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}));
//   ZS_ASSIGN_OR_RETURN(h, ops::AdaptiveAvgPool2d(h, 1, 1));
//   ZS_ASSIGN_OR_RETURN(h, ops::Flatten(h));                               // [N, C]
//
// BatchNorm in training mode updates running_mean and running_var (plain f32
// tensors, not Variables) in its forward, as torch does; a recompute of the
// forward (activation checkpointing) would update them again.
#ifndef ZEROSHARD_AUTOGRAD_VISION_OPS_H_
#define ZEROSHARD_AUTOGRAD_VISION_OPS_H_

#include "absl/status/statusor.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/kernels/batchnorm.h"
#include "zeroshard/kernels/conv2d.h"
#include "zeroshard/kernels/pool2d.h"

namespace zeroshard::ops {

using autograd::Variable;

// x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] (may be undefined).
absl::StatusOr<Variable> Conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                                const Conv2dOptions& options = {});
// x [N, C, ...]; weight, bias [C] (either may be undefined); running statistics
// f32 [C] (may be undefined in training).
absl::StatusOr<Variable> BatchNorm(const Variable& x, const Variable& weight, const Variable& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const BatchNormOptions& options);
absl::StatusOr<Variable> MaxPool2d(const Variable& x, const Pool2dOptions& options);
absl::StatusOr<Variable> AvgPool2d(const Variable& x, const Pool2dOptions& options);
absl::StatusOr<Variable> AdaptiveAvgPool2d(const Variable& x, int64_t out_h, int64_t out_w);
// Dimensions [start_dim, end) merged into one: [N, C, H, W] -> [N, C H W] by default (a view).
absl::StatusOr<Variable> Flatten(const Variable& x, int64_t start_dim = 1);

}  // namespace zeroshard::ops

#endif  // ZEROSHARD_AUTOGRAD_VISION_OPS_H_
