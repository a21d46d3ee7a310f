// The main job's config: every key of both styles (FSDP-style and a DeepSpeed
// block) and every flag lands in the right TrainOptions field; every kind of
// problem is reported with its path, all at once; --set overrides convert by
// the schema's types; each ready config in examples/configs/ is valid and
// trains; a run folder holds the resolved config, the log, metrics.csv and a
// TensorBoard event file. model.type "resnet" (the vision job): every key,
// keys of the other model type and bad values reported, the round trip, and a
// short run of examples/configs/resnet.json through RunResNetConfig.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/local_communicator.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/resnet_job.h"
#include "train/run_dir.h"
#include "train/trainer.h"
#include "tests/train/tfevents_reader.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::StatusIs;

RunConfig MustParse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<RunConfig> c = ConfigFromText(text, overrides, "test.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : RunConfig{};
}

// The message of a config that must fail.
std::string Problems(const std::string& text, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<RunConfig> c = ConfigFromText(text, overrides, "test.json");
  EXPECT_FALSE(c.ok()) << "expected problems in " << text;
  return c.ok() ? "" : std::string(c.status().message());
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ============================================================ defaults and keys

TEST(Config, DefaultsAreTheFlagDefaults) {
  const RunConfig c = MustParse("");
  const TrainOptions& o = c.train;
  EXPECT_EQ(c.experiment_name, "test");  // the source's stem
  EXPECT_EQ(c.work_dir, "work_dirs");
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.backend, "local");
  EXPECT_EQ(o.model.n_layer, 4);
  EXPECT_EQ(o.model.n_head, 4);
  EXPECT_EQ(o.model.n_embd, 128);
  EXPECT_EQ(o.model.block_size, 64);
  EXPECT_EQ(o.model.vocab_size, 256);
  EXPECT_EQ(o.data, "data/tinyshakespeare.txt");
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.steps, 200);
  EXPECT_EQ(o.optimizer.kind, optim::OptimizerKind::kAdamW);
  EXPECT_EQ(o.optimizer.adamw.beta2, 0.95);
  EXPECT_EQ(o.optimizer.sgd.momentum, 0.9);
  EXPECT_EQ(o.lr.kind, optim::LrScheduleKind::kCosine);
  EXPECT_EQ(o.lr.lr, 1e-3);
  EXPECT_EQ(o.lr.min_lr, 1e-4);
  EXPECT_EQ(o.lr.warmup_steps, 20);
  EXPECT_EQ(o.lr.decay_steps, 200);  // follows train.steps
  EXPECT_EQ(o.sharding.strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(o.sharding.wrap.kind, WrapPolicy::Kind::kByType);
  EXPECT_EQ(o.sharding.wrap.types, std::set<std::string>{"Block"});
  EXPECT_EQ(o.sharding.backward_prefetch, BackwardPrefetch::kBackwardPre);
  EXPECT_EQ(o.sharding.limit_all_gathers, 2);
  EXPECT_FALSE(o.sharding.offload.any());
  EXPECT_FALSE(o.loss_scaling);
  EXPECT_EQ(o.state_dict_type, "sharded");
  EXPECT_EQ(o.work_dir, "work_dirs/test");  // checkpoints: work_dir/experiment_name
  EXPECT_TRUE(o.tensorboard);                // the run folder's tensorboard/ event file
  EXPECT_EQ(MustParse("", {"train.steps=50"}).train.lr.decay_steps, 50);
  EXPECT_EQ(MustParse("", {"work_dir="}).train.work_dir, "");
}

TEST(Config, EveryFsdpStyleKeyMapsToItsField) {
  const RunConfig c = MustParse(R"({
    "description": "every key",
    "experiment_name": "exp", "work_dir": "/tmp/w",
    "distributed": {"world_size": 8, "backend": "mpi"},
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
  const TrainOptions& o = c.train;
  EXPECT_EQ(c.notes.front(), "every key");
  EXPECT_EQ(c.experiment_name, "exp");
  EXPECT_EQ(c.work_dir, "/tmp/w");
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.backend, "mpi");
  EXPECT_EQ(o.model.vocab_size, 300);
  EXPECT_EQ(o.model.block_size, 32);
  EXPECT_EQ(o.model.n_layer, 2);
  EXPECT_EQ(o.model.n_head, 2);
  EXPECT_EQ(o.model.n_embd, 64);
  EXPECT_EQ(o.model.dropout, 0.1);
  EXPECT_FALSE(o.model.bias);
  EXPECT_EQ(o.data, "x.bin");
  EXPECT_EQ(o.val_fraction, 0.2);
  EXPECT_EQ(o.steps, 50);
  EXPECT_EQ(o.batch_size, 3);
  EXPECT_EQ(o.grad_accum_steps, 4);
  EXPECT_TRUE(o.no_sync);
  EXPECT_EQ(o.grad_clip, 0.5);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.log_every, 5);
  EXPECT_EQ(o.eval_every, 25);
  EXPECT_EQ(o.eval_iters, 3);
  EXPECT_EQ(o.device_memory_limit, 1000000);
  EXPECT_FALSE(o.tensorboard);
  EXPECT_EQ(o.optimizer.kind, optim::OptimizerKind::kSgd);
  EXPECT_EQ(o.optimizer.lr, 0.1);
  EXPECT_EQ(o.lr.lr, 0.1);  // the schedule's peak is the optimizer's lr
  EXPECT_EQ(o.optimizer.weight_decay, 0.01);
  EXPECT_EQ(o.optimizer.adamw.beta1, 0.8);
  EXPECT_EQ(o.optimizer.adamw.beta2, 0.9);
  EXPECT_EQ(o.optimizer.adamw.eps, 1e-6);
  EXPECT_EQ(o.optimizer.sgd.momentum, 0.5);
  EXPECT_EQ(o.optimizer.sgd.dampening, 0.0);
  EXPECT_TRUE(o.optimizer.sgd.nesterov);
  EXPECT_EQ(o.lr.kind, optim::LrScheduleKind::kLinear);
  EXPECT_EQ(o.lr.min_lr, 0.01);
  EXPECT_EQ(o.lr.warmup_steps, 5);
  EXPECT_EQ(o.lr.decay_steps, 40);
  EXPECT_TRUE(o.loss_scaling);
  EXPECT_EQ(c.loss_scale_mode, "dynamic");
  EXPECT_EQ(o.loss_scaler.initial_scale_power, 12);
  EXPECT_EQ(o.loss_scaler.scale_window, 100);
  EXPECT_EQ(o.loss_scaler.hysteresis, 3);
  EXPECT_TRUE(o.loss_scaler.consecutive_hysteresis);
  EXPECT_EQ(o.loss_scaler.min_scale, 0.5);
  EXPECT_EQ(o.loss_scaler.scale_factor, 4.0);
  const ShardingOptions& s = o.sharding;
  EXPECT_EQ(s.strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(s.hybrid_shard_size, 4);
  EXPECT_EQ(s.wrap.kind, WrapPolicy::Kind::kBySize);
  EXPECT_EQ(s.wrap.min_num_params, 10000);
  EXPECT_EQ(s.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_TRUE(s.forward_prefetch);
  EXPECT_EQ(s.limit_all_gathers, 3);
  EXPECT_TRUE(s.offload.params);
  EXPECT_FALSE(s.offload.grads);
  EXPECT_FALSE(s.offload.optimizer);
  EXPECT_EQ(s.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(s.mixed_precision.reduce_dtype, DType::kF32);
  EXPECT_EQ(s.mixed_precision.buffer_dtype, DType::kBF16);
  EXPECT_TRUE(o.model.activation_checkpointing);
  EXPECT_EQ(o.state_dict_type, "full");
  EXPECT_TRUE(s.sync_module_states);
  EXPECT_TRUE(c.skip_init_weights);
  EXPECT_THAT(s.ignored_modules, ElementsAre("lm_head"));
  EXPECT_EQ(o.init_from, "w.safetensors");
  EXPECT_EQ(o.save, "out.safetensors");
  EXPECT_EQ(o.save_every, 10);
  EXPECT_EQ(o.resume, "auto");
  EXPECT_TRUE(o.async_save);
  EXPECT_EQ(o.keep_last, 2);
  EXPECT_EQ(o.work_dir, "/tmp/w/exp");
  EXPECT_EQ(o.sample_tokens, 5);
  EXPECT_EQ(o.temperature, 1.5);
  EXPECT_EQ(o.top_k, 3);
  EXPECT_EQ(o.trace, "t.json");
  EXPECT_EQ(o.trace_from, 4);
  EXPECT_EQ(o.trace_steps, 3);
}

TEST(Config, StrategyShorthands) {
  // FSDP's booleans and None, Lightning's names.
  RunConfig c = MustParse(R"({"strategy": {"auto_wrap_policy": null, "backward_prefetch": null,
                                           "limit_all_gathers": false, "cpu_offload": true,
                                           "mixed_precision": null, "state_dict_type": "sharded"}})");
  EXPECT_EQ(c.train.sharding.wrap.kind, WrapPolicy::Kind::kNone);
  EXPECT_EQ(c.train.sharding.backward_prefetch, BackwardPrefetch::kNone);
  EXPECT_EQ(c.train.sharding.limit_all_gathers, 0);
  EXPECT_TRUE(c.train.sharding.offload.params && c.train.sharding.offload.grads && c.train.sharding.offload.optimizer);
  EXPECT_EQ(c.train.sharding.mixed_precision.param_dtype, DType::kF32);
  EXPECT_EQ(c.train.state_dict_type, "sharded");
  c = MustParse(R"({"strategy": {"auto_wrap_policy": "Mlp", "limit_all_gathers": true,
                                 "cpu_offload": {"offload_params": true}, "backward_prefetch": "post"}})");
  EXPECT_EQ(c.train.sharding.wrap.types, std::set<std::string>{"Mlp"});
  EXPECT_EQ(c.train.sharding.limit_all_gathers, 2);
  EXPECT_TRUE(c.train.sharding.offload.params && c.train.sharding.offload.optimizer);
  EXPECT_EQ(c.train.sharding.backward_prefetch, BackwardPrefetch::kBackwardPost);
  c = MustParse(R"({"strategy": {"auto_wrap_policy": ["Block", "Mlp"], "sharding_strategy": "shard_grad_op"}})");
  EXPECT_EQ(c.train.sharding.wrap.types, (std::set<std::string>{"Block", "Mlp"}));
  EXPECT_EQ(c.train.sharding.strategy, ShardingStrategy::kShardGradOp);
  EXPECT_FALSE(MustParse(R"({"loss_scaler": {"mode": "auto"}})").train.loss_scaling);
}

