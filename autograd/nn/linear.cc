#include "zeroshard/autograd/nn/linear.h"

#include <cmath>

#include "zeroshard/autograd/ops.h"

namespace zeroshard::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : Linear(in_features, out_features, bias,
             InitSpec::Uniform(-1.0f / std::sqrt(static_cast<float>(in_features)),
                               1.0f / std::sqrt(static_cast<float>(in_features))),
             InitSpec::Uniform(-1.0f / std::sqrt(static_cast<float>(in_features)),
                               1.0f / std::sqrt(static_cast<float>(in_features)))) {}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, InitSpec weight_init,
               InitSpec bias_init)
    : UnaryModule("Linear"), in_(in_features), out_(out_features), has_bias_(bias) {
  RegisterParameter("weight", {out_features, in_features}, weight_init);
  if (bias) RegisterParameter("bias", {out_features}, bias_init);
}

Variable Linear::bias() { return has_bias_ ? FindParameter("bias")->var : Variable(); }

absl::StatusOr<Variable> Linear::Forward(const Variable& x) {
  return ops::Linear(x, weight(), bias());
}

}  // namespace zeroshard::nn
