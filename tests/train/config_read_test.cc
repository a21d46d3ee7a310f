// Reading the main job's config: the defaults, every FSDP-style key and every
// train_gpt flag lands in the right TrainOptions field, the strategy's
// shorthands (FSDP's booleans and None, Lightning's names, zero_stage, the
// mixed-precision keys, NVMe offload), --set overrides convert by the
// schema's types, _base_ inheritance, and the resolved form holds every key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "zeroshard/train/config.h"
#include "zeroshard/tests/train/config_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::HasSubstr;
using testing::ExpectFields;
using testing::MustParse;
using testing::Problems;
using testing::StatusIs;
using testing::TempDir;

// ============================================================ defaults and keys

TEST(Config, DefaultsAreTheFlagDefaults) {
  const RunConfig c = MustParse("");
  ExpectFields(c, {
      {"experiment_name", "test"},  // the source's stem
      {"work_dir", "work_dirs"}, {"world_size", 4}, {"backend", "local"}, {"timeout_s", 600.0},
      {"train.model.n_layer", 4}, {"train.model.n_head", 4}, {"train.model.n_embd", 128},
      {"train.model.block_size", 64}, {"train.model.vocab_size", 256},
      {"train.data", "data/tinyshakespeare.txt"}, {"train.batch_size", 8}, {"train.steps", 200},
      {"train.optimizer.kind", optim::OptimizerKind::kAdamW}, {"train.optimizer.adamw.beta2", 0.95},
      {"train.optimizer.sgd.momentum", 0.9},
      {"train.lr.kind", optim::LrScheduleKind::kCosine}, {"train.lr.lr", 1e-3}, {"train.lr.min_lr", 1e-4},
      {"train.lr.warmup_steps", 20},
      {"train.lr.decay_steps", 200},  // follows train.steps
      {"train.sharding.strategy", ShardingStrategy::kFullShard},
      {"train.sharding.wrap.kind", WrapPolicy::Kind::kByType},
      {"train.sharding.wrap.types", std::set<std::string>{"Block"}},
      {"train.sharding.backward_prefetch", BackwardPrefetch::kBackwardPre},
      {"train.sharding.limit_all_gathers", 2},
      {"train.loss_scaling", false}, {"train.state_dict_type", "sharded"},
      {"train.work_dir", "work_dirs/test"},  // checkpoints: work_dir/experiment_name
      {"train.tensorboard", true},           // the run folder's tensorboard/ event file
  });
  EXPECT_FALSE(c.train.sharding.offload.any());
  EXPECT_EQ(MustParse("", {"train.steps=50"}).train.lr.decay_steps, 50);
  EXPECT_EQ(MustParse("", {"work_dir="}).train.work_dir, "");
}

