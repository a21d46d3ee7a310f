// Llama parity with PyTorch: the committed golden files written by
// tools/golden/llama_golden.py (Hugging Face's modeling_llama math, names and
// layouts) hold a tiny Llama's config.json, weights, one batch, its logits,
// loss, every gradient and 5 AdamW steps; this test builds our nn::Llama from
// that config, loads the weights by name and compares everything. Two models:
// "gqa" (untied, 4 query heads on 2 kv heads, head_dim 8 != hidden / heads,
// Llama 3 rope scaling) and "tied" (tied embeddings, multi-query attention).
//
// Tolerances (|got - want| <= atol + rtol |want|), the same as the GPT golden
// test and for the same reason: the reference is float64 rounded once to
// float32; our float32 forward runs ~10 dependent reductions of <= 40 terms,
// each adding at most a few float32 roundings (2^-24 ~ 6e-8) relative to
// values of order 1, so logits and the loss agree to well under 1e-5
// (torch's own float32 run differs from the reference by 5e-8, recorded in
// the files' metadata as fp32_max_abs_diff). Gradients are compared relative
// to each tensor's largest gradient (1e-4 of it), since a small gradient
// element is a difference of larger terms. After 5 AdamW steps each weight has
// moved by at most 5 lr = 5e-3, its update m / sqrt(v) a ratio of gradient
// sums, so weights agree to 1e-5.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>
#include <string>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ToDoubles;

struct Golden {
  SafetensorsFile file;
  nn::LlamaConfig config;
};

Golden OpenGolden(const std::string& which) {
  absl::StatusOr<SafetensorsFile> f =
      SafetensorsFile::Open("tests/testdata/llama_golden_" + which + ".safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  absl::StatusOr<nn::LlamaConfig> c = nn::LlamaConfig::FromHfJson(f->metadata().at("config"));
  EXPECT_TRUE(c.ok()) << c.status();
  return Golden{*std::move(f), *c};
}

// Our Llama with the golden weights (a tied weight is offered under both names).
std::shared_ptr<nn::Llama> LoadModel(const Golden& g) {
  auto llama = std::make_shared<nn::Llama>(g.config);
  nn::NamedTensors state;
  for (const auto& [name, slot] : llama->NamedParameterSlots()) {
    absl::StatusOr<Tensor> t = g.file.Read(name);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status();
    state.emplace_back(name, *t);
  }
  absl::StatusOr<nn::LoadStateDictResult> r = llama->LoadStateDict(state);
  EXPECT_TRUE(r.ok()) << r.status();
  return llama;
}

class LlamaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaGolden, ConfigAndNamesMatchHuggingFace) {
  Golden g = OpenGolden(GetParam());
  auto llama = LoadModel(g);
  const nlohmann::json params = nlohmann::json::parse(g.file.metadata().at("parameters"));
  std::vector<std::string> ours;
  for (auto& [name, v] : llama->NamedParameters()) ours.push_back(name);
  EXPECT_EQ(ours, params.get<std::vector<std::string>>());
  std::set<std::string> keys;
  for (auto& [k, t] : llama->StateDict()) keys.insert(k);
  EXPECT_TRUE(keys.count("lm_head.weight"));
  EXPECT_TRUE(keys.count("model.embed_tokens.weight"));
  EXPECT_EQ(g.config.tie_word_embeddings, GetParam() == "tied");
  // The config survives our config.json: every field transformers reads back.
  ZS_ASSERT_OK_AND_ASSIGN(nn::LlamaConfig again, nn::LlamaConfig::FromHfJson(g.config.ToHfJson()));
  EXPECT_EQ(again.ToString(), g.config.ToString());
  EXPECT_EQ(again.head_size(), g.config.head_size());
  EXPECT_EQ(again.rope_scaling.has_value(), g.config.rope_scaling.has_value());
}

TEST_P(LlamaGolden, LogitsLossAndEveryGradient) {
  Golden g = OpenGolden(GetParam());
  auto llama = LoadModel(g);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, g.file.Read("input_ids"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, g.file.Read("targets"));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput out, llama->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_logits, g.file.Read("logits"));
  ExpectClose(out.logits.value(), ToDoubles(want_logits), 1e-5, 1e-5, "logits");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_loss, g.file.Read("loss"));
  EXPECT_NEAR(out.loss.value().Item().value(), want_loss.Item().value(), 1e-5);
  ZS_ASSERT_OK(autograd::Backward(out.loss));
  for (auto& [name, v] : llama->NamedParameters()) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, g.file.Read("grad." + name));
    const std::vector<double> w = ToDoubles(want);
    double max_abs = 0;
    for (double x : w) max_abs = std::max(max_abs, std::fabs(x));
    ASSERT_TRUE(v.grad().defined()) << name;
    ExpectClose(v.grad(), w, 1e-6 + 1e-4 * max_abs, 1e-4, "grad." + name);
  }
}

