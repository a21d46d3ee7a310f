#include "zeroshard/autograd/nn/vision_layers.h"

#include <cmath>

#include "zeroshard/autograd/vision_ops.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::nn {

namespace {
InitSpec FanInUniform(int64_t fan_in) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(fan_in, 1)));
  return InitSpec::Uniform(-bound, bound);
}
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options,
               bool bias)
    : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, options, bias,
             FanInUniform(in_channels / std::max<int64_t>(options.groups, 1) * kernel_size * kernel_size),
             FanInUniform(in_channels / std::max<int64_t>(options.groups, 1) * kernel_size * kernel_size)) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
               Conv2dOptions options, bool bias, InitSpec weight_init, InitSpec bias_init)
    : UnaryModule("Conv2d"), options_(options), has_bias_(bias) {
  RegisterParameter("weight",
                    {out_channels, in_channels / std::max<int64_t>(options.groups, 1), kernel_size[0],
                     kernel_size[1]},
                    weight_init);
  if (bias) RegisterParameter("bias", {out_channels}, bias_init);
}

Variable Conv2d::bias() { return has_bias_ ? FindParameter("bias")->var : Variable(); }

absl::StatusOr<Variable> Conv2d::Forward(const Variable& x) {
  return ops::Conv2d(x, weight(), bias(), options_);
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, InitSpec weight_init)
    : UnaryModule("BatchNorm2d"), num_features_(num_features), eps_(eps), momentum_(momentum) {
  RegisterParameter("weight", {num_features}, weight_init);
  RegisterParameter("bias", {num_features}, InitSpec::Zeros());
  RegisterBuffer("running_mean", Tensor::Zeros({num_features}, DType::kF32).value());
  RegisterBuffer("running_var", Tensor::Full({num_features}, 1.0, DType::kF32).value());
  RegisterBuffer("num_batches_tracked", Tensor::Zeros({}, DType::kI64).value());
}

absl::StatusOr<Variable> BatchNorm2d::Forward(const Variable& x) {
  if (x.defined() && x.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("BatchNorm2d: x has shape ", ShapeToString(x.shape()),
                                                   ", expected [N, ", num_features_, ", H, W]"));
  }
  const BatchNormOptions o{.training = is_training(), .momentum = momentum_, .eps = eps_};
  ZS_ASSIGN_OR_RETURN(Variable y, ops::BatchNorm(x, FindParameter("weight")->var, FindParameter("bias")->var,
                                                 running_mean(), running_var(), o));
  if (is_training()) {
    const Tensor& count = num_batches_tracked();
    ZS_ASSIGN_OR_RETURN(double n, count.Item());
    ZS_RETURN_IF_ERROR(count.Fill(n + 1));
  }
  return y;
}

absl::StatusOr<Variable> Sequential::Forward(const Variable& x) {
  Variable h = x;
  for (const auto& m : items_) {
    ZS_ASSIGN_OR_RETURN(h, (*m)(h));
  }
  return h;
}

}  // namespace zeroshard::nn