TEST(Config, EveryFsdpStyleKeyMapsToItsField) {
  const RunConfig c = MustParse(R"({
    "description": "every key",
    "experiment_name": "exp", "work_dir": "/tmp/w",
    "distributed": {"world_size": 8, "backend": "mpi", "timeout_s": 45},
    "model": {"vocab_size": 300, "block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "dropout": 0.1, "bias": false},
    "data": {"path": "x.bin", "val_fraction": 0.2},
    "train": {"steps": 50, "batch_size": 3, "grad_accum_steps": 4, "accumulate": "no_sync", "grad_clip": 0.5,
              "seed": 7, "log_every": 5, "eval_every": 25, "eval_iters": 3, "device_memory_limit": 1000000,
              "tensorboard": false},
    "optimizer": {"type": "sgd", "lr": 0.1, "weight_decay": 0.01, "betas": [0.8, 0.9], "eps": 1e-6,
                  "momentum": 0.5, "dampening": 0.0, "nesterov": true},
    "lr_schedule": {"type": "linear", "min_lr": 0.01, "warmup_steps": 5, "decay_steps": 40},
    "loss_scaler": {"mode": "dynamic", "initial_scale_power": 12, "loss_scale_window": 100, "hysteresis": 3,
                    "consecutive_hysteresis": true, "min_loss_scale": 0.5, "scale_factor": 4.0},
    "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 4,
                 "auto_wrap_policy": {"min_num_params": 1e4}, "backward_prefetch": "BACKWARD_POST",
                 "forward_prefetch": true, "limit_all_gathers": 3,
                 "cpu_offload": {"params": true, "grads": false, "optimizer": false},
                 "mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "fp32", "buffer_dtype": "bf16"},
                 "activation_checkpointing": ["Block"], "state_dict_type": "full",
                 "sync_module_states": true, "skip_init_weights": true, "ignored_modules": ["lm_head"]},
    "checkpoint": {"init_from": "w.safetensors", "save_weights": "out.safetensors", "save_every": 10, "resume": "auto",
                   "async_save": true, "keep_last": 2},
    "sample": {"tokens": 5, "temperature": 1.5, "top_k": 3},
    "trace": {"path": "t.json", "from_step": 4, "steps": 3}
  })");
  EXPECT_EQ(c.notes.front(), "every key");
  ExpectFields(c, {
      {"experiment_name", "exp"}, {"work_dir", "/tmp/w"}, {"world_size", 8}, {"backend", "mpi"},
      {"timeout_s", 45.0},
      {"train.model.vocab_size", 300}, {"train.model.block_size", 32}, {"train.model.n_layer", 2},
      {"train.model.n_head", 2}, {"train.model.n_embd", 64}, {"train.model.dropout", 0.1},
      {"train.model.bias", false},
      {"train.data", "x.bin"}, {"train.val_fraction", 0.2},
      {"train.steps", 50}, {"train.batch_size", 3}, {"train.grad_accum_steps", 4}, {"train.no_sync", true},
      {"train.grad_clip", 0.5}, {"train.seed", 7}, {"train.log_every", 5}, {"train.eval_every", 25},
      {"train.eval_iters", 3}, {"train.device_memory_limit", 1000000}, {"train.tensorboard", false},
      {"train.optimizer.kind", optim::OptimizerKind::kSgd}, {"train.optimizer.lr", 0.1},
      {"train.lr.lr", 0.1},  // the schedule's peak is the optimizer's lr
      {"train.optimizer.weight_decay", 0.01}, {"train.optimizer.adamw.beta1", 0.8},
      {"train.optimizer.adamw.beta2", 0.9}, {"train.optimizer.adamw.eps", 1e-6},
      {"train.optimizer.sgd.momentum", 0.5}, {"train.optimizer.sgd.dampening", 0.0},
      {"train.optimizer.sgd.nesterov", true},
      {"train.lr.kind", optim::LrScheduleKind::kLinear}, {"train.lr.min_lr", 0.01}, {"train.lr.warmup_steps", 5},
      {"train.lr.decay_steps", 40},
      {"train.loss_scaling", true}, {"loss_scale_mode", "dynamic"}, {"train.loss_scaler.initial_scale_power", 12},
      {"train.loss_scaler.scale_window", 100}, {"train.loss_scaler.hysteresis", 3},
      {"train.loss_scaler.consecutive_hysteresis", true}, {"train.loss_scaler.min_scale", 0.5},
      {"train.loss_scaler.scale_factor", 4.0},
      {"train.sharding.strategy", ShardingStrategy::kHybridShard}, {"train.sharding.hybrid_shard_size", 4},
      {"train.sharding.wrap.kind", WrapPolicy::Kind::kBySize}, {"train.sharding.wrap.min_num_params", 10000},
      {"train.sharding.backward_prefetch", BackwardPrefetch::kBackwardPost},
      {"train.sharding.forward_prefetch", true}, {"train.sharding.limit_all_gathers", 3},
      {"train.sharding.offload.params", true}, {"train.sharding.offload.grads", false},
      {"train.sharding.offload.optimizer", false},
      {"train.sharding.mixed_precision.param_dtype", DType::kBF16},
      {"train.sharding.mixed_precision.reduce_dtype", DType::kF32},
      {"train.sharding.mixed_precision.buffer_dtype", DType::kBF16},
      {"train.model.activation_checkpointing", true}, {"train.state_dict_type", "full"},
      {"train.sharding.sync_module_states", true}, {"skip_init_weights", true},
      {"train.sharding.ignored_modules", std::vector<std::string>{"lm_head"}},
      {"train.init_from", "w.safetensors"}, {"train.save", "out.safetensors"}, {"train.save_every", 10},
      {"train.resume", "auto"}, {"train.async_save", true}, {"train.keep_last", 2},
      {"train.work_dir", "/tmp/w/exp"},
      {"train.sample_tokens", 5}, {"train.temperature", 1.5}, {"train.top_k", 3},
      {"train.trace", "t.json"}, {"train.trace_from", 4}, {"train.trace_steps", 3},
  });
}