// ============================================================ DeepSpeed

TEST(Config, DeepSpeedStagesMapToStrategies) {
  auto strategy = [](int stage) {
    return MustParse(absl::StrCat(R"({"deepspeed": {"zero_optimization": {"stage": )", stage, "}}}"))
        .train.sharding.strategy;
  };
  EXPECT_EQ(strategy(0), ShardingStrategy::kNoShard);
  EXPECT_EQ(strategy(1), ShardingStrategy::kShardOptimizer);  // ZeRO-1: its own mode, no note
  EXPECT_EQ(strategy(2), ShardingStrategy::kShardGradOp);
  EXPECT_EQ(strategy(3), ShardingStrategy::kFullShard);
  EXPECT_EQ(MustParse(R"({"deepspeed": {}})").train.sharding.strategy, ShardingStrategy::kNoShard);  // stage 0
  EXPECT_TRUE(MustParse(R"({"deepspeed": {"zero_optimization": {"stage": 1}}})").notes.empty());
  // strategy.zero_stage beside the block: the command line wins, both in the file is a contradiction.
  EXPECT_EQ(MustParse(R"({"deepspeed": {"zero_optimization": {"stage": 3}}})", {"strategy.zero_stage=1"})
                .train.sharding.strategy,
            ShardingStrategy::kShardOptimizer);
  EXPECT_THAT(Problems(R"({"strategy": {"zero_stage": 2}, "deepspeed": {"zero_optimization": {"stage": 2}}})"),
              HasSubstr("strategy.zero_stage: also set by deepspeed.zero_optimization.stage: keep one of them"));
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
  EXPECT_THAT(Problems(R"({"strategy": {"mixed_precision": {"fp32_module_types": ["LayerNrom"]}}})"),
              HasSubstr("strategy.mixed_precision.fp32_module_types: expected one of \"Block\", "
                        "\"CausalSelfAttention\", \"Mlp\", \"LayerNorm\", \"BatchNorm2d\", found string "
                        "\"LayerNrom\" (did you mean \"LayerNorm\"?)"));
  EXPECT_THAT(Problems(R"({"strategy": {"mixed_precision": {"fp32_module_types": "LayerNorm"}}})"),
              HasSubstr("strategy.mixed_precision.fp32_module_types: expected"));
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

TEST(Config, EveryDeepSpeedKeyMapsToItsField) {
  const RunConfig c = MustParse(R"({"deepspeed": {
    "train_batch_size": 48, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 4,
    "gradient_clipping": 0.7, "steps_per_print": 7, "wall_clock_breakdown": false,
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 10, "loss_scale_window": 50,
             "hysteresis": 4, "consecutive_hysteresis": true, "min_loss_scale": 0.25},
    "bf16": {"enabled": false},
    "communication_data_type": "fp32",
    "optimizer": {"type": "Adam", "params": {"lr": 0.002, "betas": [0.85, 0.98], "eps": 1e-7,
                                             "weight_decay": 0.05, "adam_w_mode": false}},
    "zero_optimization": {"stage": 3, "overlap_comm": false, "contiguous_gradients": true,
                          "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": 5e7,
                          "offload_optimizer": {"device": "cpu", "pin_memory": true},
                          "offload_param": {"device": "cpu"}}}})");
  const TrainOptions& o = c.train;
  EXPECT_EQ(o.batch_size, 3);
  EXPECT_EQ(o.grad_accum_steps, 4);
  EXPECT_EQ(c.train_batch_size, 48);
  EXPECT_EQ(o.grad_clip, 0.7);
  EXPECT_EQ(o.log_every, 7);
  EXPECT_EQ(o.sharding.strategy, ShardingStrategy::kFullShard);
  EXPECT_TRUE(o.sharding.offload.params && o.sharding.offload.grads && o.sharding.offload.optimizer);
  EXPECT_FALSE(o.sharding.forward_prefetch);
  EXPECT_EQ(o.sharding.backward_prefetch, BackwardPrefetch::kNone);
  EXPECT_EQ(o.sharding.mixed_precision.param_dtype, DType::kF16);
  EXPECT_EQ(o.sharding.mixed_precision.buffer_dtype, DType::kF16);
  EXPECT_EQ(o.sharding.mixed_precision.reduce_dtype, DType::kF32);  // communication_data_type
  EXPECT_TRUE(o.loss_scaling);
  EXPECT_EQ(o.loss_scaler.initial_scale_power, 10);
  EXPECT_EQ(o.loss_scaler.scale_window, 50);
  EXPECT_EQ(o.loss_scaler.hysteresis, 4);
  EXPECT_TRUE(o.loss_scaler.consecutive_hysteresis);
  EXPECT_EQ(o.loss_scaler.min_scale, 0.25);
  EXPECT_EQ(o.optimizer.kind, optim::OptimizerKind::kAdam);  // adam_w_mode false
  EXPECT_EQ(o.optimizer.lr, 0.002);
  EXPECT_EQ(o.lr.lr, 0.002);
  EXPECT_EQ(o.optimizer.adamw.beta1, 0.85);
  EXPECT_EQ(o.optimizer.adamw.beta2, 0.98);
  EXPECT_EQ(o.optimizer.adamw.eps, 1e-7);
  EXPECT_EQ(o.optimizer.weight_decay, 0.05);
  EXPECT_THAT(c.notes.back(), AllOf(HasSubstr("without effect"), HasSubstr("reduce_bucket_size"),
                                    HasSubstr("pin_memory")));
}

TEST(Config, DeepSpeedBf16AdamAndOffloadOptimizer) {
  const RunConfig c = MustParse(R"({"deepspeed": {"bf16": {"enabled": true}, "optimizer": {"type": "Adam"},
                                   "zero_optimization": {"stage": 2, "overlap_comm": true,
                                                         "offload_optimizer": {"device": "cpu"}}}})");
  const TrainOptions& o = c.train;
  EXPECT_EQ(o.sharding.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(o.sharding.mixed_precision.reduce_dtype, DType::kBF16);  // DeepSpeed's default: the model's dtype
  EXPECT_FALSE(o.loss_scaling);
  EXPECT_EQ(o.optimizer.kind, optim::OptimizerKind::kAdamW);  // DeepSpeed's Adam is AdamW by default
  EXPECT_TRUE(o.sharding.forward_prefetch);
  EXPECT_EQ(o.sharding.backward_prefetch, BackwardPrefetch::kBackwardPre);
  EXPECT_FALSE(o.sharding.offload.params);
  EXPECT_TRUE(o.sharding.offload.grads && o.sharding.offload.optimizer);
  EXPECT_EQ(MustParse(R"({"deepspeed": {"optimizer": {"type": "sgd", "params": {"momentum": 0.3,
                          "nesterov": true, "dampening": 0}}}})").train.optimizer.sgd.momentum, 0.3);
}

