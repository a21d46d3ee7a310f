// The main job's config with a "deepspeed" block (Note [DeepSpeed mapping] in
// train/deepspeed_config.cc): ZeRO stages name strategies, every key lands in
// its TrainOptions field, the command line wins over the block, NVMe offload
// and aio, the scheduler block, and a DeepSpeed config file at the top level.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/train/config.h"
#include "zeroshard/tests/train/config_testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::ExpectFields;
using testing::MustParse;
using testing::Problems;
using testing::TempDir;

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
  ExpectFields(c, {
      {"train.batch_size", 3}, {"train.grad_accum_steps", 4}, {"train_batch_size", 48}, {"train.grad_clip", 0.7},
      {"train.log_every", 7}, {"train.sharding.strategy", ShardingStrategy::kFullShard},
      {"train.sharding.offload.params", true}, {"train.sharding.offload.grads", true},
      {"train.sharding.offload.optimizer", true}, {"train.sharding.forward_prefetch", false},
      {"train.sharding.backward_prefetch", BackwardPrefetch::kNone},
      {"train.sharding.mixed_precision.param_dtype", DType::kF16},
      {"train.sharding.mixed_precision.buffer_dtype", DType::kF16},
      {"train.sharding.mixed_precision.reduce_dtype", DType::kF32},  // communication_data_type
      {"train.loss_scaling", true}, {"train.loss_scaler.initial_scale_power", 10},
      {"train.loss_scaler.scale_window", 50}, {"train.loss_scaler.hysteresis", 4},
      {"train.loss_scaler.consecutive_hysteresis", true}, {"train.loss_scaler.min_scale", 0.25},
      {"train.optimizer.kind", optim::OptimizerKind::kAdam},  // adam_w_mode false
      {"train.optimizer.lr", 0.002}, {"train.lr.lr", 0.002}, {"train.optimizer.adamw.beta1", 0.85},
      {"train.optimizer.adamw.beta2", 0.98}, {"train.optimizer.adamw.eps", 1e-7},
      {"train.optimizer.weight_decay", 0.05},
  });
  EXPECT_THAT(c.notes.back(), AllOf(HasSubstr("without effect"), HasSubstr("reduce_bucket_size"),
                                    HasSubstr("pin_memory")));
}

TEST(Config, DeepSpeedBf16AdamAndOffloadOptimizer) {
  ExpectFields(MustParse(R"({"deepspeed": {"bf16": {"enabled": true}, "optimizer": {"type": "Adam"},
                                           "zero_optimization": {"stage": 2, "overlap_comm": true,
                                                                 "offload_optimizer": {"device": "cpu"}}}})"),
               {
                   {"train.sharding.mixed_precision.param_dtype", DType::kBF16},
                   // DeepSpeed's default: the model's dtype
                   {"train.sharding.mixed_precision.reduce_dtype", DType::kBF16},
                   {"train.loss_scaling", false},
                   // DeepSpeed's Adam is AdamW by default
                   {"train.optimizer.kind", optim::OptimizerKind::kAdamW},
                   {"train.sharding.forward_prefetch", true},
                   {"train.sharding.backward_prefetch", BackwardPrefetch::kBackwardPre},
                   {"train.sharding.offload.params", false},
                   {"train.sharding.offload.grads", true},
                   {"train.sharding.offload.optimizer", true},
               });
  EXPECT_EQ(MustParse(R"({"deepspeed": {"optimizer": {"type": "sgd", "params": {"momentum": 0.3,
                          "nesterov": true, "dampening": 0}}}})").train.optimizer.sgd.momentum, 0.3);
}

TEST(Config, DeepSpeedZeroPlusPlusKeysChooseTheCommHook) {
  auto hook = [](const std::string& zero) {
    return MustParse(absl::StrCat(R"({"deepspeed": {"zero_optimization": {"stage": 3, )", zero, "}}}"))
        .train.sharding.comm_hook;
  };
  EXPECT_EQ(hook(R"("zero_quantized_weights": true)").name, "qwz");
  EXPECT_EQ(hook(R"("zero_quantized_gradients": true)").name, "qgz");
  EXPECT_EQ(hook(R"("zero_hpz_partition_size": 8)").name, "hpz");
  EXPECT_EQ(hook(R"("zero_hpz_partition_size": 8)").group_size, 8);
  EXPECT_EQ(hook(R"("zero_hpz_partition_size": 1)").name, "none");
  const CommHookOptions all = hook(
      R"("zero_quantized_weights": true, "zero_quantized_gradients": true, "zero_hpz_partition_size": 4)");
  EXPECT_EQ(all.name, "zeropp");
  EXPECT_EQ(all.group_size, 4);
  EXPECT_THAT(Problems(R"({"deepspeed": {"zero_optimization": {"stage": 3, "zero_quantized_weights": true,
                                                                  "zero_hpz_partition_size": 4}}})"),
              HasSubstr("expected one of them alone or all three"));
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
// ============================================================ NVMe offload

TEST(Config, DeepSpeedNvmeOffloadAndAio) {
  const RunConfig c = MustParse(R"({"deepspeed": {
      "aio": {"block_size": 131072, "queue_depth": 4, "thread_count": 3, "single_submit": true, "overlap_events": false},
      "zero_optimization": {"stage": 3,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 2, "pin_memory": true,
                              "pipeline_read": false, "fast_init": false},
        "offload_param": {"device": "nvme", "nvme_path": "/other_nvme", "buffer_count": 7, "buffer_size": 1e8}}}})");
  ExpectFields(c, {
      {"train.sharding.offload.nvme_optimizer", true}, {"train.sharding.offload.nvme_params", true},
      // not host offload
      {"train.sharding.offload.params", false}, {"train.sharding.offload.grads", false},
      {"train.sharding.offload.optimizer", false},
      {"train.sharding.offload.optimizer_nvme.path", "/local_nvme"},
      {"train.sharding.offload.optimizer_nvme.buffer_count", 2},
      {"train.sharding.offload.optimizer_nvme.pin_memory", true},
      {"train.sharding.offload.param_nvme.path", "/other_nvme"},
      {"train.sharding.offload.param_nvme.buffer_count", 7},
      {"train.sharding.offload.param_nvme.max_in_cpu", 1000000000},  // DeepSpeed's default
      {"train.sharding.offload.optimizer_nvme.read_ahead", false},    // pipeline_read false
      {"train.sharding.offload.optimizer_nvme.write_behind", true},   // pipeline_write absent: on here
      {"train.sharding.offload.aio.block_size", 131072}, {"train.sharding.offload.aio.queue_depth", 4},
      {"train.sharding.offload.aio.thread_count", 3}, {"train.sharding.offload.aio.single_submit", true},
      {"train.sharding.offload.aio.overlap_events", false},
  });
  bool noted = false;
  for (const std::string& n : c.notes) noted = noted || absl::StrContains(n, "offload_param.buffer_size");
  EXPECT_TRUE(noted);
  // CPU for one, NVMe for the other.
  ExpectFields(MustParse(R"({"deepspeed": {"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}, "offload_param": {"device": "cpu"}}}})"),
               {{"train.sharding.offload.nvme_optimizer", true}, {"train.sharding.offload.params", true},
                {"train.sharding.offload.nvme_params", false}});
}

// ============================================================ the scheduler, a DeepSpeed file

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


}  // namespace
}  // namespace zeroshard