TEST(Config, StrategyShorthands) {
  // FSDP's booleans and None, Lightning's names.
  ExpectFields(MustParse(R"({"strategy": {"auto_wrap_policy": null, "backward_prefetch": null,
                                          "limit_all_gathers": false, "cpu_offload": true,
                                          "mixed_precision": null, "state_dict_type": "sharded"}})"),
               {{"train.sharding.wrap.kind", WrapPolicy::Kind::kNone},
                {"train.sharding.backward_prefetch", BackwardPrefetch::kNone},
                {"train.sharding.limit_all_gathers", 0},
                {"train.sharding.offload.params", true},
                {"train.sharding.offload.grads", true},
                {"train.sharding.offload.optimizer", true},
                {"train.sharding.mixed_precision.param_dtype", DType::kF32},
                {"train.state_dict_type", "sharded"}});
  ExpectFields(MustParse(R"({"strategy": {"auto_wrap_policy": "Mlp", "limit_all_gathers": true,
                                          "cpu_offload": {"offload_params": true}, "backward_prefetch": "post"}})"),
               {{"train.sharding.wrap.types", std::set<std::string>{"Mlp"}},
                {"train.sharding.limit_all_gathers", 2},
                {"train.sharding.offload.params", true},
                {"train.sharding.offload.optimizer", true},
                {"train.sharding.backward_prefetch", BackwardPrefetch::kBackwardPost}});
  ExpectFields(MustParse(R"({"strategy": {"auto_wrap_policy": ["Block", "Mlp"], "sharding_strategy": "shard_grad_op"}})"),
               {{"train.sharding.wrap.types", std::set<std::string>{"Block", "Mlp"}},
                {"train.sharding.strategy", ShardingStrategy::kShardGradOp}});
  EXPECT_FALSE(MustParse(R"({"loss_scaler": {"mode": "auto"}})").train.loss_scaling);
}

TEST(Config, Fp32ModuleTypesKeyAndKeepLayerNormFlag) {
  EXPECT_EQ(MustParse("").train.sharding.mixed_precision.fp32_module_types, std::set<std::string>{"BatchNorm2d"});
  const RunConfig c = MustParse(R"({"strategy": {"mixed_precision": {"param_dtype": "bf16",
                                                                      "fp32_module_types": ["layernorm"]}}})");
  EXPECT_EQ(c.train.sharding.mixed_precision.fp32_module_types, std::set<std::string>{"LayerNorm"});
  EXPECT_THAT(ResolvedConfigJson(c), HasSubstr("\"fp32_module_types\": [\n"));
  EXPECT_EQ(MustParse(ResolvedConfigJson(c)).train.sharding.mixed_precision.fp32_module_types,
            std::set<std::string>{"LayerNorm"});
  EXPECT_EQ(MustParse("", *OverridesFromFlags({{"keep_layernorm_fp32", "true"}}))
                .train.sharding.mixed_precision.fp32_module_types,
            (std::set<std::string>{"BatchNorm2d", "LayerNorm"}));
  EXPECT_EQ(MustParse("", *OverridesFromFlags({{"keep_layernorm_fp32", "false"}}))
                .train.sharding.mixed_precision.fp32_module_types,
            std::set<std::string>{"BatchNorm2d"});
  testing::ExpectProblems({
      {R"({"strategy": {"mixed_precision": {"fp32_module_types": ["LayerNrom"]}}})",
       "strategy.mixed_precision.fp32_module_types: expected one of \"Block\", \"CausalSelfAttention\", \"Mlp\", "
       "\"LayerNorm\", \"BatchNorm2d\", found string \"LayerNrom\" (did you mean \"LayerNorm\"?)"},
      {R"({"strategy": {"mixed_precision": {"fp32_module_types": "LayerNorm"}}})",
       "strategy.mixed_precision.fp32_module_types: expected"},
  });
}

