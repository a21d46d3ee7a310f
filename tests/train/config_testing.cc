#include "zeroshard/tests/train/config_testing.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard::testing {
namespace {

using FieldTable = std::map<std::string, std::function<std::string(const RunConfig&)>>;

// Adds prefix.member for what `get` returns of a RunConfig.
#define ZS_FIELD(member) \
  (*table)[prefix.empty() ? #member : prefix + "." #member] = [get](const RunConfig& c) { return FieldText(get(c).member); }

template <typename Get>
void AddOptimizer(const std::string& prefix, Get get, FieldTable* table) {
  ZS_FIELD(kind);
  ZS_FIELD(lr);
  ZS_FIELD(weight_decay);
  ZS_FIELD(adamw.beta1);
  ZS_FIELD(adamw.beta2);
  ZS_FIELD(adamw.eps);
  ZS_FIELD(sgd.momentum);
  ZS_FIELD(sgd.dampening);
  ZS_FIELD(sgd.nesterov);
}

template <typename Get>
void AddLrSchedule(const std::string& prefix, Get get, FieldTable* table) {
  ZS_FIELD(kind);
  ZS_FIELD(lr);
  ZS_FIELD(min_lr);
  ZS_FIELD(warmup_steps);
  ZS_FIELD(decay_steps);
}

template <typename Get>
void AddSharding(const std::string& prefix, Get get, FieldTable* table) {
  ZS_FIELD(strategy);
  ZS_FIELD(hybrid_shard_size);
  ZS_FIELD(wrap.kind);
  ZS_FIELD(wrap.types);
  ZS_FIELD(wrap.min_num_params);
  ZS_FIELD(backward_prefetch);
  ZS_FIELD(forward_prefetch);
  ZS_FIELD(limit_all_gathers);
  ZS_FIELD(offload.params);
  ZS_FIELD(offload.grads);
  ZS_FIELD(offload.optimizer);
  ZS_FIELD(offload.nvme_optimizer);
  ZS_FIELD(offload.nvme_params);
  ZS_FIELD(offload.nvme_verify);
  ZS_FIELD(offload.optimizer_nvme.path);
  ZS_FIELD(offload.optimizer_nvme.buffer_count);
  ZS_FIELD(offload.optimizer_nvme.pin_memory);
  ZS_FIELD(offload.optimizer_nvme.read_ahead);
  ZS_FIELD(offload.optimizer_nvme.write_behind);
  ZS_FIELD(offload.param_nvme.path);
  ZS_FIELD(offload.param_nvme.buffer_count);
  ZS_FIELD(offload.param_nvme.pin_memory);
  ZS_FIELD(offload.param_nvme.read_ahead);
  ZS_FIELD(offload.param_nvme.write_behind);
  ZS_FIELD(offload.param_nvme.max_in_cpu);
  ZS_FIELD(offload.aio.block_size);
  ZS_FIELD(offload.aio.queue_depth);
  ZS_FIELD(offload.aio.thread_count);
  ZS_FIELD(offload.aio.single_submit);
  ZS_FIELD(offload.aio.overlap_events);
  ZS_FIELD(mixed_precision.param_dtype);
  ZS_FIELD(mixed_precision.reduce_dtype);
  ZS_FIELD(mixed_precision.buffer_dtype);
  ZS_FIELD(sync_module_states);
  ZS_FIELD(ignored_modules);
}

const FieldTable& Fields() {
  static const FieldTable* fields = [] {
    auto* table = new FieldTable;
    {
      const std::string prefix;
      auto get = [](const RunConfig& c) -> const RunConfig& { return c; };
      ZS_FIELD(model_type);
      ZS_FIELD(experiment_name);
      ZS_FIELD(work_dir);
      ZS_FIELD(world_size);
      ZS_FIELD(backend);
      ZS_FIELD(timeout_s);
      ZS_FIELD(loss_scale_mode);
      ZS_FIELD(train_batch_size);
      ZS_FIELD(skip_init_weights);
    }
    {
      const std::string prefix = "train";
      auto get = [](const RunConfig& c) -> const TrainOptions& { return c.train; };
      ZS_FIELD(model.vocab_size);
      ZS_FIELD(model.block_size);
      ZS_FIELD(model.n_layer);
      ZS_FIELD(model.n_head);
      ZS_FIELD(model.n_embd);
      ZS_FIELD(model.dropout);
      ZS_FIELD(model.bias);
      ZS_FIELD(model.activation_checkpointing);
      ZS_FIELD(data);
      ZS_FIELD(val_fraction);
      ZS_FIELD(tokenizer);
      ZS_FIELD(steps);
      ZS_FIELD(batch_size);
      ZS_FIELD(grad_accum_steps);
      ZS_FIELD(no_sync);
      ZS_FIELD(grad_clip);
      ZS_FIELD(seed);
      ZS_FIELD(log_every);
      ZS_FIELD(eval_every);
      ZS_FIELD(eval_iters);
      ZS_FIELD(device_memory_limit);
      ZS_FIELD(tensorboard);
      ZS_FIELD(loss_scaling);
      ZS_FIELD(loss_scaler.initial_scale_power);
      ZS_FIELD(loss_scaler.scale_window);
      ZS_FIELD(loss_scaler.hysteresis);
      ZS_FIELD(loss_scaler.consecutive_hysteresis);
      ZS_FIELD(loss_scaler.min_scale);
      ZS_FIELD(loss_scaler.scale_factor);
      ZS_FIELD(state_dict_type);
      ZS_FIELD(init_from);
      ZS_FIELD(save);
      ZS_FIELD(save_every);
      ZS_FIELD(resume);
      ZS_FIELD(async_save);
      ZS_FIELD(keep_last);
      ZS_FIELD(work_dir);
      ZS_FIELD(sample_tokens);
      ZS_FIELD(temperature);
      ZS_FIELD(top_k);
      ZS_FIELD(trace);
      ZS_FIELD(trace_from);
      ZS_FIELD(trace_steps);
      AddOptimizer("train.optimizer", [](const RunConfig& c) -> const auto& { return c.train.optimizer; }, table);
      AddLrSchedule("train.lr", [](const RunConfig& c) -> const auto& { return c.train.lr; }, table);
      AddSharding("train.sharding", [](const RunConfig& c) -> const auto& { return c.train.sharding; }, table);
    }
    {
      const std::string prefix = "resnet";
      auto get = [](const RunConfig& c) -> const ResNetTrainOptions& { return c.resnet; };
      ZS_FIELD(model.widths);
      ZS_FIELD(model.depths);
      ZS_FIELD(model.num_classes);
      ZS_FIELD(model.stem);
      ZS_FIELD(model.zero_init_residual);
      ZS_FIELD(data.image_size);
      ZS_FIELD(data.train_size);
      ZS_FIELD(data.val_size);
      ZS_FIELD(data.seed);
      ZS_FIELD(data.noise);
      ZS_FIELD(steps);
      ZS_FIELD(batch_size);
      ZS_FIELD(seed);
      ZS_FIELD(log_every);
      ZS_FIELD(eval_every);
      ZS_FIELD(eval_batch);
      ZS_FIELD(average_bn_stats);
      ZS_FIELD(threads_per_rank);
      ZS_FIELD(tensorboard);
      ZS_FIELD(save);
      AddOptimizer("resnet.optimizer", [](const RunConfig& c) -> const auto& { return c.resnet.optimizer; }, table);
      AddLrSchedule("resnet.lr", [](const RunConfig& c) -> const auto& { return c.resnet.lr; }, table);
      AddSharding("resnet.sharding", [](const RunConfig& c) -> const auto& { return c.resnet.sharding; }, table);
    }
    return table;
  }();
  return *fields;
}

#undef ZS_FIELD

}  // namespace

std::string FieldText(bool v) { return v ? "true" : "false"; }
std::string FieldText(int v) { return absl::StrCat(v); }
std::string FieldText(int64_t v) { return absl::StrCat(v); }
std::string FieldText(uint64_t v) { return absl::StrCat(v); }
std::string FieldText(double v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);  // the shortest that reads back
  return std::string(buf, r.ptr);
}
std::string FieldText(float v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}
std::string FieldText(const char* v) { return v; }
std::string FieldText(const std::string& v) { return v; }
std::string FieldText(const std::set<std::string>& v) { return absl::StrJoin(v, ","); }
std::string FieldText(const std::vector<std::string>& v) { return absl::StrJoin(v, ","); }
std::string FieldText(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }
std::string FieldText(ShardingStrategy v) { return std::string(ShardingStrategyName(v)); }
std::string FieldText(BackwardPrefetch v) { return std::string(BackwardPrefetchName(v)); }
std::string FieldText(WrapPolicy::Kind v) {
  switch (v) {
    case WrapPolicy::Kind::kNone: return "none";
    case WrapPolicy::Kind::kByType: return "by_type";
    case WrapPolicy::Kind::kBySize: return "by_size";
    case WrapPolicy::Kind::kCustom: return "custom";
  }
  return "?";
}
std::string FieldText(DType v) { return std::string(DTypeName(v)); }
std::string FieldText(optim::OptimizerKind v) { return std::string(optim::OptimizerKindName(v)); }
std::string FieldText(optim::LrScheduleKind v) { return std::string(optim::LrScheduleKindName(v)); }
std::string FieldText(nn::ResNetStem v) { return v == nn::ResNetStem::kImageNet ? "imagenet" : "cifar"; }

