// The config's problems: every kind reported with its JSON path and what was
// expected (a misspelt key or choice with the closest valid one), all of a
// config's problems at once, one per line. Most kinds are rows of one table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "zeroshard/train/config.h"
#include "zeroshard/tests/train/config_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::ExpectProblems;
using testing::MustParse;
using testing::Problems;
using testing::StatusIs;

TEST(ConfigProblems, UnknownKeyGetsTheClosestValidKey) {
  EXPECT_EQ(Problems(R"({"strategy": {"sharding_stratgy": "FULL_SHARD"}})"),
            "config test.json: 1 problem\n"
            "  strategy.sharding_stratgy: unknown key (did you mean \"sharding_strategy\"?)");
  ExpectProblems({
      {R"({"modle": {}})", "modle: unknown key (did you mean \"model\"?)"},
      {R"({"deepspeed": {"zero_optimization": {"stgae": 3}}})",
       "deepspeed.zero_optimization.stgae: unknown key (did you mean \"stage\"?)"},
  });
}

// A kind of problem: configs that have it and a part of each one's message.
struct ProblemKind {
  std::string name;
  std::vector<testing::ProblemCase> cases;
};

void PrintTo(const ProblemKind& k, std::ostream* os) { *os << k.name; }

std::vector<ProblemKind> ProblemKinds() {
  return {
      {"UnknownKeyThatBelongsElsewhereSaysWhere",
       {{R"({"train": {"lr": 0.1}})", "train.lr: unknown key (it belongs in optimizer.lr)"}}},
      {"UnknownKeyWithNothingCloseListsTheValidKeys",
       {{R"({"sample": {"nucleus": 0.9}})",
         "sample.nucleus: unknown key; expected one of \"tokens\", \"temperature\", \"top_k\""}}},
      {"WrongType",
       {{R"({"train": {"steps": "ten"}})", "train.steps: expected an integer >= 1, found string \"ten\""},
        {R"({"train": {"steps": 2.5}})", "train.steps: expected an integer >= 1, found number 2.5"},
        {R"({"strategy": {"forward_prefetch": "yes"}})",
         "strategy.forward_prefetch: expected true or false, found string \"yes\""},
        {R"({"data": {"path": 3}})", "data.path: expected a string, found number 3"},
        {R"({"model": []})", "model: expected an object, found array []"},
        {R"({"optimizer": {"lr": null}})", "optimizer.lr: expected a number >= 0, found null"},
        {R"({"strategy": {"mixed_precision": {"param_dtype": "int8"}}})",
         "strategy.mixed_precision.param_dtype: expected a float dtype"},
        {"[1]", "(root): expected an object, found array [1]"}}},
      {"OutOfRange",
       {{R"({"model": {"n_layer": 0}})", "model.n_layer: expected an integer >= 1, found 0"},
        {R"({"model": {"dropout": 1.0}})", "model.dropout: expected a number in [0, 1), found 1.0"},
        {R"({"data": {"val_fraction": 0}})", "data.val_fraction: expected a number in (0, 1), found 0"},
        {R"({"deepspeed": {"zero_optimization": {"stage": 4}}})",
         "deepspeed.zero_optimization.stage: expected an integer in [0, 3], found 4"},
        {R"({"strategy": {"limit_all_gathers": -1}})",
         "strategy.limit_all_gathers: expected an integer in [0, 1048576], found -1"}}},
      {"UnknownChoiceGetsTheClosestOne",
       {{R"({"strategy": {"sharding_strategy": "FULL_SHRAD"}})",
         "strategy.sharding_strategy: expected one of \"FULL_SHARD\", \"SHARD_GRAD_OP\", \"SHARD_OPTIMIZER\", "
         "\"NO_SHARD\", \"HYBRID_SHARD\", found string \"FULL_SHRAD\" (did you mean \"FULL_SHARD\"?)"},
        {R"({"strategy": {"auto_wrap_policy": ["Blok"]}})", "found string \"Blok\" (did you mean \"Block\"?)"},
        {R"({"strategy": {"activation_checkpointing": ["Mlp"]}})",
         "strategy.activation_checkpointing: expected [] or [\"Block\"]"}}},
      {"AccumulationStepsBelowOne",
       {{R"({"train": {"grad_accum_steps": 0}})", "train.grad_accum_steps: expected an integer >= 1, found 0"},
        {R"({"deepspeed": {"gradient_accumulation_steps": 0}})",
         "deepspeed.gradient_accumulation_steps: expected an integer >= 1, found 0"}}},
      {"Fp16AndBf16BothOn",
       {{R"({"deepspeed": {"fp16": {"enabled": true}, "bf16": {"enabled": true}}})",
         "deepspeed.fp16.enabled: fp16 and bf16 both on (deepspeed.bf16.enabled is true too): expected at most one"}}},
      {"NEmbdMustBeAMultipleOfNHead",
       {{R"({"model": {"n_embd": 100, "n_head": 3}})",
         "model.n_embd: expected a multiple of model.n_head (3), found 100"}}},
      {"DeepSpeedTrainBatchSizeMustMatch",
       {{R"({"deepspeed": {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                           "gradient_accumulation_steps": 2}})",
         "deepspeed.train_batch_size: expected train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
         "world size = 4 x 2 x 4 = 32, found 30"}}},
      {"SettingGivenInBothStyles",
       {{R"({"train": {"batch_size": 4}, "deepspeed": {"train_micro_batch_size_per_gpu": 4}})",
         "train.batch_size: also set by deepspeed.train_micro_batch_size_per_gpu: keep one of them"},
        {R"({"strategy": {"sharding_strategy": "FULL_SHARD"}, "deepspeed": {}})",
         "strategy.sharding_strategy: also set by deepspeed.zero_optimization.stage"},
        {R"({"loss_scaler": {"hysteresis": 1}, "deepspeed": {"fp16": {"hysteresis": 2}}})",
         "loss_scaler.hysteresis: also set by deepspeed.fp16.hysteresis: keep one of them"},
        // Both on the command line: still a contradiction.
        {R"({"deepspeed": {}})", "train.grad_clip: also set by deepspeed.gradient_clipping",
         {"train.grad_clip=1", "deepspeed.gradient_clipping=2"}}}},
      {"ParameterOffloadNeedsStage3",
       {{R"({"deepspeed": {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}})",
         "deepspeed.zero_optimization.offload_param.device: parameter offload needs zero_optimization.stage 3 "
         "(as in DeepSpeed), found stage 2"},
        {R"({"deepspeed": {"zero_optimization": {"stage": 2, "offload_param": {"device": "nvme",
                                                                              "nvme_path": "/n"}}}})",
         "parameter offload needs zero_optimization.stage 3"}}},
      {"StaticLossScaleIsNotSupported",
       {{R"({"deepspeed": {"fp16": {"enabled": true, "loss_scale": 128}}})",
         "deepspeed.fp16.loss_scale: expected 0 (dynamic loss scaling; a static loss scale is not supported), "
         "found 128"}}},
      {"Fp16WithoutLossScaling",
       {{R"({"strategy": {"mixed_precision": {"param_dtype": "f16"}}, "loss_scaler": {"mode": "none"}})",
         "loss_scaler.mode: expected \"auto\" or \"dynamic\" with strategy.mixed_precision.param_dtype f16 (fp16 "
         "training needs loss scaling), found \"none\""}}},
      {"LearningRateSchedule",
       {{R"({"optimizer": {"lr": 0.001}, "lr_schedule": {"min_lr": 0.01}})",
         "lr_schedule.min_lr: expected at most optimizer.lr (0.001), found 0.01"},
        {R"({"lr_schedule": {"warmup_steps": 50, "decay_steps": 10}})",
         "lr_schedule.decay_steps: expected at least lr_schedule.warmup_steps (50), found 10"}}},
      {"LocalStateDictIsNotSupported",
       {{R"({"strategy": {"state_dict_type": "LOCAL_STATE_DICT"}})",
         "strategy.state_dict_type: expected \"SHARDED_STATE_DICT\" or \"FULL_STATE_DICT\", found "
         "\"LOCAL_STATE_DICT\" (not supported"}}},
      {"NesterovNeedsMomentum",
       {{R"({"optimizer": {"type": "sgd", "momentum": 0, "nesterov": true}})",
         "optimizer.nesterov: Nesterov needs momentum > 0 and dampening 0, found momentum 0"}}},
      {"CheckpointKeysNeedTheirPrerequisites",
       {{R"({"strategy": {"skip_init_weights": true}})",
         "strategy.skip_init_weights: the weights must then come from checkpoint.init_from or checkpoint.resume, "
         "found neither set"},
        {R"({"work_dir": "", "checkpoint": {"save_every": 10, "resume": "auto"}})",
         "checkpoint.save_every: checkpoints go to work_dir/experiment_name: expected a work_dir"},
        {R"({"work_dir": "", "checkpoint": {"save_every": 10, "resume": "auto"}})",
         "checkpoint.resume: \"auto\" looks in work_dir/experiment_name"}}},
  };
}

