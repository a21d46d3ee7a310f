// Image layers with torch.nn's names and layouts: Conv2d (weight [O, C/groups,
// KH, KW], bias [O]), BatchNorm2d (weight, bias; buffers running_mean,
// running_var, num_batches_tracked), Sequential (children "0", "1", ...).
//
//   auto conv = std::make_shared<nn::Conv2d>(3, 64, 7, Conv2dOptions{.stride = {2, 2}, .padding = {3, 3}},
//                                            /*bias=*/false);
//   auto bn = std::make_shared<nn::BatchNorm2d>(64);     // momentum 0.1, eps 1e-5
//   ZS_ASSIGN_OR_RETURN(Variable y, (*conv)(x));          // x [N, 3, H, W]
//   ZS_ASSIGN_OR_RETURN(y, (*bn)(y));                     // batch statistics when is_training()
//
// BatchNorm2d's buffers are f32 whatever the parameters' dtype (the FSDP
// mixed-precision rule: statistics stay fp32) and are allocated at
// construction (they are small); in training mode each forward moves the
// running statistics by `momentum` and counts num_batches_tracked (i64, 0-d),
// in eval mode the forward normalises with them.
#ifndef ZEROSHARD_AUTOGRAD_NN_VISION_LAYERS_H_
#define ZEROSHARD_AUTOGRAD_NN_VISION_LAYERS_H_

#include <memory>
#include <vector>

#include "zeroshard/autograd/nn/module.h"
#include "zeroshard/kernels/batchnorm.h"
#include "zeroshard/kernels/conv2d.h"

namespace zeroshard::nn {

class Conv2d : public UnaryModule {
 public:
  // Default init: torch.nn.Conv2d's, uniform with bound 1/sqrt(fan_in) (fan_in = C/groups KH KW).
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {},
         bool bias = true);
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Conv2dOptions options, bool bias, InitSpec weight_init, InitSpec bias_init);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

  const Conv2dOptions& options() const { return options_; }
  const Variable& weight() { return FindParameter("weight")->var; }
  Variable bias();

 private:
  Conv2dOptions options_;
  bool has_bias_;
};

class BatchNorm2d : public UnaryModule {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       InitSpec weight_init = InitSpec::Ones());
  absl::StatusOr<Variable> Forward(const Variable& x) override;

  // The registered buffers (read through FindBuffer: an owner may have moved them).
  const Tensor& running_mean() { return *FindBuffer("running_mean"); }
  const Tensor& running_var() { return *FindBuffer("running_var"); }
  const Tensor& num_batches_tracked() { return *FindBuffer("num_batches_tracked"); }

 private:
  int64_t num_features_;
  double eps_, momentum_;
};

// Runs its children ("0", "1", ...) in order; every child is a UnaryModule.
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  template <typename M>
  std::shared_ptr<M> Append(std::shared_ptr<M> m) {
    items_.push_back(m);
    return RegisterModule(std::to_string(items_.size() - 1), std::move(m));
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<UnaryModule>& operator[](size_t i) const { return items_[i]; }
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::vector<std::shared_ptr<UnaryModule>> items_;
};

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_VISION_LAYERS_H_
