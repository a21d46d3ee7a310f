// model.type "resnet" (the vision job): the defaults are train_resnet's, every
// key lands in ResNetTrainOptions, keys of the other model type and bad values
// are reported with their paths, and the resolved form reads back to the same
// run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "zeroshard/train/config.h"
#include "zeroshard/tests/train/config_testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ExpectFields;
using testing::MustParse;
using testing::Problems;

TEST(ResNetConfig, DefaultsAreTrainResnets) {
  const RunConfig c = MustParse(R"({"model": {"type": "resnet"}})");
  const ResNetTrainOptions want;  // train_resnet's flag defaults
  ExpectFields(c, {
      {"model_type", "resnet"},
      {"resnet.model.widths", want.model.widths}, {"resnet.model.depths", want.model.depths},
      {"resnet.model.num_classes", 10}, {"resnet.model.stem", nn::ResNetStem::kCifar},
      {"resnet.data.image_size", 32}, {"resnet.data.train_size", 20000}, {"resnet.data.val_size", 2000},
      {"resnet.steps", 300}, {"resnet.batch_size", 32},
      {"resnet.optimizer.kind", optim::OptimizerKind::kSgd}, {"resnet.optimizer.lr", 0.05},
      {"resnet.optimizer.weight_decay", 5e-4}, {"resnet.optimizer.sgd.momentum", 0.9},
      {"resnet.optimizer.sgd.nesterov", true},
      {"resnet.lr.kind", optim::LrScheduleKind::kCosine}, {"resnet.lr.lr", 0.05}, {"resnet.lr.min_lr", 5e-4},
      {"resnet.lr.warmup_steps", 20}, {"resnet.lr.decay_steps", 300},
      {"resnet.log_every", 25}, {"resnet.eval_every", 100}, {"resnet.average_bn_stats", true},
      {"resnet.sharding.strategy", ShardingStrategy::kFullShard},
      {"resnet.sharding.wrap.kind", WrapPolicy::Kind::kByType},
      {"resnet.sharding.wrap.types", std::set<std::string>{"BasicBlock"}},
  });
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
  ExpectFields(c, {
      {"model_type", "resnet"}, {"world_size", 4},
      {"resnet.model.widths", std::vector<int64_t>{8, 16, 32}}, {"resnet.model.depths", std::vector<int64_t>{2, 1, 3}},
      {"resnet.model.num_classes", 12}, {"resnet.model.stem", nn::ResNetStem::kImageNet},
      {"resnet.model.zero_init_residual", true},
      {"resnet.data.image_size", 24}, {"resnet.data.train_size", 1000}, {"resnet.data.val_size", 50},
      {"resnet.data.seed", 7}, {"resnet.data.noise", 0.25f},
      {"resnet.steps", 40}, {"resnet.batch_size", 8}, {"resnet.seed", 9}, {"resnet.log_every", 3},
      {"resnet.eval_every", 20}, {"resnet.eval_batch", 25}, {"resnet.average_bn_stats", false},
      {"resnet.threads_per_rank", 2}, {"resnet.tensorboard", false},
      {"resnet.optimizer.kind", optim::OptimizerKind::kAdamW}, {"resnet.optimizer.lr", 0.002},
      {"resnet.lr.lr", 0.002}, {"resnet.optimizer.weight_decay", 0.01}, {"resnet.optimizer.adamw.beta1", 0.8},
      {"resnet.optimizer.adamw.beta2", 0.9}, {"resnet.optimizer.adamw.eps", 1e-6},
      {"resnet.optimizer.sgd.momentum", 0.5}, {"resnet.optimizer.sgd.dampening", 0.1},
      {"resnet.optimizer.sgd.nesterov", false},
      {"resnet.lr.kind", optim::LrScheduleKind::kLinear}, {"resnet.lr.min_lr", 1e-4},
      {"resnet.lr.warmup_steps", 5}, {"resnet.lr.decay_steps", 30},
      {"resnet.sharding.strategy", ShardingStrategy::kHybridShard}, {"resnet.sharding.hybrid_shard_size", 2},
      {"resnet.sharding.wrap.kind", WrapPolicy::Kind::kBySize}, {"resnet.sharding.wrap.min_num_params", 1000},
      {"resnet.sharding.forward_prefetch", true},
      {"resnet.sharding.backward_prefetch", BackwardPrefetch::kBackwardPost},
      {"resnet.sharding.limit_all_gathers", 3}, {"resnet.sharding.sync_module_states", true},
      {"resnet.sharding.mixed_precision.param_dtype", DType::kBF16},
      {"resnet.save", "out/resnet.safetensors"},
  });
  // decay_steps null: the run's steps; zero_stage names the strategy.
  ExpectFields(MustParse(R"({"model": {"type": "resnet"}, "train": {"steps": 50}, "strategy": {"zero_stage": 2}})"),
               {{"resnet.lr.decay_steps", 50}, {"resnet.sharding.strategy", ShardingStrategy::kShardGradOp}});
  // --set converts by the ResNet's types too; flags that mean the same map the same.
  ExpectFields(MustParse(R"({"model": {"type": "resnet"}})",
                         {"model.stem=imagenet", "model.widths=[4, 8]", "model.depths=[1, 1]",
                          "train.average_bn_stats=off", "data.image_size=16"}),
               {{"resnet.model.stem", nn::ResNetStem::kImageNet},
                {"resnet.model.widths", std::vector<int64_t>{4, 8}},
                {"resnet.average_bn_stats", false},
                {"resnet.data.image_size", 16}});
  absl::StatusOr<std::vector<std::string>> flags =
      OverridesFromFlags({{"steps", "12"}, {"batch_size", "4"}, {"lr", "0.1"}, {"sharding_strategy", "NO_SHARD"}});
  ASSERT_TRUE(flags.ok()) << flags.status();
  ExpectFields(MustParse(R"({"model": {"type": "resnet"}})", *flags),
               {{"resnet.steps", 12}, {"resnet.batch_size", 4}, {"resnet.optimizer.lr", 0.1},
                {"resnet.sharding.strategy", ShardingStrategy::kNoShard}});
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
  for (const char* want : {
           "model.widths: expected a non-empty array of integers >= 1, found array [16,0]",
           "model.num_classes: expected an integer >= 10, found 5",
           "model.stem: expected one of \"cifar\", \"imagenet\", found string \"imagnet\" (did you mean \"imagenet\"?)",
           "model.widht: unknown key (did you mean \"widths\"?)",
           "data.image_size: expected an integer >= 8, found 4",
           "data.noise: expected a number in [0, 1), found 1.5",
           "data.val_size: expected an integer >= 0, found -1",
           "train.steps: expected an integer >= 1, found 0",
           "train.average_bn_stats: expected true or false, found string \"yes\"",
           "train.eval_batch: expected an integer >= 1, found 0",
           "optimizer.nesterov: Nesterov needs momentum > 0 and dampening 0",
           "strategy.auto_wrap_policy: expected one of \"BasicBlock\", \"Conv2d\", \"BatchNorm2d\", \"Linear\", "
           "found string \"Block\"",
       }) {
    EXPECT_THAT(m, HasSubstr(want));
  }
  testing::ExpectProblems({
      {R"({"model": {"type": "resnet", "widths": [8, 16, 32], "depths": [1, 1]}})",
       "model.depths: expected as many entries as model.widths (3), found 2"},
      {R"({"model": {"type": "vit"}})", "model.type: expected one of \"gpt\", \"llama\", \"resnet\", found string \"vit\""},
      {R"({"model": {"type": "resnet"}, "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 3}})",
       "strategy.hybrid_shard_size: HYBRID_SHARD needs a shard group size that divides the world size 4"},
  });
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
  testing::Leaves(nlohmann::ordered_json::parse(resolved), "", &leaves);
  EXPECT_EQ(std::count(leaves.begin(), leaves.end(), "model.widths"), 1);
  EXPECT_EQ(std::count(leaves.begin(), leaves.end(), "train.average_bn_stats"), 1);
}

}  // namespace
}  // namespace zeroshard