TEST(Config, CommandLineWinsOverTheDeepSpeedBlock) {
  const std::string ds = R"({"deepspeed": {"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5,
                                            "zero_optimization": {"stage": 3}, "bf16": {"enabled": true}}})";
  const RunConfig c = MustParse(ds, {"train.batch_size=2", "strategy.sharding_strategy=NO_SHARD",
                                     "strategy.mixed_precision.param_dtype=f32"});
  EXPECT_EQ(c.train.batch_size, 2);
  EXPECT_EQ(c.train.log_every, 5);
  EXPECT_EQ(c.train.sharding.strategy, ShardingStrategy::kNoShard);
  EXPECT_EQ(c.train.sharding.mixed_precision.param_dtype, DType::kF32);
  EXPECT_EQ(c.train.sharding.mixed_precision.buffer_dtype, DType::kBF16);  // still the block's
  // The block's own key on the command line wins over the file's FSDP-style key.
  EXPECT_EQ(MustParse(R"({"train": {"batch_size": 2}, "deepspeed": {}})",
                      {"deepspeed.train_micro_batch_size_per_gpu=6"}).train.batch_size, 6);
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
      {"keep_last", "3"}, {"resume", "auto"}});
  ASSERT_TRUE(sets.ok()) << sets.status();
  const RunConfig c = MustParse("", *sets);
  const TrainOptions& o = c.train;
  EXPECT_EQ(o.model.n_layer, 2);
  EXPECT_EQ(o.model.n_head, 2);
  EXPECT_EQ(o.model.n_embd, 32);
  EXPECT_EQ(o.model.block_size, 16);
  EXPECT_EQ(o.model.vocab_size, 300);
  EXPECT_EQ(o.model.dropout, 0.1);
  EXPECT_EQ(o.data, "a.txt");
  EXPECT_EQ(o.batch_size, 3);
  EXPECT_EQ(o.grad_accum_steps, 2);
  EXPECT_TRUE(o.no_sync);
  EXPECT_EQ(o.steps, 30);
  EXPECT_EQ(o.optimizer.kind, optim::OptimizerKind::kSgd);
  EXPECT_EQ(o.lr.lr, 0.01);
  EXPECT_EQ(o.lr.min_lr, 0.001);
  EXPECT_EQ(o.lr.warmup_steps, 3);
  EXPECT_EQ(o.lr.decay_steps, 30);  // max(steps, warmup_steps), as before
  EXPECT_EQ(o.lr.kind, optim::LrScheduleKind::kLinear);
  EXPECT_EQ(o.optimizer.weight_decay, 0.2);
  EXPECT_EQ(o.optimizer.adamw.beta1, 0.8);
  EXPECT_EQ(o.optimizer.sgd.momentum, 0.8);  // --beta1 is also SGD's momentum
  EXPECT_EQ(o.optimizer.adamw.beta2, 0.99);
  EXPECT_EQ(o.grad_clip, 0);
  EXPECT_EQ(o.seed, 5u);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.backend, "mpi");
  EXPECT_EQ(o.sharding.strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(o.sharding.hybrid_shard_size, 2);
  EXPECT_EQ(o.sharding.wrap.kind, WrapPolicy::Kind::kBySize);
  EXPECT_EQ(o.sharding.wrap.min_num_params, 1000);
  EXPECT_TRUE(o.sharding.forward_prefetch);
  EXPECT_EQ(o.sharding.backward_prefetch, BackwardPrefetch::kNone);
  EXPECT_EQ(o.sharding.limit_all_gathers, 0);
  EXPECT_TRUE(o.model.activation_checkpointing);
  EXPECT_EQ(o.init_from, "i.safetensors");
  EXPECT_EQ(o.save, "s.safetensors");
  EXPECT_EQ(o.log_every, 1);  // clamped, as before
  EXPECT_EQ(o.eval_every, 0);
  EXPECT_EQ(o.eval_iters, 2);
  EXPECT_EQ(o.sample_tokens, 0);
  EXPECT_EQ(o.temperature, 1.0);
  EXPECT_EQ(o.top_k, 5);
  EXPECT_EQ(o.device_memory_limit, 123);
  EXPECT_FALSE(o.tensorboard);
  EXPECT_FALSE(o.sharding.offload.params);
  EXPECT_TRUE(o.sharding.offload.grads && o.sharding.offload.optimizer);
  EXPECT_EQ(o.sharding.mixed_precision.param_dtype, DType::kF16);
  EXPECT_EQ(o.sharding.mixed_precision.reduce_dtype, DType::kBF16);
  EXPECT_TRUE(o.loss_scaling);
  EXPECT_EQ(o.loss_scaler.initial_scale_power, 8);
  EXPECT_EQ(o.loss_scaler.scale_window, 20);
  EXPECT_EQ(o.loss_scaler.hysteresis, 1);
  EXPECT_EQ(o.loss_scaler.min_scale, 2.0);
  EXPECT_EQ(o.trace, "t.json");
  EXPECT_EQ(o.trace_from, 1);
  EXPECT_EQ(o.trace_steps, 1);
  EXPECT_EQ(c.work_dir, "/tmp/wd");
  EXPECT_EQ(o.work_dir, "/tmp/wd/test");  // checkpoints: work_dir/experiment_name
  EXPECT_EQ(o.save_every, 5);
  EXPECT_EQ(o.state_dict_type, "full");
  EXPECT_TRUE(o.async_save);
  EXPECT_EQ(o.keep_last, 3);
  EXPECT_EQ(o.resume, "auto");
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
    const OffloadPolicy off = MustParse(R"({"strategy": {"cpu_offload": true}})", *OverridesFromFlags(flags))
                                  .train.sharding.offload;
    EXPECT_TRUE(off.nvme_optimizer && off.nvme_params);
    EXPECT_FALSE(off.params || off.grads || off.optimizer);
    EXPECT_EQ(off.optimizer_nvme.path, "/mnt/nvme0");
    EXPECT_EQ(off.param_nvme.path, "/mnt/nvme0");
  }
  const OffloadPolicy opt_only =
      MustParse("", *OverridesFromFlags({{"offload", "nvme_optimizer"}, {"nvme_path", "/n"}})).train.sharding.offload;
  EXPECT_TRUE(opt_only.nvme_optimizer);
  EXPECT_FALSE(opt_only.nvme_params);
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

// ============================================================ problems, one kind each

TEST(ConfigProblems, UnknownKeyGetsTheClosestValidKey) {
  EXPECT_EQ(Problems(R"({"strategy": {"sharding_stratgy": "FULL_SHARD"}})"),
            "config test.json: 1 problem\n"
            "  strategy.sharding_stratgy: unknown key (did you mean \"sharding_strategy\"?)");
  EXPECT_THAT(Problems(R"({"modle": {}})"), HasSubstr("modle: unknown key (did you mean \"model\"?)"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"zero_optimization": {"stgae": 3}}})"),
              HasSubstr("deepspeed.zero_optimization.stgae: unknown key (did you mean \"stage\"?)"));
}

TEST(ConfigProblems, UnknownKeyThatBelongsElsewhereSaysWhere) {
  EXPECT_THAT(Problems(R"({"train": {"lr": 0.1}})"), HasSubstr("train.lr: unknown key (it belongs in optimizer.lr)"));
}

TEST(ConfigProblems, UnknownKeyWithNothingCloseListsTheValidKeys) {
  EXPECT_THAT(Problems(R"({"sample": {"nucleus": 0.9}})"),
              HasSubstr("sample.nucleus: unknown key; expected one of \"tokens\", \"temperature\", \"top_k\""));
}

TEST(ConfigProblems, WrongType) {
  EXPECT_THAT(Problems(R"({"train": {"steps": "ten"}})"),
              HasSubstr("train.steps: expected an integer >= 1, found string \"ten\""));
  EXPECT_THAT(Problems(R"({"train": {"steps": 2.5}})"),
              HasSubstr("train.steps: expected an integer >= 1, found number 2.5"));
  EXPECT_THAT(Problems(R"({"strategy": {"forward_prefetch": "yes"}})"),
              HasSubstr("strategy.forward_prefetch: expected true or false, found string \"yes\""));
  EXPECT_THAT(Problems(R"({"data": {"path": 3}})"), HasSubstr("data.path: expected a string, found number 3"));
  EXPECT_THAT(Problems(R"({"model": []})"), HasSubstr("model: expected an object, found array []"));
  EXPECT_THAT(Problems(R"({"optimizer": {"lr": null}})"),
              HasSubstr("optimizer.lr: expected a number >= 0, found null"));
  EXPECT_THAT(Problems(R"({"strategy": {"mixed_precision": {"param_dtype": "int8"}}})"),
              HasSubstr("strategy.mixed_precision.param_dtype: expected a float dtype"));
  EXPECT_THAT(Problems("[1]"), HasSubstr("(root): expected an object, found array [1]"));
}

TEST(ConfigProblems, OutOfRange) {
  EXPECT_THAT(Problems(R"({"model": {"n_layer": 0}})"), HasSubstr("model.n_layer: expected an integer >= 1, found 0"));
  EXPECT_THAT(Problems(R"({"model": {"dropout": 1.0}})"),
              HasSubstr("model.dropout: expected a number in [0, 1), found 1.0"));
  EXPECT_THAT(Problems(R"({"data": {"val_fraction": 0}})"),
              HasSubstr("data.val_fraction: expected a number in (0, 1), found 0"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"zero_optimization": {"stage": 4}}})"),
              HasSubstr("deepspeed.zero_optimization.stage: expected an integer in [0, 3], found 4"));
  EXPECT_THAT(Problems(R"({"strategy": {"limit_all_gathers": -1}})"),
              HasSubstr("strategy.limit_all_gathers: expected an integer in [0, 1048576], found -1"));
}

TEST(ConfigProblems, UnknownChoiceGetsTheClosestOne) {
  EXPECT_THAT(Problems(R"({"strategy": {"sharding_strategy": "FULL_SHRAD"}})"),
              HasSubstr("strategy.sharding_strategy: expected one of \"FULL_SHARD\", \"SHARD_GRAD_OP\", "
                        "\"SHARD_OPTIMIZER\", \"NO_SHARD\", \"HYBRID_SHARD\", found string \"FULL_SHRAD\" "
                        "(did you mean \"FULL_SHARD\"?)"));
  EXPECT_THAT(Problems(R"({"strategy": {"auto_wrap_policy": ["Blok"]}})"),
              HasSubstr("found string \"Blok\" (did you mean \"Block\"?)"));
  EXPECT_THAT(Problems(R"({"strategy": {"activation_checkpointing": ["Mlp"]}})"),
              HasSubstr("strategy.activation_checkpointing: expected [] or [\"Block\"]"));
}

TEST(ConfigProblems, AccumulationStepsBelowOne) {
  EXPECT_THAT(Problems(R"({"train": {"grad_accum_steps": 0}})"),
              HasSubstr("train.grad_accum_steps: expected an integer >= 1, found 0"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"gradient_accumulation_steps": 0}})"),
              HasSubstr("deepspeed.gradient_accumulation_steps: expected an integer >= 1, found 0"));
}

TEST(ConfigProblems, Fp16AndBf16BothOn) {
  EXPECT_THAT(Problems(R"({"deepspeed": {"fp16": {"enabled": true}, "bf16": {"enabled": true}}})"),
              HasSubstr("deepspeed.fp16.enabled: fp16 and bf16 both on (deepspeed.bf16.enabled is true too): "
                        "expected at most one"));
}

TEST(ConfigProblems, HybridShardSizeMustDivideTheWorld) {
  EXPECT_THAT(Problems(R"({"distributed": {"world_size": 4},
                           "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 3}})"),
              HasSubstr("strategy.hybrid_shard_size: HYBRID_SHARD needs a shard group size >= 1 that divides the "
                        "world size 4 (distributed.world_size), found 3"));
  // Under MPI the real world size is checked when it is known.
  const RunConfig mpi = MustParse(R"({"distributed": {"backend": "mpi"},
                                      "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 3}})");
  EXPECT_TRUE(CheckWorldSize(mpi, 6).ok());
  EXPECT_THAT(CheckWorldSize(mpi, 4), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("divides the world size 4 (the number of ranks), found 3")));
}

TEST(ConfigProblems, NEmbdMustBeAMultipleOfNHead) {
  EXPECT_THAT(Problems(R"({"model": {"n_embd": 100, "n_head": 3}})"),
              HasSubstr("model.n_embd: expected a multiple of model.n_head (3), found 100"));
}

TEST(ConfigProblems, DeepSpeedTrainBatchSizeMustMatch) {
  EXPECT_THAT(Problems(R"({"deepspeed": {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                         "gradient_accumulation_steps": 2}})"),
              HasSubstr("deepspeed.train_batch_size: expected train_micro_batch_size_per_gpu x "
                        "gradient_accumulation_steps x world size = 4 x 2 x 4 = 32, found 30"));
}