TEST(Config, KeepLowPrecisionGradsKeyAndFlag) {
  EXPECT_FALSE(MustParse("").train.sharding.mixed_precision.keep_low_precision_grads);
  const RunConfig c = MustParse(R"({"strategy": {"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "bf16",
                                                                      "keep_low_precision_grads": true}}})");
  EXPECT_TRUE(c.train.sharding.mixed_precision.keep_low_precision_grads);
  EXPECT_TRUE(c.notes.empty());
  EXPECT_THAT(ResolvedConfigJson(c), HasSubstr("\"keep_low_precision_grads\": true"));
  EXPECT_TRUE(MustParse(ResolvedConfigJson(c)).train.sharding.mixed_precision.keep_low_precision_grads);
  const RunConfig flag = MustParse("", *OverridesFromFlags({{"keep_low_precision_grads", "true"},
                                                             {"reduce_dtype", "bf16"}}));
  EXPECT_TRUE(flag.train.sharding.mixed_precision.keep_low_precision_grads);
  // With f32 reduction there is nothing to keep: a note, not an error.
  const RunConfig f32 = MustParse("", *OverridesFromFlags({{"keep_low_precision_grads", "true"}}));
  ASSERT_EQ(f32.notes.size(), 1u);
  EXPECT_THAT(f32.notes[0], HasSubstr("keep_low_precision_grads has no effect with reduce_dtype f32"));
  EXPECT_THAT(Problems(R"({"strategy": {"mixed_precision": {"keep_low_precision_grads": "yes"}}})"),
              HasSubstr("strategy.mixed_precision.keep_low_precision_grads: expected true or false, found"));
}
TEST(Config, ZeroStageNamesTheStrategy) {
  auto strategy = [](const std::string& text, const std::vector<std::string>& sets = {}) {
    return MustParse(text, sets).train.sharding.strategy;
  };
  EXPECT_EQ(strategy(R"({"strategy": {"zero_stage": 1}})"), ShardingStrategy::kShardOptimizer);
  EXPECT_EQ(strategy(R"({"strategy": {"zero_stage": 2}})"), ShardingStrategy::kShardGradOp);
  EXPECT_EQ(strategy(R"({"strategy": {"zero_stage": 3}})"), ShardingStrategy::kFullShard);
  EXPECT_EQ(strategy(R"({"strategy": {"zero_stage": null}})"), ShardingStrategy::kFullShard);  // unset
  EXPECT_EQ(strategy(R"({"strategy": {"sharding_strategy": "shard_optimizer"}})"), ShardingStrategy::kShardOptimizer);
  // Agreeing with sharding_strategy is fine; the resolved form names the strategy only.
  const RunConfig agree = MustParse(R"({"strategy": {"zero_stage": 1, "sharding_strategy": "SHARD_OPTIMIZER"}})");
  EXPECT_EQ(agree.train.sharding.strategy, ShardingStrategy::kShardOptimizer);
  EXPECT_THAT(ResolvedConfigJson(agree), HasSubstr("\"sharding_strategy\": \"SHARD_OPTIMIZER\""));
  EXPECT_THAT(ResolvedConfigJson(agree), HasSubstr("\"zero_stage\": null"));
  // The flags: --zero_stage alone, and against a different --sharding_strategy (an error).
  EXPECT_EQ(strategy("", *OverridesFromFlags({{"zero_stage", "1"}})), ShardingStrategy::kShardOptimizer);
  EXPECT_EQ(strategy("", *OverridesFromFlags({{"zero_stage", "2"}, {"sharding_strategy", "SHARD_GRAD_OP"}})),
            ShardingStrategy::kShardGradOp);
  EXPECT_THAT(Problems("", *OverridesFromFlags({{"zero_stage", "1"}, {"sharding_strategy", "FULL_SHARD"}})),
              HasSubstr("strategy.zero_stage: ZeRO stage 1 is SHARD_OPTIMIZER, but strategy.sharding_strategy is FULL_SHARD: "
                        "keep one of them (or make them agree; a _base_ file's key counts too)"));
  // A _base_ file's sharding_strategy counts: a child naming the stage contradicts it.
  const std::string dir = TempDir();
  {
    std::ofstream(dir + "/zero_base.json") << R"({"strategy": {"sharding_strategy": "FULL_SHARD"}})";
    std::ofstream(dir + "/zero_child.json") << R"({"_base_": "zero_base.json", "strategy": {"zero_stage": 1}})";
  }
  absl::StatusOr<RunConfig> child = LoadConfig(dir + "/zero_child.json", {});
  EXPECT_THAT(child.status().message(), HasSubstr("strategy.zero_stage: ZeRO stage 1 is SHARD_OPTIMIZER"));
  EXPECT_THAT(Problems(R"({"strategy": {"zero_stage": 3, "sharding_strategy": "NO_SHARD"}})"),
              HasSubstr("strategy.zero_stage: ZeRO stage 3 is FULL_SHARD, but strategy.sharding_strategy is NO_SHARD"));
  EXPECT_THAT(Problems("", *OverridesFromFlags({{"zero_stage", "0"}})),
              HasSubstr("strategy.zero_stage: expected an integer in [1, 3], found 0"));
  EXPECT_THAT(Problems(R"({"strategy": {"zero_stage": "1"}})"), HasSubstr("strategy.zero_stage: expected an integer"));
  // Exactly one from the command line: it wins over the file, with a note.
  const RunConfig cli = MustParse(R"({"strategy": {"sharding_strategy": "FULL_SHARD"}})", {"strategy.zero_stage=1"});
  EXPECT_EQ(cli.train.sharding.strategy, ShardingStrategy::kShardOptimizer);
  ASSERT_FALSE(cli.notes.empty());
  EXPECT_THAT(cli.notes[0], HasSubstr("the command line's strategy.zero_stage wins"));
  EXPECT_EQ(strategy(R"({"strategy": {"zero_stage": 1}})", {"strategy.sharding_strategy=NO_SHARD"}),
            ShardingStrategy::kNoShard);
}


