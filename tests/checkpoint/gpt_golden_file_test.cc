// The committed GPT golden file (tests/testdata/gpt_golden.safetensors, written by
// tools/golden/gpt_golden.py) parses with zeroshard's reader and holds every key the
// parity tests need, with the right dtypes and shapes, and is self-consistent. The
// numeric comparison with zeroshard's GPT lives with the model's tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

constexpr char kGolden[] = "tests/testdata/gpt_golden.safetensors";

struct Config {
  int64_t n_layer = 2, n_head = 2, n_embd = 16, block_size = 8, vocab_size = 32;
  int64_t batch_size = 2, seq_len = 8;
};

// Parameter names and shapes in nanoGPT's named_parameters() order (the tied
// weight once, as transformer.wte.weight).
std::vector<std::pair<std::string, Shape>> Parameters(const Config& c) {
  const int64_t C = c.n_embd;
  std::vector<std::pair<std::string, Shape>> p = {{"transformer.wte.weight", {c.vocab_size, C}},
                                                  {"transformer.wpe.weight", {c.block_size, C}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = absl::StrCat("transformer.h.", i, ".");
    p.push_back({h + "ln_1.weight", {C}});
    p.push_back({h + "ln_1.bias", {C}});
    p.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    p.push_back({h + "attn.c_attn.bias", {3 * C}});
    p.push_back({h + "attn.c_proj.weight", {C, C}});
    p.push_back({h + "attn.c_proj.bias", {C}});
    p.push_back({h + "ln_2.weight", {C}});
    p.push_back({h + "ln_2.bias", {C}});
    p.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    p.push_back({h + "mlp.c_fc.bias", {4 * C}});
    p.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    p.push_back({h + "mlp.c_proj.bias", {C}});
  }
  p.push_back({"transformer.ln_f.weight", {C}});
  p.push_back({"transformer.ln_f.bias", {C}});
  return p;
}

class GptGoldenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = SafetensorsFile::Open(kGolden);
    ZS_ASSERT_OK(f);
    file_ = std::make_unique<SafetensorsFile>(*std::move(f));
  }

  std::vector<float> Floats(const std::string& name) {
    auto t = file_->Read(name);
    ZS_CHECK(t.ok(), t.status().ToString());
    auto v = t->ToVector<float>();
    ZS_CHECK(v.ok(), v.status().ToString());
    return *v;
  }

  void ExpectEntry(const std::string& name, DType dtype, const Shape& shape) {
    const SafetensorsEntry* e = file_->header().Find(name);
    ASSERT_NE(e, nullptr) << "missing " << name;
    EXPECT_EQ(e->dtype, dtype) << name;
    EXPECT_EQ(e->shape, shape) << name;
  }

  std::unique_ptr<SafetensorsFile> file_;
  Config c_;
};