TEST_P(LlamaGolden, FiveAdamWSteps) {
  Golden g = OpenGolden(GetParam());
  auto llama = LoadModel(g);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, g.file.Read("input_ids"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, g.file.Read("targets"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_losses, g.file.Read("adamw_losses"));
  const std::vector<double> wl = ToDoubles(want_losses);
  auto params = llama->NamedParameters();
  std::vector<optim::AdamWState> states;
  for (auto& [name, v] : params) {
    ZS_ASSERT_OK_AND_ASSIGN(optim::AdamWState s, optim::AdamWState::Create(v.numel()));
    states.push_back(std::move(s));
  }
  const optim::AdamWOptions adamw{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  for (int step = 0; step < 5; ++step) {
    for (auto& [name, v] : params) v.reset_grad();
    ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput out, llama->Forward(ids, targets));
    EXPECT_NEAR(out.loss.value().Item().value(), wl[step], 1e-5) << "step " << step;
    ZS_ASSERT_OK(autograd::Backward(out.loss));
    for (size_t i = 0; i < params.size(); ++i) {
      const autograd::Variable& v = params[i].second;
      const double wd = v.shape().size() >= 2 ? 0.1 : 0.0;  // decay on tensors of 2+ dimensions
      ZS_ASSERT_OK(optim::AdamWStep(adamw, {optim::ParamGroup::Whole(v.numel(), 1e-3, wd)},
                                    v.value(), v.grad(), states[i]));
    }
  }
  for (auto& [name, v] : params) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, g.file.Read("adamw_final." + name));
    ExpectClose(v.value(), ToDoubles(want), 1e-5, 0, "adamw_final." + name);
  }
}

// Activation checkpointing recomputes each decoder layer: the same loss and
// gradients, bit for bit (the recomputation runs the same kernels on the same values).
TEST_P(LlamaGolden, ActivationCheckpointingGivesTheSameBits) {
  Golden g = OpenGolden(GetParam());
  auto plain = LoadModel(g);
  Golden g2 = OpenGolden(GetParam());
  g2.config.activation_checkpointing = true;
  auto ckpt = LoadModel(g2);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, g.file.Read("input_ids"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, g.file.Read("targets"));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput a, plain->Forward(ids, targets));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LmOutput b, ckpt->Forward(ids, targets));
  ZS_ASSERT_OK(autograd::Backward(a.loss));
  ZS_ASSERT_OK(autograd::Backward(b.loss));
  EXPECT_EQ(a.loss.value().Item().value(), b.loss.value().Item().value());
  auto pa = plain->NamedParameters();
  auto pb = ckpt->NamedParameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> ga, pa[i].second.grad().ToVector<float>());
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> gb, pb[i].second.grad().ToVector<float>());
    EXPECT_EQ(ga, gb) << pa[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaGolden, ::testing::Values("gqa", "tied"));

// ---------------------------------------------------------------- config.json

TEST(LlamaConfig, ReadsHuggingFaceDefaultsAndRefusesWhatItCannotRun) {
  ZS_ASSERT_OK_AND_ASSIGN(nn::LlamaConfig c, nn::LlamaConfig::FromHfJson(R"({
      "model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
      "num_hidden_layers": 3, "num_attention_heads": 8, "eos_token_id": [7, 9]})"));
  EXPECT_EQ(c.num_key_value_heads, 8);  // absent: num_attention_heads
  EXPECT_EQ(c.head_size(), 8);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_THAT(nn::LlamaConfig::FromHfJson(R"({"model_type": "gpt2"})").status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("\"llama\"")));
  EXPECT_THAT(nn::LlamaConfig::FromHfJson(R"({"hidden_act": "gelu"})").status(),
              testing::StatusIs(absl::StatusCode::kUnimplemented, ::testing::HasSubstr("silu")));
  EXPECT_THAT(nn::LlamaConfig::FromHfJson(R"({"num_attention_heads": 8, "num_key_value_heads": 3,
                                              "hidden_size": 64})").status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("num_key_value_heads: expected a divisor of num_attention_heads (8), found 3")));
  EXPECT_THAT(nn::LlamaConfig::FromHfJson(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4}})").status(),
              testing::StatusIs(absl::StatusCode::kUnimplemented, ::testing::HasSubstr("\"yarn\"")));
  EXPECT_THAT(nn::LlamaConfig::FromHfJson(R"({"hidden_size": "64"})").status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("\"hidden_size\": expected an integer, found \"64\"")));
  EXPECT_THAT(nn::LlamaConfig::FromHfJson("{not json").status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("JSON")));
}

}  // namespace
}  // namespace zeroshard
