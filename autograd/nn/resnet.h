// A ResNet with torchvision's module tree and names (torchvision.models.resnet,
// BasicBlock), so weights move to and from PyTorch code unchanged through
// safetensors:
//
//   conv1.weight  bn1.{weight,bias,running_mean,running_var,num_batches_tracked}
//   layer{1..4}.{b}.conv1.weight  .bn1.*  .conv2.weight  .bn2.*
//   layer{l}.0.downsample.0.weight  layer{l}.0.downsample.1.*   (1x1 conv + BN, where shapes change)
//   fc.weight  fc.bias
//
//   ResNetConfig c;                                   // ResNet-18: widths 64..512, depths 2,2,2,2
//   c.num_classes = 10;
//   c.stem = ResNetStem::kCifar;                      // 3x3 stride-1 conv1, no max-pool (32x32 inputs)
//   auto net = std::make_shared<nn::ResNet>(c);       // shapes only
//   ZS_RETURN_IF_ERROR(net->Materialize(seed));
//   ZS_ASSIGN_OR_RETURN(Variable logits, (*net)(images));   // images [N, 3, H, W] -> [N, classes]
//
// Forward (torchvision's): conv1, bn1, relu, maxpool (3x3/2, padding 1; the
// ImageNet stem only), the layers (each block: conv3x3(stride) bn relu
// conv3x3 bn, plus the identity or downsample(x), relu; the first block of
// layers 2.. has stride 2), adaptive average pool to 1x1, flatten, fc.
// Init (torchvision's): convolutions normal(0, sqrt(2 / (O KH KW))) (Kaiming,
// fan_out, ReLU); BatchNorm weight 1, bias 0 (bn2.weight 0 with
// zero_init_residual); fc as nn.Linear.
#ifndef ZEROSHARD_AUTOGRAD_NN_RESNET_H_
#define ZEROSHARD_AUTOGRAD_NN_RESNET_H_

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/nn/module.h"
#include "zeroshard/autograd/nn/vision_layers.h"

namespace zeroshard::nn {

enum class ResNetStem {
  kImageNet,  // conv1 7x7 stride 2 padding 3, then max-pool 3x3 stride 2 (torchvision)
  kCifar,     // conv1 3x3 stride 1 padding 1, no max-pool (small images; same names)
};

struct ResNetConfig {
  std::vector<int64_t> widths = {64, 128, 256, 512};  // channels of layer1, layer2, ...
  std::vector<int64_t> depths = {2, 2, 2, 2};         // BasicBlocks per layer
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  ResNetStem stem = ResNetStem::kImageNet;
  bool zero_init_residual = false;
  std::string ToString() const;
  absl::Status Validate() const;
};

// conv3x3 -> bn -> relu -> conv3x3 -> bn, + identity or downsample(x), relu.
class BasicBlock : public UnaryModule {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, bool zero_init_residual);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;  // null: identity shortcut
};

class ResNet : public UnaryModule {
 public:
  explicit ResNet(ResNetConfig config);
  // images [N, in_channels, H, W] -> logits [N, num_classes].
  absl::StatusOr<Variable> Forward(const Variable& images) override;
  const ResNetConfig& config() const { return config_; }

 private:
  ResNetConfig config_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<Sequential>> layers_;
  std::shared_ptr<Linear> fc_;
};

// Multiply-adds of one forward pass at `h` x `w` (convolutions and fc; for MFU
// and images/s figures).
int64_t ResNetForwardMacs(const ResNetConfig& config, int64_t h, int64_t w);

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_RESNET_H_