class ConfigProblemKinds : public ::testing::TestWithParam<ProblemKind> {};

TEST_P(ConfigProblemKinds, AreReportedWithTheirPaths) { ExpectProblems(GetParam().cases); }

INSTANTIATE_TEST_SUITE_P(Table, ConfigProblemKinds, ::testing::ValuesIn(ProblemKinds()),
                         [](const ::testing::TestParamInfo<ProblemKind>& info) { return info.param.name; });

TEST(ConfigProblems, HybridShardSizeMustDivideTheWorld) {
  EXPECT_THAT(Problems(R"({"distributed": {"world_size": 4},
                           "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 3}})"),
              HasSubstr("strategy.hybrid_shard_size: HYBRID_SHARD needs a shard group size that divides the world "
                        "size 4 (distributed.world_size), or 0 for the ranks of each node; found 3"));
  // Under MPI the real world size is checked when it is known.
  const RunConfig mpi = MustParse(R"({"distributed": {"backend": "mpi"},
                                      "strategy": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_size": 3}})");
  EXPECT_TRUE(CheckWorldSize(mpi, 6).ok());
  EXPECT_THAT(CheckWorldSize(mpi, 4), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("divides the world size 4 (the number of ranks), or 0 for "
                                                         "the ranks of each node; found 3")));
  // 0 (the default): a group per node, resolved when the ranks are known.
  const RunConfig per_node = MustParse(R"({"distributed": {"backend": "mpi"},
                                           "strategy": {"sharding_strategy": "HYBRID_SHARD"}})");
  EXPECT_EQ(per_node.train.sharding.hybrid_shard_size, 0);
  EXPECT_TRUE(CheckWorldSize(per_node, 6).ok());
}