// ============================================================ flags

TEST(Config, EveryFlagMapsToTheSameFieldAsBefore) {
  absl::StatusOr<std::vector<std::string>> sets = OverridesFromFlags({
      {"n_layer", "2"}, {"n_head", "2"}, {"n_embd", "32"}, {"block_size", "16"}, {"vocab_size", "300"},
      {"dropout", "0.1"}, {"data", "a.txt"}, {"batch_size", "3"}, {"grad_accum_steps", "2"},
      {"accumulate", "no_sync"}, {"steps", "30"}, {"optimizer", "sgd"}, {"lr", "0.01"}, {"min_lr", "0.001"},
      {"warmup_steps", "3"}, {"lr_schedule", "linear"}, {"weight_decay", "0.2"}, {"beta1", "0.8"},
      {"beta2", "0.99"}, {"grad_clip", "0"}, {"seed", "5"}, {"world_size", "2"}, {"backend", "mpi"},
      {"sharding_strategy", "HYBRID_SHARD"}, {"hybrid_shard_size", "2"}, {"auto_wrap", "size:1000"},
      {"forward_prefetch", "true"}, {"backward_prefetch", "none"}, {"limit_all_gathers", "0"},
      {"activation_checkpointing", "true"}, {"init_from", "i.safetensors"}, {"save", "s.safetensors"},
      {"log_every", "0"}, {"eval_every", "0"}, {"eval_iters", "2"}, {"sample_tokens", "0"},
      {"temperature", "1"}, {"top_k", "5"}, {"device_memory_limit", "123"}, {"tensorboard", "false"}, {"offload", "optimizer"},
      {"param_dtype", "f16"}, {"reduce_dtype", "bf16"}, {"loss_scale", "dynamic"},
      {"initial_scale_power", "8"}, {"loss_scale_window", "20"}, {"hysteresis", "1"},
      {"min_loss_scale", "2"}, {"trace", "t.json"}, {"trace_from", "1"}, {"trace_steps", "1"},
      {"work_dir", "/tmp/wd"}, {"save_every", "5"}, {"state_dict_type", "full"}, {"async_save", "true"},
      {"keep_last", "3"}, {"resume", "auto"}, {"timeout_s", "2.5"}});
  ASSERT_TRUE(sets.ok()) << sets.status();
  ExpectFields(MustParse("", *sets), {
      {"train.model.n_layer", 2}, {"train.model.n_head", 2}, {"train.model.n_embd", 32},
      {"train.model.block_size", 16}, {"train.model.vocab_size", 300}, {"train.model.dropout", 0.1},
      {"train.data", "a.txt"}, {"train.batch_size", 3}, {"train.grad_accum_steps", 2}, {"train.no_sync", true},
      {"train.steps", 30}, {"train.optimizer.kind", optim::OptimizerKind::kSgd}, {"train.lr.lr", 0.01},
      {"train.lr.min_lr", 0.001}, {"train.lr.warmup_steps", 3},
      {"train.lr.decay_steps", 30},  // max(steps, warmup_steps), as before
      {"train.lr.kind", optim::LrScheduleKind::kLinear}, {"train.optimizer.weight_decay", 0.2},
      {"train.optimizer.adamw.beta1", 0.8},
      {"train.optimizer.sgd.momentum", 0.8},  // --beta1 is also SGD's momentum
      {"train.optimizer.adamw.beta2", 0.99}, {"train.grad_clip", 0.0}, {"train.seed", 5},
      {"world_size", 2}, {"backend", "mpi"}, {"timeout_s", 2.5},
      {"train.sharding.strategy", ShardingStrategy::kHybridShard}, {"train.sharding.hybrid_shard_size", 2},
      {"train.sharding.wrap.kind", WrapPolicy::Kind::kBySize}, {"train.sharding.wrap.min_num_params", 1000},
      {"train.sharding.forward_prefetch", true}, {"train.sharding.backward_prefetch", BackwardPrefetch::kNone},
      {"train.sharding.limit_all_gathers", 0}, {"train.model.activation_checkpointing", true},
      {"train.init_from", "i.safetensors"}, {"train.save", "s.safetensors"},
      {"train.log_every", 1},  // clamped, as before
      {"train.eval_every", 0}, {"train.eval_iters", 2}, {"train.sample_tokens", 0}, {"train.temperature", 1.0},
      {"train.top_k", 5}, {"train.device_memory_limit", 123}, {"train.tensorboard", false},
      {"train.sharding.offload.params", false}, {"train.sharding.offload.grads", true},
      {"train.sharding.offload.optimizer", true},
      {"train.sharding.mixed_precision.param_dtype", DType::kF16},
      {"train.sharding.mixed_precision.reduce_dtype", DType::kBF16},
      {"train.loss_scaling", true}, {"train.loss_scaler.initial_scale_power", 8},
      {"train.loss_scaler.scale_window", 20}, {"train.loss_scaler.hysteresis", 1},
      {"train.loss_scaler.min_scale", 2.0},
      {"train.trace", "t.json"}, {"train.trace_from", 1}, {"train.trace_steps", 1},
      {"work_dir", "/tmp/wd"},
      {"train.work_dir", "/tmp/wd/test"},  // checkpoints: work_dir/experiment_name
      {"train.save_every", 5}, {"train.state_dict_type", "full"}, {"train.async_save", true},
      {"train.keep_last", 3}, {"train.resume", "auto"},
  });
  // The other spellings.
  EXPECT_EQ(MustParse("", *OverridesFromFlags({{"auto_wrap", "none"}})).train.sharding.wrap.kind,
            WrapPolicy::Kind::kNone);
  EXPECT_EQ(MustParse("", *OverridesFromFlags({{"auto_wrap", "block"}})).train.sharding.wrap.types,
            std::set<std::string>{"Block"});
  EXPECT_TRUE(MustParse("", *OverridesFromFlags({{"offload", "params_and_optimizer"}})).train.sharding.offload.params);
  EXPECT_FALSE(MustParse("", *OverridesFromFlags({{"offload", "none"}})).train.sharding.offload.any());
  EXPECT_THAT(OverridesFromFlags({{"offload", "disk"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--offload=disk: expected none, optimizer, params_and_optimizer, nvme_optimizer "
                                 "or nvme_params_and_optimizer")));
  // NVMe offload: the flags, either order; host offload goes, and --offload=none undoes both.
  for (bool path_first : {false, true}) {
    std::vector<std::pair<std::string, std::string>> flags = {{"offload", "nvme_params_and_optimizer"},
                                                              {"nvme_path", "/mnt/nvme0"}};
    if (path_first) std::swap(flags[0], flags[1]);
    ExpectFields(MustParse(R"({"strategy": {"cpu_offload": true}})", *OverridesFromFlags(flags)),
                 {{"train.sharding.offload.nvme_optimizer", true}, {"train.sharding.offload.nvme_params", true},
                  {"train.sharding.offload.params", false}, {"train.sharding.offload.grads", false},
                  {"train.sharding.offload.optimizer", false},
                  {"train.sharding.offload.optimizer_nvme.path", "/mnt/nvme0"},
                  {"train.sharding.offload.param_nvme.path", "/mnt/nvme0"}});
  }
  ExpectFields(MustParse("", *OverridesFromFlags({{"offload", "nvme_optimizer"}, {"nvme_path", "/n"}})),
               {{"train.sharding.offload.nvme_optimizer", true}, {"train.sharding.offload.nvme_params", false}});
  EXPECT_FALSE(MustParse("", *OverridesFromFlags({{"offload", "nvme_optimizer"}, {"nvme_path", "/n"},
                                                  {"offload", "none"}}))
                   .train.sharding.offload.any());
  EXPECT_THAT(Problems("", *OverridesFromFlags({{"offload", "nvme_optimizer"}})),
              HasSubstr("strategy.nvme_offload.optimizer.nvme_path: expected the directory for the optimizer swap "
                        "files"));
  EXPECT_THAT(OverridesFromFlags({{"auto_wrap", "size:x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected block, size:<n> or none")));
  EXPECT_THAT(OverridesFromFlags({{"config", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--config: not a config flag")));
}

// distributed.timeout_s becomes the timeout of the communicators the job
// creates (train_gpt and RunResNetConfig build them from CommunicatorOptionsOf).
TEST(Config, TimeoutSecondsIsTheCommunicatorsTimeout) {
  EXPECT_EQ(CommunicatorOptionsOf(MustParse("")).timeout, absl::Minutes(10));  // CommunicatorOptions' default
  EXPECT_EQ(CommunicatorOptionsOf(MustParse(R"({"distributed": {"timeout_s": 20}})")).timeout, absl::Seconds(20));
  EXPECT_EQ(CommunicatorOptionsOf(MustParse("", {"distributed.timeout_s=0.25"})).timeout, absl::Milliseconds(250));
  // The resolved config (a run folder's config.json) keeps it.
  EXPECT_EQ(MustParse(ResolvedConfigJson(MustParse(R"({"distributed": {"timeout_s": 20}})"))).timeout_s, 20);
  for (const char* bad : {"0", "-5", "\"ten\"", "true"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Problems(absl::StrCat(R"({"distributed": {"timeout_s": )", bad, "}}")),
                HasSubstr("distributed.timeout_s: expected a number > 0"));
  }
}

// ============================================================ NVMe offload

TEST(Config, NvmeOffloadStrategyKeys) {
  const RunConfig c = MustParse(R"({"strategy": {"nvme_offload": {
      "nvme_path": "/mnt/a",
      "optimizer": {"enabled": true, "buffer_count": 3, "pin_memory": true, "read_ahead": false},
      "params": {"enabled": true, "nvme_path": "/mnt/b", "buffer_count": 6, "max_in_cpu": 1000},
      "verify_checksums": false,
      "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2, "single_submit": true,
              "overlap_events": false}}}})");
  ExpectFields(c, {
      {"train.sharding.offload.nvme_optimizer", true}, {"train.sharding.offload.nvme_params", true},
      {"train.sharding.offload.optimizer_nvme.path", "/mnt/a"},
      {"train.sharding.offload.optimizer_nvme.buffer_count", 3},
      {"train.sharding.offload.optimizer_nvme.pin_memory", true},
      {"train.sharding.offload.param_nvme.path", "/mnt/b"}, {"train.sharding.offload.param_nvme.buffer_count", 6},
      {"train.sharding.offload.param_nvme.pin_memory", false},
      {"train.sharding.offload.param_nvme.max_in_cpu", 1000},
      {"train.sharding.offload.optimizer_nvme.read_ahead", false},
      {"train.sharding.offload.optimizer_nvme.write_behind", true},
      {"train.sharding.offload.param_nvme.read_ahead", true},
      {"train.sharding.offload.param_nvme.write_behind", true},
      {"train.sharding.offload.nvme_verify", false},
      {"train.sharding.offload.aio.block_size", 262144}, {"train.sharding.offload.aio.queue_depth", 16},
      {"train.sharding.offload.aio.thread_count", 2}, {"train.sharding.offload.aio.single_submit", true},
      {"train.sharding.offload.aio.overlap_events", false},
  });
  // Defaults: off, DeepSpeed's buffer counts and aio.
  const RunConfig d = MustParse("");
  EXPECT_FALSE(d.train.sharding.offload.nvme());
  ExpectFields(d, {
      {"train.sharding.offload.optimizer_nvme.buffer_count", 4},
      {"train.sharding.offload.param_nvme.buffer_count", 5},
      {"train.sharding.offload.param_nvme.max_in_cpu", 0},
      {"train.sharding.offload.aio.block_size", 1 << 20}, {"train.sharding.offload.aio.queue_depth", 8},
      {"train.sharding.offload.nvme_verify", true},
  });
  EXPECT_FALSE(MustParse(R"({"strategy": {"nvme_offload": null}})").train.sharding.offload.nvme());
  // The resolved form reads back to the same policy (paths shared or not).
  const std::string resolved = ResolvedConfigJson(MustParse(R"({"strategy": {"nvme_offload": {
      "nvme_path": "/mnt/a", "optimizer": {"enabled": true}, "params": {"enabled": true, "nvme_path": "/mnt/b"}}}})"));
  EXPECT_THAT(resolved, HasSubstr("\"nvme_path\": \"/mnt/b\""));
  EXPECT_EQ(ResolvedConfigJson(MustParse(resolved)), resolved);
}

