// GPT parity with PyTorch (nanoGPT): the committed golden file written by
// tools/golden/gpt_golden.py holds a tiny GPT's weights, one batch, its logits,
// loss, every gradient and 5 AdamW steps; this test loads the weights into our
// GPT and compares everything. Tolerances (|got - want| <= atol + rtol |want|)
// follow tools/golden/README.md: torch's own fp32-vs-fp64 differences are
// ~5e-8 (logits) and ~3e-8 (gradients).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ToDoubles;

constexpr char kGolden[] = "tests/testdata/gpt_golden.safetensors";

struct Golden {
  SafetensorsFile file;
  nn::GptConfig config;
};

Golden OpenGolden() {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(kGolden);
  EXPECT_TRUE(f.ok()) << f.status();
  const nlohmann::json cfg = nlohmann::json::parse(f->metadata().at("config"));
  nn::GptConfig c;
  c.n_layer = cfg.at("n_layer");
  c.n_head = cfg.at("n_head");
  c.n_embd = cfg.at("n_embd");
  c.block_size = cfg.at("block_size");
  c.vocab_size = cfg.at("vocab_size");
  return Golden{*std::move(f), c};
}

// Our GPT with the golden weights (the tied weight is offered under both names).
std::shared_ptr<nn::Gpt> LoadModel(const Golden& g) {
  auto gpt = std::make_shared<nn::Gpt>(g.config);
  nn::NamedTensors state;
  for (const auto& [name, slot] : gpt->NamedParameterSlots()) {
    absl::StatusOr<Tensor> t = g.file.Read(name);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status();
    state.emplace_back(name, *t);
  }
  absl::StatusOr<nn::LoadStateDictResult> r = gpt->LoadStateDict(state);
  EXPECT_TRUE(r.ok()) << r.status();
  return gpt;
}

TEST(GptGolden, ConfigAndNamesMatchNanoGpt) {
  Golden g = OpenGolden();
  auto gpt = LoadModel(g);
  const nlohmann::json params = nlohmann::json::parse(g.file.metadata().at("parameters"));
  std::vector<std::string> ours;
  for (auto& [name, v] : gpt->NamedParameters()) ours.push_back(name);
  EXPECT_EQ(ours, params.get<std::vector<std::string>>());
  // The tied weight: one Variable, both names in the state dict.
  std::set<std::string> keys;
  for (auto& [k, t] : gpt->StateDict()) keys.insert(k);
  EXPECT_TRUE(keys.count("lm_head.weight"));
  EXPECT_TRUE(keys.count("transformer.wte.weight"));
}

TEST(GptGolden, LogitsLossAndEveryGradient) {
  Golden g = OpenGolden();
  auto gpt = LoadModel(g);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, g.file.Read("input_ids"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, g.file.Read("targets"));
  ZS_ASSERT_OK_AND_ASSIGN(nn::GptOutput out, gpt->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_logits, g.file.Read("logits"));
  ExpectClose(out.logits.value(), ToDoubles(want_logits), 1e-5, 1e-5, "logits");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_loss, g.file.Read("loss"));
  EXPECT_NEAR(out.loss.value().Item().value(), want_loss.Item().value(), 1e-5);
  ZS_ASSERT_OK(autograd::Backward(out.loss));
  for (auto& [name, v] : gpt->NamedParameters()) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, g.file.Read("grad." + name));
    const std::vector<double> w = ToDoubles(want);
    double max_abs = 0;
    for (double x : w) max_abs = std::max(max_abs, std::fabs(x));
    ASSERT_TRUE(v.grad().defined()) << name;
    ExpectClose(v.grad(), w, 1e-6 + 1e-4 * max_abs, 1e-4, "grad." + name);
  }
}

TEST(GptGolden, FiveAdamWStepsWithNanoGptGroups) {
  Golden g = OpenGolden();
  auto gpt = LoadModel(g);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, g.file.Read("input_ids"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, g.file.Read("targets"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_losses, g.file.Read("adamw_losses"));
  const std::vector<double> wl = ToDoubles(want_losses);
  auto params = gpt->NamedParameters();
  std::vector<optim::AdamWState> states;
  for (auto& [name, v] : params) {
    ZS_ASSERT_OK_AND_ASSIGN(optim::AdamWState s, optim::AdamWState::Create(v.numel()));
    states.push_back(std::move(s));
  }
  const optim::AdamWOptions adamw{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  for (int step = 0; step < 5; ++step) {
    for (auto& [name, v] : params) v.reset_grad();
    ZS_ASSERT_OK_AND_ASSIGN(nn::GptOutput out, gpt->Forward(ids, targets));
    EXPECT_NEAR(out.loss.value().Item().value(), wl[step], 1e-5) << "step " << step;
    ZS_ASSERT_OK(autograd::Backward(out.loss));
    for (size_t i = 0; i < params.size(); ++i) {
      const autograd::Variable& v = params[i].second;
      const double wd = nn::Gpt::DecaysWeight(v.shape()) ? 0.1 : 0.0;
      ZS_ASSERT_OK(optim::AdamWStep(adamw, {optim::ParamGroup::Whole(v.numel(), 1e-3, wd)},
                                    v.value(), v.grad(), states[i]));
    }
  }
  for (auto& [name, v] : params) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, g.file.Read("adamw_final." + name));
    ExpectClose(v.value(), ToDoubles(want), 1e-5, 0, "adamw_final." + name);
  }
}

}  // namespace
}  // namespace zeroshard
