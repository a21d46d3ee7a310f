#include "zeroshard/autograd/nn/resnet.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/autograd/vision_ops.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::nn {

namespace {

// torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu").
InitSpec KaimingFanOut(int64_t out_channels, int64_t kh, int64_t kw) {
  return InitSpec::Normal(0.0f, std::sqrt(2.0f / static_cast<float>(out_channels * kh * kw)));
}

std::shared_ptr<Conv2d> Conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return std::make_shared<Conv2d>(in, out, std::array<int64_t, 2>{k, k},
                                  Conv2dOptions{.stride = {stride, stride}, .padding = {pad, pad}},
                                  /*bias=*/false, KaimingFanOut(out, k, k), InitSpec::Zeros());
}

}  // namespace

std::string ResNetConfig::ToString() const {
  return absl::StrCat("ResNet(widths [", absl::StrJoin(widths, ", "), "], depths [",
                      absl::StrJoin(depths, ", "), "], in_channels ", in_channels, ", classes ",
                      num_classes, ", stem ", stem == ResNetStem::kImageNet ? "imagenet" : "cifar",
                      zero_init_residual ? ", zero_init_residual" : "", ")");
}

absl::Status ResNetConfig::Validate() const {
  if (widths.empty() || widths.size() != depths.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ResNetConfig: ", widths.size(), " widths and ",
                                                   depths.size(), " depths; expected as many of each, at least one"));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1 || depths[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("ResNetConfig: layer", i + 1, " has width ", widths[i],
                                                     " and depth ", depths[i], "; expected both >= 1"));
    }
  }
  if (in_channels < 1 || num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ResNetConfig: in_channels ", in_channels, ", num_classes ",
                                                   num_classes, "; expected both >= 1"));
  }
  return absl::OkStatus();
}

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, bool zero_init_residual)
    : UnaryModule("BasicBlock") {
  conv1_ = RegisterModule("conv1", Conv(in_planes, planes, 3, stride, 1));
  bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2_ = RegisterModule("conv2", Conv(planes, planes, 3, 1, 1));
  bn2_ = RegisterModule("bn2", std::make_shared<BatchNorm2d>(
                                   planes, 1e-5, 0.1, zero_init_residual ? InitSpec::Zeros() : InitSpec::Ones()));
  if (stride != 1 || in_planes != planes) {
    downsample_ = RegisterModule("downsample", std::make_shared<Sequential>());
    downsample_->Append(Conv(in_planes, planes, 1, stride, 0));
    downsample_->Append(std::make_shared<BatchNorm2d>(planes));
  }
}

absl::StatusOr<Variable> BasicBlock::Forward(const Variable& x) {
  ZS_ASSIGN_OR_RETURN(Variable h, (*conv1_)(x));
  ZS_ASSIGN_OR_RETURN(h, (*bn1_)(h));
  ZS_ASSIGN_OR_RETURN(h, ops::Relu(h));
  ZS_ASSIGN_OR_RETURN(h, (*conv2_)(h));
  ZS_ASSIGN_OR_RETURN(h, (*bn2_)(h));
  Variable shortcut = x;
  if (downsample_ != nullptr) {
    ZS_ASSIGN_OR_RETURN(shortcut, (*downsample_)(x));
  }
  ZS_ASSIGN_OR_RETURN(h, ops::Add(h, shortcut));
  return ops::Relu(h);
}

ResNet::ResNet(ResNetConfig config) : UnaryModule("ResNet"), config_(std::move(config)) {
  const int64_t stem_width = config_.widths.empty() ? 64 : config_.widths[0];
  if (config_.stem == ResNetStem::kImageNet) {
    conv1_ = RegisterModule("conv1", Conv(config_.in_channels, stem_width, 7, 2, 3));
  } else {
    conv1_ = RegisterModule("conv1", Conv(config_.in_channels, stem_width, 3, 1, 1));
  }
  bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(stem_width));
  int64_t in_planes = stem_width;
  for (size_t l = 0; l < config_.widths.size() && l < config_.depths.size(); ++l) {
    auto layer = RegisterModule(absl::StrCat("layer", l + 1), std::make_shared<Sequential>());
    for (int64_t b = 0; b < config_.depths[l]; ++b) {
      const int64_t stride = (l > 0 && b == 0) ? 2 : 1;
      layer->Append(std::make_shared<BasicBlock>(in_planes, config_.widths[l], stride,
                                                 config_.zero_init_residual));
      in_planes = config_.widths[l];
    }
    layers_.push_back(layer);
  }
  fc_ = RegisterModule("fc", std::make_shared<Linear>(in_planes, config_.num_classes));
}

absl::StatusOr<Variable> ResNet::Forward(const Variable& images) {
  ZS_RETURN_IF_ERROR(config_.Validate());
  if (images.defined() && (images.dim() != 4 || images.size(1) != config_.in_channels)) {
    return absl::InvalidArgumentError(absl::StrCat("ResNet: images of shape ", ShapeToString(images.shape()),
                                                   ", expected [N, ", config_.in_channels, ", H, W]"));
  }
  ZS_ASSIGN_OR_RETURN(Variable h, (*conv1_)(images));
  ZS_ASSIGN_OR_RETURN(h, (*bn1_)(h));
  ZS_ASSIGN_OR_RETURN(h, ops::Relu(h));
  if (config_.stem == ResNetStem::kImageNet) {
    ZS_ASSIGN_OR_RETURN(h, ops::MaxPool2d(h, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}));
  }
  for (const auto& layer : layers_) {
    ZS_ASSIGN_OR_RETURN(h, (*layer)(h));
  }
  ZS_ASSIGN_OR_RETURN(h, ops::AdaptiveAvgPool2d(h, 1, 1));
  ZS_ASSIGN_OR_RETURN(h, ops::Flatten(h));
  return (*fc_)(h);
}

int64_t ResNetForwardMacs(const ResNetConfig& c, int64_t h, int64_t w) {
  int64_t macs = 0;
  auto conv = [&](int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
    h = ConvOutputSize(h, k, s, p, 1);
    w = ConvOutputSize(w, k, s, p, 1);
    macs += out * h * w * in * k * k;
  };
  const int64_t stem = c.widths[0];
  if (c.stem == ResNetStem::kImageNet) {
    conv(c.in_channels, stem, 7, 2, 3);
    h = ConvOutputSize(h, 3, 2, 1, 1);
    w = ConvOutputSize(w, 3, 2, 1, 1);
  } else {
    conv(c.in_channels, stem, 3, 1, 1);
  }
  int64_t in = stem;
  for (size_t l = 0; l < c.widths.size(); ++l) {
    for (int64_t b = 0; b < c.depths[l]; ++b) {
      const int64_t s = (l > 0 && b == 0) ? 2 : 1;
      conv(in, c.widths[l], 3, s, 1);
      conv(c.widths[l], c.widths[l], 3, 1, 1);
      if (s != 1 || in != c.widths[l]) {
        macs += c.widths[l] * h * w * in;  // 1x1 downsample at the block's output size
      }
      in = c.widths[l];
    }
  }
  return macs + in * c.num_classes;
}

}  // namespace zeroshard::nn
