#include "zeroshard/optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/optim/cpu/optim_kernels.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::optim {

absl::StatusOr<double> LocalSumOfSquares(absl::Span<const Tensor> grads) {
  double total = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;  // a parameter without a gradient adds nothing
    if (!IsFloatingPoint(grads[i].dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("LocalSumOfSquares: gradient ", i,
                                                     " has dtype ", DTypeName(grads[i].dtype()),
                                                     ", expected f32, bf16 or f16"));
    }
    ZS_ASSIGN_OR_RETURN(const double s, SumOfSquares(grads[i]));
    total += s;
  }
  return total;
}

GradClip GradClipFromSumOfSquares(double sum_of_squares, double max_norm, double grad_scale) {
  GradClip c;
  c.norm = std::sqrt(sum_of_squares) * grad_scale;
  const double coef = max_norm / (c.norm + kClipEps);
  // std::min would turn a NaN coefficient into 1; keep NaN visible, as torch does.
  c.clip_coef = std::isnan(coef) ? coef : std::min(1.0, coef);
  c.grad_scale = grad_scale * c.clip_coef;
  return c;
}

absl::StatusOr<GradClip> ClipGradNorm(absl::Span<const Tensor> grads, double max_norm,
                                      double grad_scale) {
  if (!(max_norm > 0) || !std::isfinite(max_norm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipGradNorm: max_norm must be finite and > 0, got ", max_norm));
  }
  if (!std::isfinite(grad_scale) || grad_scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipGradNorm: grad_scale must be finite and >= 0, got ", grad_scale));
  }
  ZS_ASSIGN_OR_RETURN(const double ss, LocalSumOfSquares(grads));
  return GradClipFromSumOfSquares(ss, max_norm, grad_scale);
}

absl::StatusOr<bool> HasNonFinite(const Tensor& x) {
  if (!x.defined()) return absl::InvalidArgumentError("HasNonFinite: undefined input");
  if (!IsFloatingPoint(x.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("HasNonFinite: dtype ", DTypeName(x.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (x.device().is_accelerator()) {
    // An Inf or NaN anywhere makes the double sum of the device reduction non-finite
    // (a sum of finite floats cannot overflow a double).
    ZS_ASSIGN_OR_RETURN(const double sum, SumAll(x));
    return !std::isfinite(sum);
  }
  if (!x.device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat("HasNonFinite: no kernel for ",
                                                 x.device().ToString(), " tensors in this build"));
  }
  ZS_ASSIGN_OR_RETURN(const Tensor c, x.Contiguous());
  return cpu::HasNonFiniteCpu(c.raw_data(), c.dtype(), c.numel());
}

}  // namespace zeroshard::optim