TEST(ConfigProblems, SettingGivenInBothStyles) {
  EXPECT_THAT(Problems(R"({"train": {"batch_size": 4}, "deepspeed": {"train_micro_batch_size_per_gpu": 4}})"),
              HasSubstr("train.batch_size: also set by deepspeed.train_micro_batch_size_per_gpu: keep one of them"));
  EXPECT_THAT(Problems(R"({"strategy": {"sharding_strategy": "FULL_SHARD"}, "deepspeed": {}})"),
              HasSubstr("strategy.sharding_strategy: also set by deepspeed.zero_optimization.stage"));
  EXPECT_THAT(Problems(R"({"loss_scaler": {"hysteresis": 1}, "deepspeed": {"fp16": {"hysteresis": 2}}})"),
              HasSubstr("loss_scaler.hysteresis: also set by deepspeed.fp16.hysteresis: keep one of them"));
  // Both on the command line: still a contradiction.
  EXPECT_THAT(Problems(R"({"deepspeed": {}})", {"train.grad_clip=1", "deepspeed.gradient_clipping=2"}),
              HasSubstr("train.grad_clip: also set by deepspeed.gradient_clipping"));
}

TEST(ConfigProblems, ParameterOffloadNeedsStage3) {
  EXPECT_THAT(Problems(R"({"deepspeed": {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}})"),
              HasSubstr("deepspeed.zero_optimization.offload_param.device: parameter offload needs "
                        "zero_optimization.stage 3 (as in DeepSpeed), found stage 2"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"zero_optimization": {"stage": 2, "offload_param": {"device": "nvme",
                                                                                             "nvme_path": "/n"}}}})"),
              HasSubstr("parameter offload needs zero_optimization.stage 3"));
}

// ============================================================ NVMe offload

TEST(Config, NvmeOffloadStrategyKeys) {
  const OffloadPolicy off = MustParse(R"({"strategy": {"nvme_offload": {
      "nvme_path": "/mnt/a",
      "optimizer": {"enabled": true, "buffer_count": 3, "pin_memory": true, "read_ahead": false},
      "params": {"enabled": true, "nvme_path": "/mnt/b", "buffer_count": 6, "max_in_cpu": 1000},
      "verify_checksums": false,
      "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2, "single_submit": true,
              "overlap_events": false}}}})").train.sharding.offload;
  EXPECT_TRUE(off.nvme_optimizer && off.nvme_params);
  EXPECT_EQ(off.optimizer_nvme.path, "/mnt/a");
  EXPECT_EQ(off.optimizer_nvme.buffer_count, 3);
  EXPECT_TRUE(off.optimizer_nvme.pin_memory);
  EXPECT_EQ(off.param_nvme.path, "/mnt/b");
  EXPECT_EQ(off.param_nvme.buffer_count, 6);
  EXPECT_FALSE(off.param_nvme.pin_memory);
  EXPECT_EQ(off.param_nvme.max_in_cpu, 1000);
  EXPECT_FALSE(off.optimizer_nvme.read_ahead);
  EXPECT_TRUE(off.optimizer_nvme.write_behind && off.param_nvme.read_ahead && off.param_nvme.write_behind);
  EXPECT_FALSE(off.nvme_verify);
  EXPECT_EQ(off.aio.block_size, 262144);
  EXPECT_EQ(off.aio.queue_depth, 16);
  EXPECT_EQ(off.aio.thread_count, 2);
  EXPECT_TRUE(off.aio.single_submit);
  EXPECT_FALSE(off.aio.overlap_events);
  // Defaults: off, DeepSpeed's buffer counts and aio.
  const OffloadPolicy d = MustParse("").train.sharding.offload;
  EXPECT_FALSE(d.nvme());
  EXPECT_EQ(d.optimizer_nvme.buffer_count, 4);
  EXPECT_EQ(d.param_nvme.buffer_count, 5);
  EXPECT_EQ(d.param_nvme.max_in_cpu, 0);
  EXPECT_EQ(d.aio.block_size, 1 << 20);
  EXPECT_EQ(d.aio.queue_depth, 8);
  EXPECT_TRUE(d.nvme_verify);
  EXPECT_FALSE(MustParse(R"({"strategy": {"nvme_offload": null}})").train.sharding.offload.nvme());
  // The resolved form reads back to the same policy (paths shared or not).
  const std::string resolved = ResolvedConfigJson(MustParse(R"({"strategy": {"nvme_offload": {
      "nvme_path": "/mnt/a", "optimizer": {"enabled": true}, "params": {"enabled": true, "nvme_path": "/mnt/b"}}}})"));
  EXPECT_THAT(resolved, HasSubstr("\"nvme_path\": \"/mnt/b\""));
  EXPECT_EQ(ResolvedConfigJson(MustParse(resolved)), resolved);
}

TEST(Config, DeepSpeedNvmeOffloadAndAio) {
  const RunConfig c = MustParse(R"({"deepspeed": {
      "aio": {"block_size": 131072, "queue_depth": 4, "thread_count": 3, "single_submit": true, "overlap_events": false},
      "zero_optimization": {"stage": 3,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 2, "pin_memory": true,
                              "pipeline_read": false, "fast_init": false},
        "offload_param": {"device": "nvme", "nvme_path": "/other_nvme", "buffer_count": 7, "buffer_size": 1e8}}}})");
  const OffloadPolicy& off = c.train.sharding.offload;
  EXPECT_TRUE(off.nvme_optimizer && off.nvme_params);
  EXPECT_FALSE(off.params || off.grads || off.optimizer);  // not host offload
  EXPECT_EQ(off.optimizer_nvme.path, "/local_nvme");
  EXPECT_EQ(off.optimizer_nvme.buffer_count, 2);
  EXPECT_TRUE(off.optimizer_nvme.pin_memory);
  EXPECT_EQ(off.param_nvme.path, "/other_nvme");
  EXPECT_EQ(off.param_nvme.buffer_count, 7);
  EXPECT_EQ(off.param_nvme.max_in_cpu, 1000000000);  // DeepSpeed's default
  EXPECT_FALSE(off.optimizer_nvme.read_ahead);        // pipeline_read false
  EXPECT_TRUE(off.optimizer_nvme.write_behind);       // pipeline_write absent: on here
  EXPECT_EQ(off.aio.block_size, 131072);
  EXPECT_EQ(off.aio.queue_depth, 4);
  EXPECT_EQ(off.aio.thread_count, 3);
  EXPECT_TRUE(off.aio.single_submit);
  EXPECT_FALSE(off.aio.overlap_events);
  bool noted = false;
  for (const std::string& n : c.notes) noted = noted || absl::StrContains(n, "offload_param.buffer_size");
  EXPECT_TRUE(noted);
  // CPU for one, NVMe for the other.
  const OffloadPolicy mixed = MustParse(R"({"deepspeed": {"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}, "offload_param": {"device": "cpu"}}}})")
                                  .train.sharding.offload;
  EXPECT_TRUE(mixed.nvme_optimizer && mixed.params);
  EXPECT_FALSE(mixed.nvme_params);
}

TEST(ConfigProblems, NvmeOffloadMistakes) {
  const std::string p = Problems(R"({"deepspeed": {"aio": {"block_size": 1000, "queue_depth": 0, "thred_count": 2},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "buffer_count": 0}}}})");
  EXPECT_THAT(p, HasSubstr("deepspeed.aio.block_size: expected an integer in [4096, 1073741824], found 1000"));
  EXPECT_THAT(p, HasSubstr("deepspeed.aio.queue_depth: expected an integer in [1, 4096], found 0"));
  EXPECT_THAT(p, HasSubstr("deepspeed.aio.thred_count: unknown key (did you mean \"thread_count\"?)"));
  EXPECT_THAT(p, HasSubstr("deepspeed.zero_optimization.offload_optimizer.buffer_count: expected an integer in [1, 65536]"));
  EXPECT_THAT(p, HasSubstr("deepspeed.zero_optimization.offload_optimizer.nvme_path: expected the directory for the "
                           "NVMe swap files with device \"nvme\", found none"));
  EXPECT_THAT(Problems(R"({"strategy": {"nvme_offload": {"aio": {"block_size": 6000}}}})"),
              HasSubstr("strategy.nvme_offload.aio.block_size: expected a multiple of 4096 bytes"));
  EXPECT_THAT(Problems(R"({"strategy": {"nvme_offload": true}})"),
              HasSubstr("strategy.nvme_offload: expected an object"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"zero_optimization": {"offload_optimizer": {"device": "disk"}}}})"),
              HasSubstr("expected one of \"none\", \"cpu\", \"nvme\""));
  // Given both ways.
  EXPECT_THAT(Problems(R"({"strategy": {"nvme_offload": {"nvme_path": "/a"}}, "deepspeed": {"zero_optimization":
                          {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/b"}}}})"),
              HasSubstr("strategy.nvme_offload: also set by deepspeed.zero_optimization.offload_optimizer"));
}

TEST(ConfigProblems, StaticLossScaleIsNotSupported) {
  EXPECT_THAT(Problems(R"({"deepspeed": {"fp16": {"enabled": true, "loss_scale": 128}}})"),
              HasSubstr("deepspeed.fp16.loss_scale: expected 0 (dynamic loss scaling; a static loss scale is not "
                        "supported), found 128"));
}