TEST(ConfigProblems, NvmeOffloadMistakes) {
  const std::string p = Problems(R"({"deepspeed": {"aio": {"block_size": 1000, "queue_depth": 0, "thred_count": 2},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "buffer_count": 0}}}})");
  for (const char* want : {
           "deepspeed.aio.block_size: expected an integer in [4096, 1073741824], found 1000",
           "deepspeed.aio.queue_depth: expected an integer in [1, 4096], found 0",
           "deepspeed.aio.thred_count: unknown key (did you mean \"thread_count\"?)",
           "deepspeed.zero_optimization.offload_optimizer.buffer_count: expected an integer in [1, 65536]",
           "deepspeed.zero_optimization.offload_optimizer.nvme_path: expected the directory for the NVMe swap files "
           "with device \"nvme\", found none",
       }) {
    EXPECT_THAT(p, HasSubstr(want));
  }
  ExpectProblems({
      {R"({"strategy": {"nvme_offload": {"aio": {"block_size": 6000}}}})",
       "strategy.nvme_offload.aio.block_size: expected a multiple of 4096 bytes"},
      {R"({"strategy": {"nvme_offload": true}})", "strategy.nvme_offload: expected an object"},
      {R"({"deepspeed": {"zero_optimization": {"offload_optimizer": {"device": "disk"}}}})",
       "expected one of \"none\", \"cpu\", \"nvme\""},
      // Given both ways.
      {R"({"strategy": {"nvme_offload": {"nvme_path": "/a"}}, "deepspeed": {"zero_optimization":
            {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/b"}}}})",
       "strategy.nvme_offload: also set by deepspeed.zero_optimization.offload_optimizer"},
  });
}

TEST(ConfigProblems, EveryProblemAtOnceOnePerLine) {
  const std::string m = Problems(R"({"model": {"n_layer": 0, "n_embd": 100, "n_head": 3},
                                     "train": {"steps": "x", "stepz": 1},
                                     "deepspeed": {"fp16": {"enabled": true}, "bf16": {"enabled": true}}})",
                                 {"strategy.forward_prefetch=maybe"});
  const std::vector<std::string> lines = absl::StrSplit(m, '\n');
  ASSERT_EQ(lines.size(), 7u) << m;
  EXPECT_EQ(lines[0], "config test.json: 6 problems");
  for (const char* want : {"  model.n_layer: ", "  model.n_embd: ", "  train.steps: ",
                           "  train.stepz: unknown key (did you mean \"steps\"?)",
                           "  strategy.forward_prefetch: expected true or false, found string \"maybe\"",
                           "  deepspeed.fp16.enabled: fp16 and bf16 both on"}) {
    EXPECT_THAT(m, HasSubstr(want));
  }
}