TEST_F(GptGoldenFileTest, MetadataDescribesTheRun) {
  const auto& m = file_->metadata();
  EXPECT_EQ(m.at("format"), "zeroshard-gpt-golden/1");
  for (const char* key : {"generator", "torch_version", "config", "seed", "parameters", "init",
                          "model", "precision", "optimizer", "keys", "fp32_max_abs_diff"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  const nlohmann::json config = nlohmann::json::parse(m.at("config"));
  EXPECT_EQ(config.at("n_layer"), c_.n_layer);
  EXPECT_EQ(config.at("n_head"), c_.n_head);
  EXPECT_EQ(config.at("n_embd"), c_.n_embd);
  EXPECT_EQ(config.at("block_size"), c_.block_size);
  EXPECT_EQ(config.at("vocab_size"), c_.vocab_size);
  EXPECT_EQ(config.at("batch_size"), c_.batch_size);
  EXPECT_EQ(config.at("seq_len"), c_.seq_len);
  EXPECT_EQ(config.at("bias"), true);
  EXPECT_EQ(config.at("layer_norm_eps"), 1e-5);
  // The parameter list, in order, is nanoGPT's.
  std::vector<std::string> names;
  for (const auto& [name, shape] : Parameters(c_)) names.push_back(name);
  EXPECT_EQ(nlohmann::json::parse(m.at("parameters")).get<std::vector<std::string>>(), names);
  // torch's own fp32 run stayed close to the float64 reference.
  const nlohmann::json diffs = nlohmann::json::parse(m.at("fp32_max_abs_diff"));
  EXPECT_LT(diffs.at("logits").get<double>(), 1e-5);
  EXPECT_LT(diffs.at("loss").get<double>(), 1e-5);
}

TEST_F(GptGoldenFileTest, EveryExpectedKeyWithItsShapeAndDType) {
  const int64_t B = c_.batch_size, T = c_.seq_len, V = c_.vocab_size;
  std::set<std::string> expected;
  auto expect = [&](const std::string& name, DType dtype, const Shape& shape) {
    ExpectEntry(name, dtype, shape);
    expected.insert(name);
  };
  for (const auto& [name, shape] : Parameters(c_)) {
    expect(name, DType::kF32, shape);
    expect("grad." + name, DType::kF32, shape);
    expect("adamw_final." + name, DType::kF32, shape);
  }
  expect("lm_head.weight", DType::kF32, {V, c_.n_embd});  // tied: saved under both names
  expect("input_ids", DType::kI64, {B, T});
  expect("targets", DType::kI64, {B, T});
  expect("logits", DType::kF32, {B, T, V});
  expect("loss", DType::kF32, {});
  expect("adamw_losses", DType::kF32, {5});
  // Nothing else (in particular no grad.lm_head.weight: the tied gradient is summed
  // under grad.transformer.wte.weight).
  std::set<std::string> present;
  for (const SafetensorsEntry& e : file_->entries()) present.insert(e.name);
  EXPECT_EQ(present, expected);
}

TEST_F(GptGoldenFileTest, SelfConsistent) {
  const int64_t V = c_.vocab_size;
  // The tied weight is the same under both names.
  EXPECT_EQ(Floats("lm_head.weight"), Floats("transformer.wte.weight"));

  // Token ids are in range.
  for (const char* name : {"input_ids", "targets"}) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor t, file_->Read(name));
    ZS_ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> ids, t.ToVector<int64_t>());
    for (int64_t id : ids) {
      EXPECT_TRUE(id >= 0 && id < V) << name << " " << id;
    }
  }

  // loss is the mean cross-entropy of the stored logits (recomputed in double).
  const std::vector<float> logits = Floats("logits");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets_t, file_->Read("targets"));
  const std::vector<int64_t> targets = *targets_t.ToVector<int64_t>();
  double total = 0;
  for (size_t row = 0; row < targets.size(); ++row) {
    const float* l = &logits[row * V];
    const double mx = *std::max_element(l, l + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(l[j] - mx);
    total += mx + std::log(sum) - l[targets[row]];
  }
  const float loss = Floats("loss")[0];
  EXPECT_NEAR(total / targets.size(), loss, 1e-6);

  // adamw_losses[0] is the loss before any step, and training on one batch lowers it.
  const std::vector<float> losses = Floats("adamw_losses");
  EXPECT_EQ(losses[0], loss);
  for (size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]);

  // Every gradient is finite and not all zero; every parameter moved in 5 steps.
  for (const auto& [name, shape] : Parameters(c_)) {
    const std::vector<float> g = Floats("grad." + name);
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return std::isfinite(x); })) << name;
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float x) { return x != 0.0f; })) << name;
    EXPECT_NE(Floats("adamw_final." + name), Floats(name)) << name;
  }
  // Biases and LayerNorm parameters are not the trivial 0 and 1 (see the script's init).
  const std::vector<float> ln = Floats("transformer.h.0.ln_1.weight");
  EXPECT_TRUE(std::any_of(ln.begin(), ln.end(), [](float x) { return x != 1.0f; }));
  const std::vector<float> bias = Floats("transformer.h.1.attn.c_attn.bias");
  EXPECT_TRUE(std::any_of(bias.begin(), bias.end(), [](float x) { return x != 0.0f; }));
}

}  // namespace
}  // namespace zeroshard