// DeepSpeed's scheduler block: its three warmup schedules map onto
// lr_schedule (Note [DeepSpeed mapping]); a log warmup is refused.
TEST(Config, DeepSpeedSchedulerMapsToLrSchedule) {
  struct Case {
    std::string scheduler;
    optim::LrSchedule want;  // lr is the optimizer's lr
  };
  const std::vector<Case> cases = {
      {R"({"type": "WarmupLR", "params": {"warmup_max_lr": 0.002, "warmup_num_steps": 7, "warmup_type": "linear"}})",
       {.kind = optim::LrScheduleKind::kConstant, .lr = 0.002, .min_lr = 1e-4, .warmup_steps = 7, .decay_steps = 200}},
      {R"({"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 0.003, "warmup_num_steps": 10,
                                               "total_num_steps": 150, "warmup_type": "linear"}})",
       {.kind = optim::LrScheduleKind::kLinear, .lr = 0.003, .min_lr = 1e-5, .warmup_steps = 10, .decay_steps = 150}},
      {R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 120, "warmup_num_steps": 5, "cos_min_ratio": 0.1,
                                                "warmup_type": "linear"}})",
       {.kind = optim::LrScheduleKind::kCosine, .lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 5, .decay_steps = 120}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.scheduler);
    const RunConfig c = MustParse(absl::StrCat(R"({"deepspeed": {"scheduler": )", k.scheduler, "}}"));
    const optim::LrSchedule& lr = c.train.lr;
    EXPECT_EQ(lr.kind, k.want.kind);
    EXPECT_DOUBLE_EQ(lr.lr, k.want.lr);
    EXPECT_DOUBLE_EQ(c.train.optimizer.lr, k.want.lr);
    EXPECT_DOUBLE_EQ(lr.min_lr, k.want.min_lr);
    EXPECT_EQ(lr.warmup_steps, k.want.warmup_steps);
    EXPECT_EQ(lr.decay_steps, k.want.decay_steps);
    bool noted = false;
    for (const std::string& n : c.notes) noted = noted || absl::StrContains(n, "deepspeed.scheduler");
    EXPECT_TRUE(noted);
    // The resolved form holds the schedule and reads back to it.
    const std::string resolved = ResolvedConfigJson(c);
    EXPECT_EQ(MustParse(resolved).train.lr.ToString(), lr.ToString());
  }
  // DeepSpeed's default warmup is logarithmic: refused, naming the value.
  EXPECT_THAT(Problems(R"({"deepspeed": {"scheduler": {"type": "WarmupLR", "params": {}}}})"),
              HasSubstr("deepspeed.scheduler.params.warmup_type: expected \"linear\" (the warmup here is linear: "
                        "lr * (it + 1) / (warmup_steps + 1)), found none (DeepSpeed's default is \"log\")"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "log"}}}})"),
              HasSubstr("warmup_type: expected \"linear\""));
  EXPECT_THAT(Problems(R"({"deepspeed": {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_type": "linear"}}}})"),
              HasSubstr("deepspeed.scheduler.params.total_num_steps: expected an integer >= 1 (WarmupDecayLR decays "
                        "until then), found none"));
  EXPECT_THAT(Problems(R"({"deepspeed": {"scheduler": {"type": "OneCycle"}}})"),
              HasSubstr("deepspeed.scheduler.type: expected one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\""));
  EXPECT_THAT(Problems(R"({"deepspeed": {"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linear",
                                                                                    "total_num_steps": 5}}}})"),
              HasSubstr("deepspeed.scheduler.params.total_num_steps: unknown key"));
  // Given both ways: a contradiction, as every other key.
  EXPECT_THAT(Problems(R"({"lr_schedule": {"type": "cosine"}, "deepspeed": {"scheduler": {"type": "WarmupLR",
                           "params": {"warmup_type": "linear"}}}})"),
              HasSubstr("lr_schedule.type: also set by deepspeed.scheduler.type: keep one of them"));
}

// A DeepSpeed config file on its own is the "deepspeed" block of a default config.
TEST(Config, DeepSpeedConfigAtTheTopLevel) {
  const std::string ds = R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2,
                              "zero_optimization": {"stage": 2}, "bf16": {"enabled": true},
                              "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}})";
  const RunConfig top = MustParse(ds);
  const RunConfig nested = MustParse(absl::StrCat(R"({"deepspeed": )", ds, "}"));
  EXPECT_EQ(ResolvedConfigJson(top), ResolvedConfigJson(nested));
  EXPECT_EQ(top.train.batch_size, 3);
  EXPECT_EQ(top.train.sharding.strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(top.train.sharding.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(top.train.optimizer.lr, 0.002);
  // A file as a _base_, with this job's keys over it.
  const std::string dir = TempDir() + "/ds_top";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/ds_config.json") << ds;
  std::ofstream(dir + "/run.json") << R"({"_base_": "ds_config.json", "train": {"steps": 9}})";
  absl::StatusOr<RunConfig> run = LoadConfig(dir + "/run.json", {});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->train.steps, 9);
  EXPECT_EQ(run->train.batch_size, 3);
  // This job's keys beside them: not a DeepSpeed file, so the DeepSpeed keys are unknown.
  EXPECT_THAT(Problems(R"({"train": {"steps": 2}, "zero_optimization": {"stage": 2}})"),
              HasSubstr("zero_optimization: unknown key"));
}

TEST(ConfigProblems, Fp16WithoutLossScaling) {
  EXPECT_THAT(Problems(R"({"strategy": {"mixed_precision": {"param_dtype": "f16"}}, "loss_scaler": {"mode": "none"}})"),
              HasSubstr("loss_scaler.mode: expected \"auto\" or \"dynamic\" with strategy.mixed_precision.param_dtype "
                        "f16 (fp16 training needs loss scaling), found \"none\""));
}

TEST(ConfigProblems, LearningRateSchedule) {
  EXPECT_THAT(Problems(R"({"optimizer": {"lr": 0.001}, "lr_schedule": {"min_lr": 0.01}})"),
              HasSubstr("lr_schedule.min_lr: expected at most optimizer.lr (0.001), found 0.01"));
  EXPECT_THAT(Problems(R"({"lr_schedule": {"warmup_steps": 50, "decay_steps": 10}})"),
              HasSubstr("lr_schedule.decay_steps: expected at least lr_schedule.warmup_steps (50), found 10"));
}

TEST(ConfigProblems, LocalStateDictIsNotSupported) {
  EXPECT_THAT(Problems(R"({"strategy": {"state_dict_type": "LOCAL_STATE_DICT"}})"),
              HasSubstr("strategy.state_dict_type: expected \"SHARDED_STATE_DICT\" or \"FULL_STATE_DICT\", found "
                        "\"LOCAL_STATE_DICT\" (not supported"));
}

TEST(ConfigProblems, NesterovNeedsMomentum) {
  EXPECT_THAT(Problems(R"({"optimizer": {"type": "sgd", "momentum": 0, "nesterov": true}})"),
              HasSubstr("optimizer.nesterov: Nesterov needs momentum > 0 and dampening 0, found momentum 0"));
}

TEST(ConfigProblems, CheckpointKeysNeedTheirPrerequisites) {
  EXPECT_THAT(Problems(R"({"strategy": {"skip_init_weights": true}})"),
              HasSubstr("strategy.skip_init_weights: the weights must then come from checkpoint.init_from or "
                        "checkpoint.resume, found neither set"));
  EXPECT_THAT(Problems(R"({"work_dir": "", "checkpoint": {"save_every": 10, "resume": "auto"}})"),
              AllOf(HasSubstr("checkpoint.save_every: checkpoints go to work_dir/experiment_name: expected a work_dir"),
                    HasSubstr("checkpoint.resume: \"auto\" looks in work_dir/experiment_name")));
}

TEST(ConfigProblems, EveryProblemAtOnceOnePerLine) {
  const std::string m = Problems(R"({"model": {"n_layer": 0, "n_embd": 100, "n_head": 3},
                                     "train": {"steps": "x", "stepz": 1},
                                     "deepspeed": {"fp16": {"enabled": true}, "bf16": {"enabled": true}}})",
                                 {"strategy.forward_prefetch=maybe"});
  const std::vector<std::string> lines = absl::StrSplit(m, '\n');
  ASSERT_EQ(lines.size(), 7u) << m;
  EXPECT_EQ(lines[0], "config test.json: 6 problems");
  EXPECT_THAT(m, HasSubstr("  model.n_layer: "));
  EXPECT_THAT(m, HasSubstr("  model.n_embd: "));
  EXPECT_THAT(m, HasSubstr("  train.steps: "));
  EXPECT_THAT(m, HasSubstr("  train.stepz: unknown key (did you mean \"steps\"?)"));
  EXPECT_THAT(m, HasSubstr("  strategy.forward_prefetch: expected true or false, found string \"maybe\""));
  EXPECT_THAT(m, HasSubstr("  deepspeed.fp16.enabled: fp16 and bf16 both on"));
}

TEST(ConfigProblems, NotJson) {
  EXPECT_THAT(ConfigFromText("{\"model\": {\n  \"n_layer\": 4,\n}", {}, "bad.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config bad.json: expected JSON, found a parse error at line 3"))));
  EXPECT_THAT(LoadConfig("no/such.json", {}), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such.json")));
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
  EXPECT_THAT(Problems("", {"train.steps"}), HasSubstr("--set \"train.steps\": expected key.path=value"));
  EXPECT_THAT(Problems("", {"train..steps=1"}), HasSubstr("non-empty keys between the dots"));
  EXPECT_THAT(Problems("", {"model.n_layer.x=1"}), HasSubstr("--set \"model.n_layer.x=1\": model.n_layer is number 4, not an object"));
  EXPECT_THAT(Problems("", {"train.stesp=1"}), HasSubstr("train.stesp: unknown key (did you mean \"steps\"?)"));
  EXPECT_THAT(Problems("", {"train.steps=ten"}), HasSubstr("train.steps: expected an integer >= 1, found string \"ten\""));
  EXPECT_THAT(Problems("", {"optimizer.betas.5=1"}), HasSubstr("expected an index in [0, 2] into optimizer.betas"));
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

// Every leaf key path of a JSON object (arrays are leaves).
void Leaves(const nlohmann::ordered_json& j, const std::string& prefix, std::vector<std::string>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string p = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      Leaves(*it, p, out);
    } else {
      out->push_back(p);
    }
  }
}

TEST(Config, ResolvedConfigHoldsEveryKeyAndReadsBackToTheSameRun) {
  std::vector<std::string> resolved;
  Leaves(nlohmann::ordered_json::parse(ResolvedConfigJson(DefaultRunConfig())), "", &resolved);
  std::vector<std::string> schema = ConfigKeyPaths();
  schema.erase(std::remove(schema.begin(), schema.end(), "description"), schema.end());
  std::sort(resolved.begin(), resolved.end());
  std::sort(schema.begin(), schema.end());
  EXPECT_EQ(resolved, schema);
}

// ============================================================ ready configs