TEST(ConfigProblems, NotJson) {
  EXPECT_THAT(ConfigFromText("{\"model\": {\n  \"n_layer\": 4,\n}", {}, "bad.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config bad.json: expected JSON, found a parse error at line 3"))));
  EXPECT_THAT(LoadConfig("no/such.json", {}), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such.json")));
}

// Note [Config JSON is checked as it is parsed] (issue 26). Before it, the
// first config read as train.steps 6 (nlohmann keeps the last of equal keys)
// and the second, issue 26 reports, crashed: the message's Found() dumped the deep array
// recursively (a stack overflow).
TEST(ConfigProblems, KeyWrittenTwiceInOneObjectIsAnError) {
  EXPECT_THAT(ConfigFromText(R"({"train": {"steps": 5, "batch_size": 2, "steps": 6}})", {}, "twice.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config twice.json: expected each key once in its object, found train.steps "
                                       "more than once"))));
  // The same name in two objects is two keys.
  EXPECT_TRUE(ConfigFromText(R"({"train": {"seed": 1, "steps": 3}, "model": {"n_layer": 2}, "sample": {"tokens": 3}})",
                             {}).ok());
  EXPECT_THAT(ConfigFromText(R"({"strategy": {"mixed_precision": {"param_dtype": "bf16", "param_dtype": "f32"}}})",
                             {}, "nested.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("strategy.mixed_precision.param_dtype")));
}

TEST(ConfigProblems, DeeplyNestedJsonOfTheWrongTypeIsAnErrorNotACrash) {
  constexpr int kDepth = 100000;
  const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
  EXPECT_THAT(ConfigFromText(absl::StrCat(R"({"train": {"steps": )", deep, "}}"), {}, "deep.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config deep.json: expected JSON nested at most 32 levels deep")));
  EXPECT_THAT(ConfigFromText("{}", {"train.steps=" + deep}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected JSON nested at most 32 levels deep")));
  // Within the limit, the wrong type is reported as such.
  const std::string ok_depth = std::string(30, '[') + std::string(30, ']');
  EXPECT_THAT(ConfigFromText(absl::StrCat(R"({"train": {"steps": )", ok_depth, "}}"), {}, "d.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train.steps: expected")));
}

// Found by the config fuzz target (tests/train/fuzz/config_fuzz.cc, issue 26).
// Before the fix nlohmann threw out_of_range.406 out of ConfigFromText (an
// uncaught exception: train_gpt died with std::terminate); ParseConfigJson
// caught parse errors only.
TEST(ConfigProblems, NumberBeyondTheRangeOfADoubleIsAnErrorNotACrash) {
  EXPECT_THAT(ConfigFromText(R"({"optimizer": {"lr": 1e400}})", {}, "big.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config big.json: expected numbers within the range of a double, found "
                                 "number overflow parsing '1e400'")));
  // On the command line too, and not taken as the string "-1e999".
  EXPECT_THAT(ConfigFromText("{}", {"optimizer.lr=-1e999"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--set \"optimizer.lr=-1e999\""),
                             HasSubstr("expected numbers within the range of a double"))));
  ZS_EXPECT_OK(ConfigFromText(R"({"optimizer": {"lr": 1e-300}, "lr_schedule": {"min_lr": 0}})", {}).status());
}

// Found by the config fuzz target: a --set value (or key) that is not UTF-8
// became a JSON string that nlohmann refuses to print (type_error.316, an
// uncaught exception) when a message or the resolved config dumped it.
TEST(ConfigProblems, SetTextThatIsNotUtf8IsAnErrorNotACrash) {
  for (const std::string& set : {std::string("experiment_name=run\xb8"), std::string("data.path=\xff.txt"),
                                 std::string("model.n_l\xc3yer=2"), std::string("train.steps=\"\xe2\x82\"")}) {
    SCOPED_TRACE(set);
    EXPECT_THAT(ConfigFromText("{}", {set}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("expected UTF-8 text, found an invalid byte at")));
  }
  // UTF-8 beyond ASCII is fine.
  ZS_ASSERT_OK_AND_ASSIGN(const RunConfig c, ConfigFromText("{}", {"experiment_name=caf\xc3\xa9"}));
  EXPECT_EQ(c.experiment_name, "caf\xc3\xa9");
}

}  // namespace
}  // namespace zeroshard
