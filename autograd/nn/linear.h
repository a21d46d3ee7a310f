// Linear: y = x W^T + b, W [out, in], b [out] (nn.Linear's layout and names).
//
//   auto fc = std::make_shared<nn::Linear>(64, 256, /*bias=*/true, nn::InitSpec::Normal(0, 0.02));
//   ZS_ASSIGN_OR_RETURN(Variable y, (*fc)(x));    // x [..., 64] -> y [..., 256]
#ifndef ZEROSHARD_AUTOGRAD_NN_LINEAR_H_
#define ZEROSHARD_AUTOGRAD_NN_LINEAR_H_

#include "zeroshard/autograd/nn/module.h"

namespace zeroshard::nn {

class Linear : public UnaryModule {
 public:
  // Default init: PyTorch's kaiming-uniform bound 1/sqrt(in) for both weight and bias.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Linear(int64_t in_features, int64_t out_features, bool bias, InitSpec weight_init,
         InitSpec bias_init = InitSpec::Zeros());
  absl::StatusOr<Variable> Forward(const Variable& x) override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const Variable& weight() { return FindParameter("weight")->var; }
  // Undefined when the layer has no bias.
  Variable bias();

 private:
  int64_t in_, out_;
  bool has_bias_;
};

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_LINEAR_H_