std::vector<std::string> ReadyConfigs() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("examples/configs")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ReadyConfigs, EveryFileIsValidAndItsResolvedFormIsAFixedPoint) {
  const std::vector<std::string> files = ReadyConfigs();
  EXPECT_GE(files.size(), 10u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    absl::StatusOr<RunConfig> c = LoadConfig(f, {});
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string resolved = ResolvedConfigJson(*c);
    absl::StatusOr<RunConfig> again = ConfigFromText(resolved, {}, f);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(ResolvedConfigJson(*again), resolved);
    EXPECT_TRUE(CheckWorldSize(*c, c->world_size).ok());
  }
  // The default is what `make train` runs: 4 ranks, FULL_SHARD, one unit per block.
  absl::StatusOr<RunConfig> d = LoadConfig("examples/configs/default.json", {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->world_size, 4);
  EXPECT_EQ(d->train.sharding.strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(d->train.sharding.wrap.types, std::set<std::string>{"Block"});
  EXPECT_EQ(d->experiment_name, "default");
}

// Shrinks a ready config to a run of a few seconds.
const std::vector<std::string> kTiny = {"model.n_layer=2", "model.n_embd=32",  "model.n_head=2",
                                        "model.block_size=32", "train.steps=4", "train.eval_iters=2",
                                        "sample.tokens=8", "train.log_every=2", "work_dir="};

TEST(ReadyConfigs, EveryOneTrains) {
  for (const std::string& f : ReadyConfigs()) {
    SCOPED_TRACE(f);
    std::vector<std::string> tiny = kTiny;
    if (absl::StrContains(f, "nvme")) {  // its swap files in the test's directory, not /local_nvme
      for (const char* kind : {"offload_optimizer", "offload_param"}) {
        tiny.push_back(absl::StrCat("deepspeed.zero_optimization.", kind, ".nvme_path=", TempDir()));
      }
    }
    if (absl::StatusOr<RunConfig> as_is = LoadConfig(f, {}); as_is.ok() && as_is->model_type == "resnet") {
      continue;  // the vision job: ResNetConfig.ReadyConfigTrainsThroughTheMainProgramsEntry
    }
    absl::StatusOr<RunConfig> c = LoadConfig(f, tiny);
    ASSERT_TRUE(c.ok()) << c.status();
    TrainSummary s;
    std::vector<absl::Status> st =
        RunRanks(c->world_size, [&](Communicator& comm) { return RunTraining(c->train, comm, &s); });
    for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
    ASSERT_EQ(s.losses.size(), 4u);
    EXPECT_TRUE(std::isfinite(s.final_val_loss));
    EXPECT_LT(s.losses.back(), s.losses.front());
  }
}

// ============================================================ the run folder

TEST(RunFolder, HoldsTheResolvedConfigTheLogMetricsAndTensorBoardEvents) {
  const std::string work = TempDir() + "/runs";
  absl::StatusOr<RunConfig> c = LoadConfig("examples/configs/default.json", kTiny);
  ASSERT_TRUE(c.ok()) << c.status();
  c->work_dir = work;
  c->train.eval_every = 2;  // a validation loss at step 1 and at the end
  absl::StatusOr<RunDir> dir = StartRun(&*c, "config: examples/configs/default.json\n", 1700000000);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->path(), work + "/default/" + RunTimestamp(1700000000));
  TrainSummary summary;
  std::vector<absl::Status> st =
      RunRanks(c->world_size, [&](Communicator& comm) { return RunTraining(c->train, comm, &summary); });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;

  // config.json: the resolved config, which reads back to this run.
  const std::string resolved = ReadFile(dir->config_path());
  EXPECT_EQ(resolved, ResolvedConfigJson(*c));
  absl::StatusOr<RunConfig> back = ConfigFromText(resolved, {}, dir->config_path());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->train.steps, 4);

  // The log: the header, then what rank 0 printed.
  const std::string log = ReadFile(dir->log_path());
  EXPECT_THAT(log, AllOf(HasSubstr("config: examples/configs/default.json\n"), HasSubstr("zeroshard train: 4 ranks"),
                         HasSubstr("step 0 loss "), HasSubstr("step 1 val loss"), HasSubstr("final val loss"),
                         HasSubstr("done: 4 steps")));

  // metrics.csv: the header and one row per step.
  const std::string csv = ReadFile(dir->metrics_path());
  std::vector<std::string> rows = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 5u) << csv;
  EXPECT_EQ(rows[0], "step,loss,lr,tokens_per_s,ms_per_step,val_loss,peak_bytes_rank0,peak_bytes_rank1,"
                     "peak_bytes_rank2,peak_bytes_rank3");
  for (int i = 1; i <= 4; ++i) {
    const std::vector<std::string> f = absl::StrSplit(rows[i], ',');
    ASSERT_EQ(f.size(), 10u) << rows[i];
    EXPECT_EQ(f[0], absl::StrCat(i - 1));
    EXPECT_GT(std::stod(f[1]), 0);
    EXPECT_GT(std::stod(f[2]), 0);
    EXPECT_GT(std::stod(f[3]), 0);
    EXPECT_GT(std::stod(f[4]), 0);
    EXPECT_EQ(f[5].empty(), i != 2 && i != 4) << rows[i];  // evaluated after step 1 and at the end
    for (int r = 6; r < 10; ++r) EXPECT_GT(std::stoll(f[r]), 0);
  }
  // tensorboard/: one event file, the file version first, then each step's
  // scalars with the same values as metrics.csv (as floats).
  EXPECT_EQ(c->train.tensorboard_dir, dir->tensorboard_dir());
  std::vector<std::string> event_files;
  for (const auto& e : std::filesystem::directory_iterator(dir->tensorboard_dir())) {
    event_files.push_back(e.path().string());
  }
  ASSERT_EQ(event_files.size(), 1u);
  EXPECT_THAT(event_files[0], HasSubstr("/tensorboard/events.out.tfevents."));
  absl::StatusOr<std::vector<testing::TestEvent>> events = testing::ReadEventFile(event_files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_FALSE(events->empty());
  EXPECT_EQ((*events)[0].file_version, "brain.Event:2");
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;  // tag -> (step, value)
  for (size_t i = 1; i < events->size(); ++i) {
    const testing::TestEvent& e = (*events)[i];
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_GE(e.wall_time, (*events)[0].wall_time);
    scalars[e.values[0].first].emplace_back(e.step, e.values[0].second);
  }
  std::vector<std::string> tags;
  for (const auto& [tag, v] : scalars) tags.push_back(tag);
  EXPECT_THAT(tags, ElementsAre("memory/peak_bytes_rank0", "memory/peak_bytes_rank1", "memory/peak_bytes_rank2",
                                "memory/peak_bytes_rank3", "train/loss", "train/lr", "train/ms_per_step",
                                "train/tokens_per_s", "val/loss"));
  ASSERT_EQ(scalars["train/loss"].size(), 4u);
  for (int i = 1; i <= 4; ++i) {
    const std::vector<std::string> f = absl::StrSplit(rows[i], ',');
    EXPECT_EQ(scalars["train/loss"][i - 1].first, i - 1);
    EXPECT_EQ(scalars["train/loss"][i - 1].second, static_cast<float>(summary.losses[i - 1]));
    EXPECT_NEAR(scalars["train/lr"][i - 1].second, std::stod(f[2]), 1e-5 * std::stod(f[2]));  // csv: 6 digits
    EXPECT_EQ(scalars["memory/peak_bytes_rank0"][i - 1].second, static_cast<float>(std::stoll(f[6])));
  }
  ASSERT_EQ(scalars["val/loss"].size(), 2u);  // after step 1 and at the end
  EXPECT_EQ(scalars["val/loss"][0].first, 1);
  EXPECT_EQ(scalars["val/loss"][1].first, 3);
  EXPECT_EQ(scalars["val/loss"][1].second, static_cast<float>(summary.final_val_loss));
  // A second run in the same second gets its own folder.
  absl::StatusOr<RunDir> second = RunDir::Create(work, "default", 1700000000);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->path(), dir->path() + "_1");
}