RunConfig MustParse(const std::string& text, const std::vector<std::string>& overrides) {
  absl::StatusOr<RunConfig> c = ConfigFromText(text, overrides, "test.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : RunConfig{};
}

std::string Problems(const std::string& text, const std::vector<std::string>& overrides) {
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

std::string Field(const RunConfig& c, const std::string& path) {
  auto it = Fields().find(path);
  if (it == Fields().end()) {
    ADD_FAILURE() << "no field " << path << " in the test's table (tests/train/config_testing.cc)";
    return "";
  }
  return it->second(c);
}

void ExpectFields(const RunConfig& c, const std::vector<FieldIs>& want, std::source_location where) {
  ::testing::ScopedTrace trace(where.file_name(), static_cast<int>(where.line()), "ExpectFields");
  for (const FieldIs& f : want) EXPECT_EQ(Field(c, f.path), f.text) << f.path;
}

void ExpectProblems(const std::vector<ProblemCase>& cases, std::source_location where) {
  ::testing::ScopedTrace trace(where.file_name(), static_cast<int>(where.line()), "ExpectProblems");
  for (const ProblemCase& k : cases) {
    SCOPED_TRACE(k.text);
    EXPECT_THAT(Problems(k.text, k.overrides), ::testing::HasSubstr(k.want));
  }
}

}  // namespace zeroshard::testing
