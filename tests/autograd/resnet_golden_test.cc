// ResNet parity with PyTorch (torchvision's layout): the committed golden file
// written by tools/golden/resnet_golden.py holds a small ResNet's weights and
// BatchNorm buffers (perturbed so that every one matters), one batch of
// images, the training-mode logits, loss, every gradient and the running
// statistics after the forward, the parameters after one SGD step (momentum,
// weight decay), the next forward's loss and buffers, and the eval-mode logits.
// Tolerances: torch's own fp32-vs-fp64 differences (metadata
// fp32_max_abs_diff) are <= 6e-7; ours are checked at 1e-5 absolute plus 1e-4
// relative, gradients 2e-6 absolute.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/nn/resnet.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/optim/sgd.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ToDoubles;

constexpr char kGolden[] = "tests/testdata/resnet_golden.safetensors";

struct Golden {
  SafetensorsFile file;
  nn::ResNetConfig config;
  nlohmann::json sgd;
};

Golden OpenGolden() {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(kGolden);
  EXPECT_TRUE(f.ok()) << f.status();
  const nlohmann::json cfg = nlohmann::json::parse(f->metadata().at("config"));
  nn::ResNetConfig c;
  c.widths = cfg.at("widths").get<std::vector<int64_t>>();
  c.depths = cfg.at("depths").get<std::vector<int64_t>>();
  c.in_channels = cfg.at("in_channels");
  c.num_classes = cfg.at("num_classes");
  c.stem = cfg.at("stem") == "imagenet" ? nn::ResNetStem::kImageNet : nn::ResNetStem::kCifar;
  nlohmann::json sgd = nlohmann::json::parse(f->metadata().at("sgd"));
  return Golden{*std::move(f), c, std::move(sgd)};
}

std::shared_ptr<nn::ResNet> LoadModel(const Golden& g) {
  auto net = std::make_shared<nn::ResNet>(g.config);
  nn::NamedTensors state;
  for (const auto& [name, t] : net->StateDict()) {
    absl::StatusOr<Tensor> v = g.file.Read(name);
    EXPECT_TRUE(v.ok()) << name << ": " << v.status();
    state.emplace_back(name, *v);
  }
  absl::StatusOr<nn::LoadStateDictResult> r = net->LoadStateDict(state);
  EXPECT_TRUE(r.ok()) << r.status();
  return net;
}

void ExpectBuffers(nn::ResNet& net, const SafetensorsFile& f, const std::string& prefix) {
  for (const auto& [name, t] : net.NamedBuffers()) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, f.Read(prefix + name));
    if (t.dtype() == DType::kI64) {
      EXPECT_EQ(t.ToVector<int64_t>().value(), want.ToVector<int64_t>().value()) << prefix << name;
    } else {
      ExpectClose(t, ToDoubles(want), 1e-6, 1e-5, prefix + name);
    }
  }
}

TEST(ResNetGolden, NamesMatchTorchvision) {
  Golden g = OpenGolden();
  nn::ResNet net(g.config);
  std::vector<std::string> params, buffers;
  for (auto& [name, v] : net.NamedParameters()) params.push_back(name);
  for (auto& [name, t] : net.NamedBuffers()) buffers.push_back(name);
  EXPECT_EQ(params, nlohmann::json::parse(g.file.metadata().at("parameters")).get<std::vector<std::string>>());
  EXPECT_EQ(buffers, nlohmann::json::parse(g.file.metadata().at("buffers")).get<std::vector<std::string>>());
  // Spot checks of torchvision's spelling.
  EXPECT_EQ(params.front(), "conv1.weight");
  EXPECT_EQ(buffers.front(), "bn1.running_mean");
  EXPECT_NE(std::find(params.begin(), params.end(), "layer2.0.downsample.0.weight"), params.end());
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "layer3.0.downsample.1.num_batches_tracked"), buffers.end());
  EXPECT_EQ(params.back(), "fc.bias");
}

TEST(ResNetGolden, TrainingStepMatchesTorch) {
  Golden g = OpenGolden();
  auto net = LoadModel(g);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor images, g.file.Read("images"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, g.file.Read("targets"));
  net->Train();
  ZS_ASSERT_OK_AND_ASSIGN(Variable logits, (*net)(Variable(images)));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::CrossEntropy(logits, targets));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_logits, g.file.Read("logits"));
  ExpectClose(logits.value(), ToDoubles(want_logits), 1e-5, 1e-4, "logits");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_loss, g.file.Read("loss"));
  EXPECT_NEAR(loss.value().Item().value(), want_loss.Item().value(), 1e-5);
  ExpectBuffers(*net, g.file, "after_forward.");

  ZS_ASSERT_OK(autograd::Backward(loss));
  for (auto& [name, v] : net->NamedParameters()) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, g.file.Read("grad." + name));
    ASSERT_TRUE(v.grad().defined()) << name;
    ExpectClose(v.grad(), ToDoubles(want), 2e-6, 1e-4, "grad." + name);
  }

  // One torch.optim.SGD step per parameter.
  const optim::SgdOptions sgd{.momentum = g.sgd.at("momentum").get<double>()};
  const double lr = g.sgd.at("lr"), wd = g.sgd.at("weight_decay");
  for (auto& [name, v] : net->NamedParameters()) {
    ZS_ASSERT_OK_AND_ASSIGN(optim::SgdState state, optim::SgdState::Create(v.numel(), sgd));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor p, v.value().Reshape({-1}));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor gr, v.grad().Reshape({-1}));
    ZS_ASSERT_OK(optim::SgdStep(sgd, {optim::ParamGroup::Whole(v.numel(), lr, wd)}, p, gr, state));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, g.file.Read("after_step." + name));
    ExpectClose(v.value(), ToDoubles(want), 1e-6, 1e-5, "after_step." + name);
  }

  {
    autograd::NoGradGuard no_grad;
    ZS_ASSERT_OK_AND_ASSIGN(Variable logits2, (*net)(Variable(images)));
    ZS_ASSERT_OK_AND_ASSIGN(Variable loss2, ops::CrossEntropy(logits2, targets));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want_loss2, g.file.Read("loss_after_step"));
    EXPECT_NEAR(loss2.value().Item().value(), want_loss2.Item().value(), 1e-5);
    ExpectBuffers(*net, g.file, "after_second_forward.");
    net->Eval();
    ZS_ASSERT_OK_AND_ASSIGN(Variable eval_logits, (*net)(Variable(images)));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want_eval, g.file.Read("eval_logits"));
    ExpectClose(eval_logits.value(), ToDoubles(want_eval), 1e-5, 1e-4, "eval_logits");
  }
}

TEST(ResNet, Resnet18LayoutAndMacs) {
  nn::ResNet net(nn::ResNetConfig{});  // torchvision resnet18, 1000 classes
  EXPECT_EQ(net.NumParameters(), 11689512);  // torchvision.models.resnet18().parameters()
  EXPECT_EQ(net.NamedBuffers().size(), 60u);  // 20 BatchNorms x 3 buffers
  // 1.82 GMACs at 224x224 (the figure torchvision and the ResNet paper quote as 1.8 GFLOPs).
  const int64_t macs = nn::ResNetForwardMacs(nn::ResNetConfig{}, 224, 224);
  EXPECT_GT(macs, 1810000000);
  EXPECT_LT(macs, 1830000000);
}

}  // namespace
}  // namespace zeroshard
