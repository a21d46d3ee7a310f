// The config's field table (train/config_schema.h): every row round-trips
// (its example through JSON -> RunConfig -> resolved JSON -> RunConfig gives
// the same resolved JSON, different from the defaults), its flag sets what
// the JSON key sets, the table's flags are train_gpt's flags of before, and
// the command line is parsed as Abseil would.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_flags.h"
#include "zeroshard/train/config_schema.h"

namespace zeroshard {
namespace {

using Json = nlohmann::json;

// Keys a row's example needs beside it to be valid.
const std::map<std::string, std::vector<std::string>>& Context() {
  static const auto* context = new std::map<std::string, std::vector<std::string>>{
      {"strategy.skip_init_weights", {"checkpoint.init_from=w.safetensors"}},
      {"strategy.nvme_offload.optimizer.enabled", {"strategy.nvme_offload.nvme_path=/tmp"}},
      {"strategy.nvme_offload.params.enabled", {"strategy.nvme_offload.nvme_path=/tmp"}},
  };
  return *context;
}

// The config text of the row's model type.
std::string Base(const ConfigField& f) { return f.models == kResNetOnly ? R"({"model": {"type": "resnet"}})" : "{}"; }

std::vector<std::string> ContextOf(const ConfigField& f) {
  auto it = Context().find(f.path);
  return it == Context().end() ? std::vector<std::string>{} : it->second;
}

std::string Resolved(const std::string& text, const std::vector<std::string>& overrides) {
  absl::StatusOr<RunConfig> c = ConfigFromText(text, overrides, "test.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? ResolvedConfigJson(*c) : "";
}

TEST(ConfigSchema, EveryFieldRoundTripsThroughJson) {
  int rows = 0;
  for (const ConfigField& f : ConfigFields()) {
    if (f.kind == FieldKind::kSection || !f.written) continue;
    SCOPED_TRACE(f.path);
    ++rows;
    Json root = Json::parse(Base(f));
    Json* node = &root;
    for (const std::string& k : std::vector<std::string>(absl::StrSplit(f.path, '.'))) node = &(*node)[k];
    const Json example = FieldExample(f);
    *node = example;
    const std::string defaults = Resolved(Base(f), ContextOf(f));
    const std::string once = Resolved(root.dump(), ContextOf(f));
    EXPECT_NE(once, defaults) << "the example " << example.dump() << " changes nothing";
    EXPECT_EQ(Resolved(once, {}), once);  // reads back to the same run
    // A generic kind is written as it was given.
    if (f.kind != FieldKind::kCustom && f.path != "model.type") {
      Json at = Json::parse(once);
      for (const std::string& k : std::vector<std::string>(absl::StrSplit(f.path, '.'))) at = at[k];
      EXPECT_EQ(at, example);
    }
  }
  EXPECT_GT(rows, 100);
}

TEST(ConfigSchema, EveryFlagSetsWhatItsKeySets) {
  for (const ConfigField& f : ConfigFields()) {
    for (const ConfigFlag& flag : f.flags) {
      SCOPED_TRACE(flag.name);
      const std::string text = flag.example.empty() ? FlagText(FieldExample(f)) : flag.example;
      absl::StatusOr<std::vector<std::string>> sets = OverridesFromFlags({{flag.name, text}});
      ASSERT_TRUE(sets.ok()) << sets.status();
      std::vector<std::string> overrides = ContextOf(f);
      overrides.insert(overrides.end(), sets->begin(), sets->end());
      const std::string by_flag = Resolved(Base(f), overrides);
      if (flag.to_overrides) {  // spelled its own way: it changes its field
        Json a = Json::parse(by_flag), d = Json::parse(Resolved(Base(f), ContextOf(f)));
        for (const std::string& k : std::vector<std::string>(absl::StrSplit(f.path, '.'))) {
          a = a[k];
          d = d[k];
        }
        EXPECT_NE(a, d);
        continue;
      }
      std::vector<std::string> by_key = ContextOf(f);
      by_key.push_back(absl::StrCat(f.path, "=", FieldExample(f).dump()));
      EXPECT_EQ(by_flag, Resolved(Base(f), by_key));
    }
  }
}

TEST(ConfigSchema, TheFlagsAreTrainGptsFlagsOfBefore) {
  // The ABSL_FLAGs train_gpt declared before the table (README, tests and the Makefile use them).
  const std::set<std::string> before = {
      "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "dropout", "data", "batch_size",
      "grad_accum_steps", "accumulate", "steps", "optimizer", "lr", "min_lr", "warmup_steps", "lr_schedule",
      "weight_decay", "beta1", "beta2", "grad_clip", "seed", "world_size", "backend", "sharding_strategy",
      "zero_stage", "hybrid_shard_size", "auto_wrap", "forward_prefetch", "backward_prefetch", "limit_all_gathers",
      "activation_checkpointing", "init_from", "save", "log_every", "eval_every", "eval_iters", "tensorboard",
      "sample_tokens", "temperature", "top_k", "device_memory_limit", "offload", "nvme_path", "param_dtype",
      "keep_layernorm_fp32", "keep_low_precision_grads", "reduce_dtype", "loss_scale", "initial_scale_power",
      "loss_scale_window", "hysteresis", "min_loss_scale", "work_dir", "save_every", "state_dict_type",
      "async_save", "keep_last", "write_tied_once", "resume", "trace", "trace_from", "trace_steps"};
  std::set<std::string> now;
  for (const ConfigField& f : ConfigFields()) {
    EXPECT_FALSE(f.help.empty()) << f.path;
    for (const ConfigFlag& flag : f.flags) {
      EXPECT_TRUE(now.insert(flag.name).second) << "--" << flag.name << " twice";
      EXPECT_FALSE(flag.help.empty()) << flag.name;
    }
  }
  // Flags added since, each with its key.
  const std::set<std::string> added = {"tokenizer",         "timeout_s",           "model",
                                       "n_kv_head",         "intermediate_size",   "rope_theta",
                                       "comm_hook",         "comm_hook_block_size", "comm_hook_grad_bits",
                                       "comm_hook_group_size", "allow_tf32"};
  std::set<std::string> want = before;
  want.insert(added.begin(), added.end());
  EXPECT_EQ(now, want);
  // --help lists every one.
  const std::string help = ConfigFlagsHelp();
  for (const std::string& name : before) EXPECT_NE(help.find("--" + name), std::string::npos) << name;
}

TEST(ConfigSchema, CommandLineSpellings) {
  std::vector<std::string> args = {"train_gpt", "--steps=5",     "--lr",     "0.1", "--notensorboard", "--config=x.json",
                                   "--forward_prefetch", "-seed=3", "--async_save=no", "--steps=6", "--print_config",
                                   "--", "--lr=1"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> given = TakeConfigFlags(&argc, argv.data());
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(*given, (std::vector<std::pair<std::string, std::string>>{{"lr", "0.1"},
                                                                       {"tensorboard", "false"},
                                                                       {"forward_prefetch", "true"},
                                                                       {"seed", "3"},
                                                                       {"async_save", "false"},
                                                                       {"steps", "6"}}));
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + argc),
            (std::vector<std::string>{"train_gpt", "--config=x.json", "--print_config", "--", "--lr=1"}));
  std::vector<std::string> bad = {"train_gpt", "--tensorboard=maybe"};
  std::vector<char*> bad_argv = {bad[0].data(), bad[1].data()};
  int bad_argc = 2;
  EXPECT_FALSE(TakeConfigFlags(&bad_argc, bad_argv.data()).ok());
  std::vector<std::string> missing = {"train_gpt", "--steps"};
  std::vector<char*> missing_argv = {missing[0].data(), missing[1].data()};
  int missing_argc = 2;
  EXPECT_FALSE(TakeConfigFlags(&missing_argc, missing_argv.data()).ok());
}

TEST(ConfigSchema, KeyPathsAreTheTablesGptLeaves) {
  std::vector<std::string> paths = ConfigKeyPaths();
  EXPECT_EQ(std::count(paths.begin(), paths.end(), "model.n_layer"), 1);
  EXPECT_EQ(std::count(paths.begin(), paths.end(), "strategy.nvme_offload.aio.block_size"), 1);
  EXPECT_EQ(std::count(paths.begin(), paths.end(), "model.widths"), 0);
  EXPECT_EQ(std::count(paths.begin(), paths.end(), "deepspeed"), 0);
}

}  // namespace
}  // namespace zeroshard
