// Batch normalisation over dimension 1 of [N, C, ...] tensors
// (torch.nn.BatchNorm2d for [N, C, H, W], BatchNorm1d for [N, C] / [N, C, L]):
// forward in training mode (batch statistics, running statistics updated) or
// eval mode (running statistics), and backward.
//
//   BatchNormOptions o{.training = true, .momentum = 0.1, .eps = 1e-5};
//   // x [N, C, H, W]; weight, bias, running_mean, running_var, save_mean, save_rstd [C]
//   ZS_RETURN_IF_ERROR(BatchNormForward(x, w, b, running_mean, running_var, o, y,
//                                       save_mean, save_rstd));
//   ZS_RETURN_IF_ERROR(BatchNormBackward(dy, x, save_mean, save_rstd, w, o.training,
//                                        dx, dw, db, GradMode::kAccumulate));
//
// Per channel over its M = N x (H W ...) values: y = (x - mean) rstd w + b
// (kernels/math/batchnorm_ops.h has every formula).
// - training: mean and the biased variance of the batch; save_mean = mean,
//   save_rstd = 1 / sqrt(var + eps); running_mean and running_var (if defined)
//   move towards mean and the unbiased variance by `momentum`. M >= 2.
// - eval: mean = running_mean, rstd = 1 / sqrt(running_var + eps), both
//   required; save_mean and save_rstd receive them (the backward's constants).
// Backward takes the saved pair and the same `training`: training mode
// differentiates through the batch statistics, eval mode treats them as constants.
//
// Rules (each violation is an InvalidArgument saying what was found):
// - x, y, dy, dx: float, at least 2-D, all of x's shape; weight, bias, dweight,
//   dbias: float [C]; running_mean, running_var, save_mean, save_rstd: f32 [C]
//   (statistics are fp32 whatever the data's dtype: the rule FSDP's mixed
//   precision documents for BatchNorm).
// - Optional: weight (ones), bias (zeros), the running pair in training,
//   save_mean/save_rstd in the forward, any of dx, dweight, dbias in the backward.
// - Arithmetic and sums are fp32; per-channel sums run in a fixed order
//   (channels in parallel), so the bits do not depend on the thread count.
// - Outputs may not overlap inputs (y may be exactly x).
// CUDA: cuDNN's spatial BatchNorm (4-D x), or where cuDNN does not run (the
// CPU simulator of the device; forced by CudnnConvPath kOwn) our kernels
// (kernels/cuda/batchnorm_launch.h: a block per channel, sums in double).
#ifndef ZEROSHARD_KERNELS_BATCHNORM_H_
#define ZEROSHARD_KERNELS_BATCHNORM_H_

#include <string>

#include "absl/status/status.h"
#include "zeroshard/kernels/grad_mode.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct BatchNormOptions {
  bool training = true;
  double momentum = 0.1;  // in [0, 1]
  double eps = 1e-5;      // > 0
  std::string ToString() const;
};

absl::Status BatchNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var,
                              const BatchNormOptions& o, const Tensor& y, const Tensor& save_mean,
                              const Tensor& save_rstd);

// dx overwritten; `param_grad` says whether dweight and dbias are overwritten or added to.
absl::Status BatchNormBackward(const Tensor& dy, const Tensor& x, const Tensor& save_mean,
                               const Tensor& save_rstd, const Tensor& weight, bool training,
                               const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                               GradMode param_grad);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_BATCHNORM_H_