// ============================================================ --set

TEST(ConfigOverrides, NestedPathsAndTypeConversion) {
  const RunConfig c = MustParse(R"({"model": {"n_layer": 2}})",
                                {"model.n_layer=6",                              // number
                                 "strategy.mixed_precision.param_dtype=bf16",    // nested, text
                                 "experiment_name=123",                          // a string key keeps text
                                 "strategy.forward_prefetch=yes",                // boolean spellings
                                 "strategy.sync_module_states=1",
                                 "optimizer.betas.1=0.99",                       // array element
                                 "strategy.auto_wrap_policy=[\"Block\", \"Mlp\"]",  // JSON
                                 "strategy.backward_prefetch=null",
                                 "lr_schedule.decay_steps=null",
                                 "optimizer.lr=3e-4",
                                 "data.path=x=y.txt"});                          // '=' in the value
  EXPECT_EQ(c.train.model.n_layer, 6);
  EXPECT_EQ(c.train.sharding.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(c.experiment_name, "123");
  EXPECT_TRUE(c.train.sharding.forward_prefetch);
  EXPECT_TRUE(c.train.sharding.sync_module_states);
  EXPECT_EQ(c.train.optimizer.adamw.beta1, 0.9);
  EXPECT_EQ(c.train.optimizer.adamw.beta2, 0.99);
  EXPECT_EQ(c.train.sharding.wrap.types, (std::set<std::string>{"Block", "Mlp"}));
  EXPECT_EQ(c.train.sharding.backward_prefetch, BackwardPrefetch::kNone);
  EXPECT_EQ(c.train.lr.decay_steps, 200);
  EXPECT_EQ(c.train.optimizer.lr, 3e-4);
  EXPECT_EQ(c.train.data, "x=y.txt");
  // Later overrides win; a DeepSpeed block can be built on the command line.
  EXPECT_EQ(MustParse("", {"train.steps=5", "train.steps=7"}).train.steps, 7);
  EXPECT_EQ(MustParse("", {"deepspeed.zero_optimization.stage=2", "deepspeed.zero_optimization.offload_optimizer.device=cpu"})
                .train.sharding.strategy,
            ShardingStrategy::kShardGradOp);
}

TEST(ConfigOverrides, Problems) {
  testing::ExpectProblems({
      {"", "--set \"train.steps\": expected key.path=value", {"train.steps"}},
      {"", "non-empty keys between the dots", {"train..steps=1"}},
      {"", "--set \"model.n_layer.x=1\": model.n_layer is number 4, not an object", {"model.n_layer.x=1"}},
      {"", "train.stesp: unknown key (did you mean \"steps\"?)", {"train.stesp=1"}},
      {"", "train.steps: expected an integer >= 1, found string \"ten\"", {"train.steps=ten"}},
      {"", "expected an index in [0, 2] into optimizer.betas", {"optimizer.betas.5=1"}},
  });
}

// ============================================================ inheritance, resolved form

TEST(Config, BaseIsMergedUnder) {
  const std::string dir = TempDir() + "/base_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.json") << R"({"model": {"n_layer": 2, "n_head": 2}, "strategy": {"forward_prefetch": true}})";
  std::ofstream(dir + "/b.json") << R"({"_base_": "a.json", "model": {"n_layer": 3}})";
  std::ofstream(dir + "/loop.json") << R"({"_base_": "loop.json"})";
  absl::StatusOr<RunConfig> c = LoadConfig(dir + "/b.json", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.model.n_layer, 3);
  EXPECT_EQ(c->train.model.n_head, 2);
  EXPECT_TRUE(c->train.sharding.forward_prefetch);
  EXPECT_EQ(c->experiment_name, "b");
  EXPECT_THAT(LoadConfig(dir + "/loop.json", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 8 levels of inheritance")));
}

TEST(Config, ResolvedConfigHoldsEveryKeyAndReadsBackToTheSameRun) {
  std::vector<std::string> resolved;
  testing::Leaves(nlohmann::ordered_json::parse(ResolvedConfigJson(DefaultRunConfig())), "", &resolved);
  std::vector<std::string> schema = ConfigKeyPaths();
  schema.erase(std::remove(schema.begin(), schema.end(), "description"), schema.end());
  std::sort(resolved.begin(), resolved.end());
  std::sort(schema.begin(), schema.end());
  EXPECT_EQ(resolved, schema);
}

TEST(Config, EditDistance) {
  EXPECT_EQ(EditDistance("steps", "steps"), 0);
  EXPECT_EQ(EditDistance("stesp", "steps"), 1);  // a transposition
  EXPECT_EQ(EditDistance("Sharding_Strategy", "sharding_strategy"), 0);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
}

}  // namespace
}  // namespace zeroshard