TEST(RunFolder, ResumeAutoFindsTheLastRunsCheckpointBesideTheRunFolders) {
  const std::string work = TempDir() + "/resume_runs";
  std::filesystem::remove_all(work);
  std::vector<std::string> first = kTiny;
  first.insert(first.end(), {"train.steps=6", "checkpoint.save_every=3", "checkpoint.keep_last=1",
                             "work_dir=" + work, "distributed.world_size=2"});
  absl::StatusOr<RunConfig> a = LoadConfig("examples/configs/default.json", first);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(StartRun(&*a, "", 1700000000).ok());
  TrainSummary sa;
  for (const absl::Status& x : RunRanks(2, [&](Communicator& comm) { return RunTraining(a->train, comm, &sa); })) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_EQ(sa.last_checkpoint, work + "/default/step-000006");
  // A later run of the experiment, in its own folder, resumes where the first stopped.
  std::vector<std::string> second = first;
  second.insert(second.end(), {"train.steps=8", "checkpoint.resume=auto"});
  absl::StatusOr<RunConfig> b = LoadConfig("examples/configs/default.json", second);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<RunDir> dir = StartRun(&*b, "", 1700000060);
  ASSERT_TRUE(dir.ok());
  TrainSummary sb;
  for (const absl::Status& x : RunRanks(2, [&](Communicator& comm) { return RunTraining(b->train, comm, &sb); })) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_EQ(sb.start_step, 6);
  EXPECT_EQ(sb.losses.size(), 2u);
  std::vector<std::string> rows = absl::StrSplit(ReadFile(dir->metrics_path()), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(absl::StartsWith(rows[1], "6,")) << rows[1];
}

TEST(RunFolder, TensorboardFalseWritesNoEventFile) {
  const std::string work = TempDir() + "/runs_no_tb";
  std::filesystem::remove_all(work);
  std::vector<std::string> keys = kTiny;
  keys.insert(keys.end(), {"train.tensorboard=false", "train.steps=2", "distributed.world_size=2", "work_dir=" + work});
  absl::StatusOr<RunConfig> c = LoadConfig("examples/configs/default.json", keys);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<RunDir> dir = StartRun(&*c, "", 1700000000);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(c->train.tensorboard_dir, "");
  for (const absl::Status& x : RunRanks(2, [&](Communicator& comm) { return RunTraining(c->train, comm); })) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_TRUE(std::filesystem::exists(dir->metrics_path()));
  EXPECT_FALSE(std::filesystem::exists(dir->tensorboard_dir()));
}

TEST(RunFolder, MetricsWriterChecksItsRows) {
  absl::StatusOr<MetricsWriter> w = MetricsWriter::Open(TempDir() + "/m.csv", 2);
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->Write({.step = 0, .peak_bytes = {1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 2 peak_bytes values, found 1")));
  EXPECT_THAT(MetricsWriter::Open("/no/such/dir/m.csv", 1), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("/no/such/dir/m.csv")));
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

namespace zeroshard {
namespace {

// ============================================================ model.type "resnet"

TEST(ResNetConfig, DefaultsAreTrainResnets) {
  const RunConfig c = MustParse(R"({"model": {"type": "resnet"}})");
  EXPECT_EQ(c.model_type, "resnet");
  const ResNetTrainOptions want;  // train_resnet's flag defaults
  const ResNetTrainOptions& r = c.resnet;
  EXPECT_EQ(r.model.widths, want.model.widths);
  EXPECT_EQ(r.model.depths, want.model.depths);
  EXPECT_EQ(r.model.num_classes, 10);
  EXPECT_EQ(r.model.stem, nn::ResNetStem::kCifar);
  EXPECT_EQ(r.data.image_size, 32);
  EXPECT_EQ(r.data.train_size, 20000);
  EXPECT_EQ(r.data.val_size, 2000);
  EXPECT_EQ(r.steps, 300);
  EXPECT_EQ(r.batch_size, 32);
  EXPECT_EQ(r.optimizer.kind, optim::OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(r.optimizer.weight_decay, 5e-4);
  EXPECT_DOUBLE_EQ(r.optimizer.sgd.momentum, 0.9);
  EXPECT_TRUE(r.optimizer.sgd.nesterov);
  EXPECT_EQ(r.lr.kind, optim::LrScheduleKind::kCosine);
  EXPECT_DOUBLE_EQ(r.lr.lr, 0.05);
  EXPECT_DOUBLE_EQ(r.lr.min_lr, 5e-4);
  EXPECT_EQ(r.lr.warmup_steps, 20);
  EXPECT_EQ(r.lr.decay_steps, 300);
  EXPECT_EQ(r.log_every, 25);
  EXPECT_EQ(r.eval_every, 100);
  EXPECT_TRUE(r.average_bn_stats);
  EXPECT_EQ(r.sharding.strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(r.sharding.wrap.kind, WrapPolicy::Kind::kByType);
  EXPECT_EQ(r.sharding.wrap.types, std::set<std::string>{"BasicBlock"});
  // A GPT config is unchanged, and says its type.
  EXPECT_EQ(MustParse("").model_type, "gpt");
  EXPECT_THAT(ResolvedConfigJson(MustParse("")), HasSubstr("\"type\": \"gpt\""));
}

TEST(ResNetConfig, EveryKeyLandsInResNetTrainOptions) {
  const RunConfig c = MustParse(R"({
    "distributed": {"world_size": 4},
    "model": {"type": "ResNet", "widths": [8, 16, 32], "depths": [2, 1, 3], "num_classes": 12,
              "stem": "imagenet", "zero_init_residual": true},
    "data": {"image_size": 24, "train_size": 1000, "val_size": 50, "seed": 7, "noise": 0.25},
    "train": {"steps": 40, "batch_size": 8, "seed": 9, "log_every": 3, "eval_every": 20, "eval_batch": 25,
              "average_bn_stats": false, "threads_per_rank": 2, "tensorboard": false},
    "optimizer": {"type": "adamw", "lr": 0.002, "weight_decay": 0.01, "betas": [0.8, 0.9], "eps": 1e-6,
                  "momentum": 0.5, "dampening": 0.1, "nesterov": false},
    "lr_schedule": {"type": "linear", "min_lr": 1e-4, "warmup_steps": 5, "decay_steps": 30},
    "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 2,
                 "auto_wrap_policy": {"min_num_params": 1000}, "forward_prefetch": true,
                 "backward_prefetch": "BACKWARD_POST", "limit_all_gathers": 3, "sync_module_states": true,
                 "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "f32"}},
    "checkpoint": {"save_weights": "out/resnet.safetensors"}
  })");
  const ResNetTrainOptions& r = c.resnet;
  EXPECT_EQ(c.model_type, "resnet");
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(r.model.widths, (std::vector<int64_t>{8, 16, 32}));
  EXPECT_EQ(r.model.depths, (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(r.model.num_classes, 12);
  EXPECT_EQ(r.model.stem, nn::ResNetStem::kImageNet);
  EXPECT_TRUE(r.model.zero_init_residual);
  EXPECT_EQ(r.data.image_size, 24);
  EXPECT_EQ(r.data.train_size, 1000);
  EXPECT_EQ(r.data.val_size, 50);
  EXPECT_EQ(r.data.seed, 7u);
  EXPECT_FLOAT_EQ(r.data.noise, 0.25f);
  EXPECT_EQ(r.steps, 40);
  EXPECT_EQ(r.batch_size, 8);
  EXPECT_EQ(r.seed, 9u);
  EXPECT_EQ(r.log_every, 3);
  EXPECT_EQ(r.eval_every, 20);
  EXPECT_EQ(r.eval_batch, 25);
  EXPECT_FALSE(r.average_bn_stats);
  EXPECT_EQ(r.threads_per_rank, 2);
  EXPECT_FALSE(r.tensorboard);
  EXPECT_EQ(r.optimizer.kind, optim::OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 0.002);
  EXPECT_DOUBLE_EQ(r.lr.lr, 0.002);
  EXPECT_DOUBLE_EQ(r.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(r.optimizer.adamw.beta1, 0.8);
  EXPECT_DOUBLE_EQ(r.optimizer.adamw.beta2, 0.9);
  EXPECT_DOUBLE_EQ(r.optimizer.adamw.eps, 1e-6);
  EXPECT_DOUBLE_EQ(r.optimizer.sgd.momentum, 0.5);
  EXPECT_DOUBLE_EQ(r.optimizer.sgd.dampening, 0.1);
  EXPECT_FALSE(r.optimizer.sgd.nesterov);
  EXPECT_EQ(r.lr.kind, optim::LrScheduleKind::kLinear);
  EXPECT_DOUBLE_EQ(r.lr.min_lr, 1e-4);
  EXPECT_EQ(r.lr.warmup_steps, 5);
  EXPECT_EQ(r.lr.decay_steps, 30);
  EXPECT_EQ(r.sharding.strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(r.sharding.hybrid_shard_size, 2);
  EXPECT_EQ(r.sharding.wrap.kind, WrapPolicy::Kind::kBySize);
  EXPECT_EQ(r.sharding.wrap.min_num_params, 1000);
  EXPECT_TRUE(r.sharding.forward_prefetch);
  EXPECT_EQ(r.sharding.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_EQ(r.sharding.limit_all_gathers, 3);
  EXPECT_TRUE(r.sharding.sync_module_states);
  EXPECT_EQ(r.sharding.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(r.save, "out/resnet.safetensors");
  // decay_steps null: the run's steps; zero_stage names the strategy.
  const RunConfig z = MustParse(R"({"model": {"type": "resnet"}, "train": {"steps": 50},
                                    "strategy": {"zero_stage": 2}})");
  EXPECT_EQ(z.resnet.lr.decay_steps, 50);
  EXPECT_EQ(z.resnet.sharding.strategy, ShardingStrategy::kShardGradOp);
  // --set converts by the ResNet's types too; flags that mean the same map the same.
  const RunConfig o = MustParse(R"({"model": {"type": "resnet"}})",
                                {"model.stem=imagenet", "model.widths=[4, 8]", "model.depths=[1, 1]",
                                 "train.average_bn_stats=off", "data.image_size=16"});
  EXPECT_EQ(o.resnet.model.stem, nn::ResNetStem::kImageNet);
  EXPECT_EQ(o.resnet.model.widths, (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(o.resnet.average_bn_stats);
  EXPECT_EQ(o.resnet.data.image_size, 16);
  absl::StatusOr<std::vector<std::string>> flags =
      OverridesFromFlags({{"steps", "12"}, {"batch_size", "4"}, {"lr", "0.1"}, {"sharding_strategy", "NO_SHARD"}});
  ASSERT_TRUE(flags.ok()) << flags.status();
  const RunConfig f = MustParse(R"({"model": {"type": "resnet"}})", *flags);
  EXPECT_EQ(f.resnet.steps, 12);
  EXPECT_EQ(f.resnet.batch_size, 4);
  EXPECT_DOUBLE_EQ(f.resnet.optimizer.lr, 0.1);
  EXPECT_EQ(f.resnet.sharding.strategy, ShardingStrategy::kNoShard);
}

TEST(ResNetConfig, KeysOfTheOtherModelTypeAreErrorsAllAtOnce) {
  const std::string m = Problems(R"({
    "model": {"type": "resnet", "n_layer": 2, "vocab_size": 256},
    "data": {"path": "data/tinyshakespeare.txt"},
    "train": {"grad_clip": 1.0, "eval_iters": 5},
    "strategy": {"activation_checkpointing": ["Block"], "state_dict_type": "full"},
    "checkpoint": {"resume": "auto"},
    "sample": {"tokens": 10},
    "deepspeed": {"zero_optimization": {"stage": 3}}
  })");
  EXPECT_THAT(m, HasSubstr("10 problems"));
  for (const char* path : {"model.n_layer", "model.vocab_size", "data.path", "train.grad_clip", "train.eval_iters",
                           "strategy.activation_checkpointing", "strategy.state_dict_type", "checkpoint.resume",
                           "sample", "deepspeed"}) {
    EXPECT_THAT(m, HasSubstr(absl::StrCat("\n  ", path, ": a key of model.type \"gpt\" only: expected it unset with "
                                          "model.type \"resnet\", found ")));
  }
  EXPECT_THAT(m, HasSubstr("model.n_layer: a key of model.type \"gpt\" only: expected it unset with model.type "
                           "\"resnet\", found number 2"));
  EXPECT_THAT(m, HasSubstr("data.path: a key of model.type \"gpt\" only: expected it unset with model.type "
                           "\"resnet\", found string \"data/tinyshakespeare.txt\""));
  EXPECT_THAT(m, HasSubstr("sample: a key of model.type \"gpt\" only: expected it unset with model.type "
                           "\"resnet\", found an object"));
  // The same for the GPT: the ResNet's keys.
  const std::string g = Problems(R"({
    "model": {"widths": [8, 16], "stem": "cifar"},
    "data": {"image_size": 16, "seed": 3},
    "train": {"eval_batch": 10, "average_bn_stats": true}
  })");
  EXPECT_THAT(g, HasSubstr("6 problems"));
  for (const char* path : {"model.widths", "model.stem", "data.image_size", "data.seed", "train.eval_batch",
                           "train.average_bn_stats"}) {
    EXPECT_THAT(g, HasSubstr(absl::StrCat("\n  ", path, ": a key of model.type \"resnet\" only: expected it unset "
                                          "with model.type \"gpt\", found ")));
  }
  // A flag of the GPT's model says so too.
  absl::StatusOr<std::vector<std::string>> flags = OverridesFromFlags({{"n_layer", "2"}});
  ASSERT_TRUE(flags.ok());
  EXPECT_THAT(Problems(R"({"model": {"type": "resnet"}})", *flags),
              HasSubstr("model.n_layer: a key of model.type \"gpt\" only"));
}

TEST(ResNetConfig, BadValuesAreReportedWithTheirPaths) {
  const std::string m = Problems(R"({
    "model": {"type": "resnet", "widths": [16, 0], "depths": [1], "num_classes": 5, "stem": "imagnet",
              "widht": 3},
    "data": {"image_size": 4, "noise": 1.5, "val_size": -1},
    "train": {"steps": 0, "average_bn_stats": "yes", "eval_batch": 0},
    "optimizer": {"nesterov": true, "momentum": 0},
    "strategy": {"auto_wrap_policy": ["Block"]}
  })");
  EXPECT_THAT(m, HasSubstr("model.widths: expected a non-empty array of integers >= 1, found array [16,0]"));
  EXPECT_THAT(m, HasSubstr("model.num_classes: expected an integer >= 10, found 5"));
  EXPECT_THAT(m, HasSubstr("model.stem: expected one of \"cifar\", \"imagenet\", found string \"imagnet\" "
                           "(did you mean \"imagenet\"?)"));
  EXPECT_THAT(m, HasSubstr("model.widht: unknown key (did you mean \"widths\"?)"));
  EXPECT_THAT(m, HasSubstr("data.image_size: expected an integer >= 8, found 4"));
  EXPECT_THAT(m, HasSubstr("data.noise: expected a number in [0, 1), found 1.5"));
  EXPECT_THAT(m, HasSubstr("data.val_size: expected an integer >= 0, found -1"));
  EXPECT_THAT(m, HasSubstr("train.steps: expected an integer >= 1, found 0"));
  EXPECT_THAT(m, HasSubstr("train.average_bn_stats: expected true or false, found string \"yes\""));
  EXPECT_THAT(m, HasSubstr("train.eval_batch: expected an integer >= 1, found 0"));
  EXPECT_THAT(m, HasSubstr("optimizer.nesterov: Nesterov needs momentum > 0 and dampening 0"));
  EXPECT_THAT(m, HasSubstr("strategy.auto_wrap_policy: expected one of \"BasicBlock\", \"Conv2d\", "
                           "\"BatchNorm2d\", \"Linear\", found string \"Block\""));
  EXPECT_THAT(Problems(R"({"model": {"type": "resnet", "widths": [8, 16, 32], "depths": [1, 1]}})"),
              HasSubstr("model.depths: expected as many entries as model.widths (3), found 2"));
  EXPECT_THAT(Problems(R"({"model": {"type": "vit"}})"),
              HasSubstr("model.type: expected one of \"gpt\", \"resnet\", found string \"vit\""));
  EXPECT_THAT(Problems(R"({"model": {"type": "resnet"}, "strategy": {"sharding_strategy": "HYBRID_SHARD",
                                                                    "hybrid_shard_size": 3}})"),
              HasSubstr("strategy.hybrid_shard_size: HYBRID_SHARD needs a shard group size >= 1 that divides the "
                        "world size 4"));
}

TEST(ResNetConfig, ResolvedConfigReadsBackToTheSameRun) {
  absl::StatusOr<RunConfig> c = LoadConfig("examples/configs/resnet.json",
                                           {"model.stem=imagenet", "data.noise=0.3", "train.eval_batch=50",
                                            "strategy.mixed_precision.param_dtype=bf16",
                                            "checkpoint.save_weights=w.safetensors"});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string resolved = ResolvedConfigJson(*c);
  EXPECT_THAT(resolved, AllOf(HasSubstr("\"type\": \"resnet\""), HasSubstr("\"noise\": 0.3\n"),
                              HasSubstr("\"stem\": \"imagenet\""), Not(HasSubstr("n_layer")),
                              Not(HasSubstr("loss_scaler")), Not(HasSubstr("activation_checkpointing"))));
  const RunConfig back = MustParse(resolved);
  EXPECT_EQ(ResolvedConfigJson(back), resolved);
  EXPECT_EQ(back.model_type, "resnet");
  EXPECT_EQ(back.resnet.model.stem, nn::ResNetStem::kImageNet);
  EXPECT_FLOAT_EQ(back.resnet.data.noise, 0.3f);
  EXPECT_EQ(back.resnet.eval_batch, 50);
  EXPECT_EQ(back.resnet.sharding.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(back.resnet.save, "w.safetensors");
  EXPECT_EQ(back.resnet.ToString(), c->resnet.ToString());
  EXPECT_EQ(back.world_size, 2);
  // Its resolved form's every leaf is a key the ResNet reads.
  std::vector<std::string> leaves;
  Leaves(nlohmann::ordered_json::parse(resolved), "", &leaves);
  EXPECT_EQ(std::count(leaves.begin(), leaves.end(), "model.widths"), 1);
  EXPECT_EQ(std::count(leaves.begin(), leaves.end(), "train.average_bn_stats"), 1);
}

TEST(ResNetConfig, ReadyConfigTrainsThroughTheMainProgramsEntry) {
  // examples/configs/resnet.json shrunk as train_resnet_test's small run, into a run folder.
  absl::StatusOr<RunConfig> c = LoadConfig(
      "examples/configs/resnet.json",
      {"model.widths=[8, 16]", "model.depths=[1, 1]", "data.image_size=16", "data.train_size=5000",
       "data.val_size=300", "train.batch_size=16", "train.steps=150", "lr_schedule.warmup_steps=10",
       "train.eval_every=0", "train.log_every=50", "train.threads_per_rank=1",
       absl::StrCat("work_dir=", TempDir(), "/resnet_runs")});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->world_size, 2);
  EXPECT_EQ(c->resnet.sharding.strategy, ShardingStrategy::kFullShard);
  absl::StatusOr<RunDir> dir = StartRun(&*c, "config: examples/configs/resnet.json\n", 1700000000);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<ResNetTrainResult> r = RunResNetConfig(*c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->losses.size(), 150u);
  double last = 0;
  for (size_t i = 140; i < 150; ++i) last += r->losses[i] / 10;
  EXPECT_GT(r->losses[0], 2.0);         // about ln 10 at the start
  EXPECT_LT(last, r->losses[0] - 0.8);  // as train_resnet_test: about 1.0 at the end
  EXPECT_GT(r->val_accuracy, 0.35);     // chance 0.1

  // The run folder: the resolved config (reads back), the log, metrics.csv.
  const std::string resolved = ReadFile(dir->config_path());
  EXPECT_EQ(resolved, ResolvedConfigJson(*c));
  EXPECT_EQ(ResolvedConfigJson(MustParse(resolved)), resolved);
  const std::string log = ReadFile(dir->log_path());
  EXPECT_THAT(log, AllOf(HasSubstr("config: examples/configs/resnet.json\n"), HasSubstr("train_resnet: ResNet("),
                         HasSubstr("step    0 loss "), HasSubstr("eval step  150 val loss"), HasSubstr("done: ")));
  std::vector<std::string> rows = absl::StrSplit(ReadFile(dir->metrics_path()), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 151u);
  EXPECT_EQ(rows[0], "step,loss,lr,images_per_s,ms_per_step,val_loss,val_accuracy");
  const std::vector<std::string> first = absl::StrSplit(rows[1], ',');
  ASSERT_EQ(first.size(), 7u);
  EXPECT_EQ(first[0], "0");
  EXPECT_EQ(first[5], "");
  const std::vector<std::string> end = absl::StrSplit(rows[150], ',');
  ASSERT_EQ(end.size(), 7u);
  EXPECT_EQ(end[0], "149");
  EXPECT_NEAR(std::stod(end[6]), r->val_accuracy, 1e-6);
  // tensorboard/: the same scalars, one event per tag and step.
  ASSERT_EQ(c->resnet.tensorboard_dir, dir->tensorboard_dir());
  std::vector<std::string> event_files;
  for (const auto& e : std::filesystem::directory_iterator(dir->tensorboard_dir())) {
    event_files.push_back(e.path().string());
  }
  ASSERT_EQ(event_files.size(), 1u);
  absl::StatusOr<std::vector<testing::TestEvent>> events = testing::ReadEventFile(event_files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_FALSE(events->empty());
  EXPECT_EQ((*events)[0].file_version, "brain.Event:2");
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;  // tag -> (step, value)
  for (size_t i = 1; i < events->size(); ++i) {
    ASSERT_EQ((*events)[i].values.size(), 1u);
    scalars[(*events)[i].values[0].first].emplace_back((*events)[i].step, (*events)[i].values[0].second);
  }
  std::vector<std::string> tags;
  for (const auto& [tag, v] : scalars) tags.push_back(tag);
  EXPECT_THAT(tags, ElementsAre("train/images_per_s", "train/loss", "train/lr", "train/ms_per_step", "val/accuracy",
                                "val/loss"));
  ASSERT_EQ(scalars["train/loss"].size(), 150u);
  for (int i = 0; i < 150; ++i) {
    EXPECT_EQ(scalars["train/loss"][i].first, i);
    EXPECT_EQ(scalars["train/loss"][i].second, static_cast<float>(r->losses[i]));
  }
  ASSERT_EQ(scalars["val/accuracy"].size(), 1u);  // eval_every 0: at the end only
  EXPECT_EQ(scalars["val/accuracy"][0].first, 149);
  EXPECT_EQ(scalars["val/accuracy"][0].second, static_cast<float>(r->val_accuracy));
}

}  // namespace
}  // namespace zeroshard
