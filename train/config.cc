#include "zeroshard/train/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/train/config_reader.h"
#include "zeroshard/train/config_schema.h"
#include "zeroshard/train/deepspeed_config.h"

namespace zeroshard {

using config_internal::Closest;
using config_internal::Context;
using config_internal::Found;
using config_internal::FirstInvalidUtf8;
using config_internal::ParseConfigJson;
using config_internal::JoinPath;
using config_internal::Quoted;
using config_internal::RejectKey;
using config_internal::Section;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

int EditDistance(const std::string& a_in, const std::string& b_in) {
  const std::string a = absl::AsciiStrToLower(a_in), b = absl::AsciiStrToLower(b_in);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);  // adjacent transposition
      }
    }
  }
  return d[n][m];
}

CommunicatorOptions CommunicatorOptionsOf(const RunConfig& config) {
  CommunicatorOptions o;
  o.timeout = absl::Seconds(config.timeout_s);
  return o;
}

RunConfig DefaultRunConfig() {
  RunConfig c;
  TrainOptions& o = c.train;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  o.data = "data/tinyshakespeare.txt";
  o.val_fraction = 0.1;
  o.batch_size = 8;
  o.grad_accum_steps = 1;
  o.no_sync = false;
  o.steps = 200;
  o.optimizer = optim::OptimizerOptions{.kind = optim::OptimizerKind::kAdamW, .lr = 1e-3, .weight_decay = 0.1};
  o.optimizer.adamw.beta1 = 0.9;
  o.optimizer.adamw.beta2 = 0.95;
  o.optimizer.sgd.momentum = 0.9;
  o.lr = optim::LrSchedule{.kind = optim::LrScheduleKind::kCosine, .lr = 1e-3, .min_lr = 1e-4,
                           .warmup_steps = 20, .decay_steps = 200};
  o.grad_clip = 1.0;
  o.seed = 1337;
  o.log_every = 10;
  o.eval_every = 100;
  o.eval_iters = 10;
  o.sample_tokens = 200;
  o.temperature = 0.8;
  o.top_k = 40;
  o.sharding = ShardingOptions{};
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  o.loss_scaling = false;
  o.loss_scaler = optim::LossScalerOptions{};
  c.source = "<defaults>";
  return c;
}

namespace {

// ============================================================ cross-field checks

void CheckWorld(const RunConfig& c, int world, const std::string& world_source, Context* ctx) {
  const ShardingOptions& sh = c.train.sharding;
  if (sh.strategy == ShardingStrategy::kHybridShard && ctx->Ok({"strategy.hybrid_shard_size"})) {
    if (sh.hybrid_shard_size < 0 || (sh.hybrid_shard_size > 0 && world % sh.hybrid_shard_size != 0)) {
      ctx->Add("strategy.hybrid_shard_size",
               absl::StrCat("HYBRID_SHARD needs a shard group size that divides the world size ", world, " (",
                            world_source, "), or 0 for the ranks of each node; found ", sh.hybrid_shard_size));
    }
  }
  if (c.train_batch_size > 0) {
    const int64_t want = c.train.batch_size * c.train.grad_accum_steps * world;
    if (want != c.train_batch_size) {
      ctx->Add("deepspeed.train_batch_size",
               absl::StrCat("expected train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size = ",
                            c.train.batch_size, " x ", c.train.grad_accum_steps, " x ", world, " = ", want,
                            ", found ", c.train_batch_size));
    }
  }
}

void CheckContradictions(RunConfig* c, Context* ctx) {
  TrainOptions& o = c->train;
  const bool resnet = c->model_type == "resnet";
  const optim::LrSchedule& lr = resnet ? c->resnet.lr : o.lr;
  const optim::OptimizerOptions& opt = resnet ? c->resnet.optimizer : o.optimizer;
  if (!resnet && ctx->Ok({"model.n_embd", "model.n_head"}) && o.model.n_embd % o.model.n_head != 0) {
    ctx->Add("model.n_embd", absl::StrCat("expected a multiple of model.n_head (", o.model.n_head, "), found ",
                                          o.model.n_embd));
  }
  if (lr.kind != optim::LrScheduleKind::kConstant && ctx->Ok({"lr_schedule.min_lr", "optimizer.lr"}) &&
      lr.min_lr > lr.lr) {
    ctx->Add("lr_schedule.min_lr", absl::StrCat("expected at most optimizer.lr (", lr.lr, "), found ", lr.min_lr));
  }
  if (lr.kind != optim::LrScheduleKind::kConstant && ctx->Ok({"lr_schedule.decay_steps", "lr_schedule.warmup_steps"}) &&
      lr.decay_steps < lr.warmup_steps) {
    ctx->Add("lr_schedule.decay_steps", absl::StrCat("expected at least lr_schedule.warmup_steps (", lr.warmup_steps,
                                                     "), found ", lr.decay_steps));
  }
  if (opt.kind == optim::OptimizerKind::kSgd && opt.sgd.nesterov &&
      (opt.sgd.momentum <= 0 || opt.sgd.dampening != 0)) {
    ctx->Add("optimizer.nesterov", absl::StrCat("Nesterov needs momentum > 0 and dampening 0, found momentum ",
                                                opt.sgd.momentum, " and dampening ", opt.sgd.dampening));
  }
  const bool f16 = o.sharding.mixed_precision.param_dtype == DType::kF16;
  if (c->loss_scale_mode == "none" && f16 && ctx->Ok({"loss_scaler.mode"})) {
    ctx->Add("loss_scaler.mode", "expected \"auto\" or \"dynamic\" with strategy.mixed_precision.param_dtype f16 "
                                 "(fp16 training needs loss scaling), found \"none\"");
  }
  o.loss_scaling = c->loss_scale_mode == "dynamic";
  if (o.sharding.strategy != ShardingStrategy::kHybridShard && o.sharding.hybrid_shard_size != 0 &&
      ctx->Ok({"strategy.hybrid_shard_size", "strategy.sharding_strategy"})) {
    c->notes.push_back(absl::StrCat("strategy.hybrid_shard_size ", o.sharding.hybrid_shard_size, " has no effect with ",
                                    ShardingStrategyName(o.sharding.strategy)));
  }
  if (o.sharding.mixed_precision.keep_low_precision_grads && o.sharding.mixed_precision.reduce_dtype == DType::kF32 &&
      ctx->Ok({"strategy.mixed_precision.reduce_dtype"})) {
    c->notes.push_back("strategy.mixed_precision.keep_low_precision_grads has no effect with reduce_dtype f32 "
                       "(gradient shards are f32 either way)");
  }
  if (c->skip_init_weights && o.init_from.empty() && o.resume.empty()) {
    ctx->Add("strategy.skip_init_weights", "the weights must then come from checkpoint.init_from or "
                                           "checkpoint.resume, found neither set");
  }
  if (c->work_dir.empty() && ctx->Ok({"work_dir"})) {
    if (o.save_every > 0) {
      ctx->Add("checkpoint.save_every", "checkpoints go to work_dir/experiment_name: expected a work_dir, found \"\"");
    }
    if (o.resume == "auto") {
      ctx->Add("checkpoint.resume", "\"auto\" looks in work_dir/experiment_name: expected a work_dir, found \"\"");
    }
  }
  // A backend under a launcher (mpi) takes the launcher's world size, checked when it starts.
  const absl::StatusOr<BackendInfo> backend = BackendRegistry::Global().Find(c->backend);
  if (backend.ok() && !backend->multi_process && ctx->Ok({"distributed.world_size"})) {
    CheckWorld(*c, c->world_size, "distributed.world_size", ctx);
  }
}

// ============================================================ overrides

// The JSON value at `path` in `root`, or nullptr.
const OrderedJson* Find(const OrderedJson& root, const std::vector<std::string>& path) {
  const OrderedJson* node = &root;
  for (const std::string& k : path) {
    if (node->is_object()) {
      auto it = node->find(k);
      if (it == node->end()) return nullptr;
      node = &*it;
    } else if (node->is_array()) {
      size_t i = 0;
      if (!absl::SimpleAtoi(k, &i) || i >= node->size()) return nullptr;
      node = &(*node)[i];
    } else {
      return nullptr;
    }
  }
  return node;
}

// "key.path=value": the value is read as the schema's type at that path (the
// defaults say which): text for a string key, true/false/1/0/yes/no/on/off for
// a boolean key, otherwise JSON (numbers, null, arrays, objects), falling back
// to text, which the reader then reports if the key wants something else.
void ApplyOverride(const std::string& text, const OrderedJson& defaults, Json* root, Context* ctx) {
  const size_t eq = text.find('=');
  const std::string where = absl::StrCat("--set \"", text, "\"");
  if (eq == std::string::npos || eq == 0) {
    ctx->Add(where, "expected key.path=value");
    return;
  }
  // Note [Config JSON is checked as it is parsed]: a config file's strings are
  // UTF-8 (nlohmann's lexer refuses anything else), but a --set value may be
  // taken as a raw string, and one that is not UTF-8 cannot be printed
  // (nlohmann's dump throws type_error.316) in a message or the resolved config.
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string::npos) {
    ctx->Add(where, absl::StrCat("expected UTF-8 text, found an invalid byte at ", bad, " (0x",
                                 absl::Hex(static_cast<uint8_t>(text[bad]), absl::kZeroPad2), ")"));
    return;
  }
  const std::string key = text.substr(0, eq), raw = text.substr(eq + 1);
  ctx->overridden.push_back(key);
  std::vector<std::string> path = absl::StrSplit(key, '.');
  for (const std::string& p : path) {
    if (p.empty()) {
      ctx->Add(where, "expected key.path=value with non-empty keys between the dots");
      return;
    }
  }
  const OrderedJson* schema = Find(defaults, path);
  Json value;
  const std::string lower = absl::AsciiStrToLower(raw);
  if (schema != nullptr && schema->is_string() && !absl::StartsWith(raw, "\"")) {
    value = raw == "null" ? Json() : Json(raw);
  } else if (schema != nullptr && schema->is_boolean() &&
             (lower == "true" || lower == "false" || lower == "1" || lower == "0" || lower == "yes" ||
              lower == "no" || lower == "on" || lower == "off")) {
    value = lower == "true" || lower == "1" || lower == "yes" || lower == "on";
  } else {
    // A JSON value, else the raw text as a string (a --set of a bare word).
    absl::StatusOr<Json> parsed = ParseConfigJson(raw, "--set " + absl::StrJoin(path, "."));
    if (parsed.ok()) {
      value = *std::move(parsed);
    } else if (absl::StrContains(parsed.status().message(), "expected JSON, found a")) {
      value = raw;
    } else {
      ctx->Add(where, std::string(parsed.status().message()));
      return;
    }
  }
  Json* node = root;
  std::string walked;
  for (size_t i = 0; i < path.size(); ++i) {
    const std::string& k = path[i];
    const bool last = i + 1 == path.size();
    if (node->is_null()) {
      // Not in the config: start from the default (an array to index into, or
      // a value that cannot hold keys), else from an empty object.
      const OrderedJson* def = Find(defaults, std::vector<std::string>(path.begin(), path.begin() + i));
      *node = def != nullptr && !def->is_object() && !def->is_null() ? Json::parse(def->dump()) : Json::object();
    }
    if (node->is_object()) {
      node = &(*node)[k];
    } else if (node->is_array()) {
      size_t idx = 0;
      if (!absl::SimpleAtoi(k, &idx) || idx > node->size()) {
        ctx->Add(where, absl::StrCat("expected an index in [0, ", node->size(), "] into ", walked, ", found \"", k, "\""));
        return;
      }
      if (idx == node->size()) node->push_back(Json());
      node = &(*node)[idx];
    } else {
      ctx->Add(where, absl::StrCat(walked, " is ", Found(*node), ", not an object"));
      return;
    }
    walked = JoinPath(walked, k);
    if (last) *node = value;
  }
}

// ============================================================ writing: the table, row by row

OrderedJson ToJson(const RunConfig& c) {
  OrderedJson j = OrderedJson::object();
  for (const ConfigField& f : ConfigFields()) {
    if (f.kind == FieldKind::kSection || !f.written || !f.Reads(c.model_type)) continue;
    OrderedJson* node = &j;
    for (const std::string& k : std::vector<std::string>(absl::StrSplit(f.path, '.'))) node = &(*node)[k];
    *node = f.get(c);
  }
  return j;
}


// ============================================================ reading: the table, row by row

// The sections open along the current row's path, innermost last; a section
// is finished (its unknown keys recorded) when the table leaves it.
class SectionStack {
 public:
  SectionStack(Context* ctx, const Json* root) { open_.push_back({"", Section(ctx, "", root)}); }
  // Finishes the sections that do not hold `path`; returns the innermost one that does.
  Section& Enter(const std::string& parent) {
    while (open_.size() > 1 && !(open_.back().first == parent || absl::StartsWith(parent, open_.back().first + "."))) {
      open_.back().second.Finish();
      open_.pop_back();
    }
    return open_.back().second;
  }
  void Push(const std::string& path, Section s) { open_.push_back({path, std::move(s)}); }
  void FinishAll() {
    while (!open_.empty()) {
      open_.back().second.Finish();
      open_.pop_back();
    }
  }

 private:
  std::vector<std::pair<std::string, Section>> open_;
};

// Reads one row of a generic kind from `s` into `c`.
void ReadRow(const ConfigField& f, Section& s, RunConfig* c) {
  const std::string key = f.key();
  switch (f.kind) {
    case FieldKind::kBool: {
      bool v = false;
      if (s.Bool(key, &v)) f.set(*c, v);
      break;
    }
    case FieldKind::kInt: {
      int64_t v = 0;
      if (s.Int(key, &v, f.min, f.max)) f.set(*c, v);
      break;
    }
    case FieldKind::kNumber: {
      double v = 0;
      if (s.Number(key, &v, f.range)) f.set(*c, v);
      break;
    }
    case FieldKind::kString: {
      std::string v;
      if (s.String(key, &v)) f.set(*c, v);
      break;
    }
    case FieldKind::kChoice: {
      std::string v;
      if (s.Choice(key, &v, f.choices)) f.set(*c, v);
      break;
    }
    case FieldKind::kDType: {
      DType v = DType::kF32;
      if (s.FloatDType(key, &v)) f.set(*c, std::string(DTypeName(v)));
      break;
    }
    case FieldKind::kStrings: {
      std::vector<std::string> v;
      if (s.Strings(key, &v)) f.set(*c, v);
      break;
    }
    case FieldKind::kCustom: f.read(s, key, c); break;
    case FieldKind::kSection: break;
  }
  if (f.check) f.check(s, key, c);
}

// Every row of the table in order: a row of the other model type is an error
// when set (a section of it as a whole), a section row opens its object.
void ReadFields(const Json& root, RunConfig* c, Context* ctx) {
  SectionStack stack(ctx, &root);
  std::string skipped;  // a section whose rows are not read
  for (const ConfigField& f : ConfigFields()) {
    if (!skipped.empty() && absl::StartsWith(f.path, skipped + ".")) continue;
    skipped.clear();
    Section& parent = stack.Enter(f.parent());
    if (!f.Reads(c->model_type)) {
      RejectKey(parent, f.key(), c->model_type);
      if (f.kind == FieldKind::kSection) skipped = f.path;
      continue;
    }
    if (f.kind == FieldKind::kSection) {
      if (f.read && !f.read(parent, f.key(), c)) {
        skipped = f.path;
      } else {
        stack.Push(f.path, parent.Child(f.key()));
      }
      continue;
    }
    ReadRow(f, parent, c);
  }
  stack.FinishAll();
}

absl::StatusOr<RunConfig> Parse(Json root, const std::vector<std::string>& overrides, const std::string& source) {
  Context ctx;
  // The schema's types for --set values: the GPT's keys, and the ResNet's where the GPT has none.
  OrderedJson defaults = ToJson(DefaultRunConfig());
  {
    RunConfig r = DefaultRunConfig();
    r.model_type = "resnet";
    const OrderedJson vision = ToJson(r);
    for (auto it = vision.begin(); it != vision.end(); ++it) {
      if (!it->is_object() || !defaults.contains(it.key())) continue;
      for (auto k = it->begin(); k != it->end(); ++k) {
        if (!defaults[it.key()].contains(k.key())) defaults[it.key()][k.key()] = *k;
      }
    }
  }
  if (!root.is_object()) {
    ctx.Add("(root)", absl::StrCat("expected an object, found ", Found(root)));
    root = Json::object();
  }
  for (const std::string& o : overrides) ApplyOverride(o, defaults, &root, &ctx);
  ctx.root = &root;

  RunConfig c = DefaultRunConfig();
  c.source = source;
  std::string stem = source;
  if (size_t slash = stem.find_last_of('/'); slash != std::string::npos) stem = stem.substr(slash + 1);
  if (size_t dot = stem.find_last_of('.'); dot != std::string::npos && dot > 0) stem = stem.substr(0, dot);
  c.experiment_name = source == "<defaults>" || stem.empty() ? "default" : stem;

  ReadFields(root, &c, &ctx);
  if (c.model_type == "resnet") {
    c.resnet.sharding = c.train.sharding;
    c.resnet.lr.lr = c.resnet.optimizer.lr;
    c.resnet.lr.decay_steps =
        ctx.decay_steps >= 0 ? ctx.decay_steps : std::max(c.resnet.steps, c.resnet.lr.warmup_steps);
  } else {
    c.train.lr.lr = c.train.optimizer.lr;
    c.train.lr.decay_steps = ctx.decay_steps >= 0 ? ctx.decay_steps : std::max(c.train.steps, c.train.lr.warmup_steps);
  }
  // Checkpoints beside the timestamped run folders, as MMEngine keeps them.
  c.train.work_dir = c.work_dir.empty() ? "" : absl::StrCat(c.work_dir, "/", c.experiment_name);
  CheckContradictions(&c, &ctx);

  // Unknown keys: the closest key of the same object, else the place where a
  // key of that name belongs.
  for (const Context::Unknown& u : ctx.unknowns) {
    const std::string path = JoinPath(u.section, u.key);
    std::string near = Closest(u.key, u.siblings);
    std::string hint;
    if (!near.empty()) {
      hint = absl::StrCat(" (did you mean \"", near, "\"?)");
    } else {
      for (const std::string& leaf : ctx.known_leaves) {
        if (leaf == u.key || absl::EndsWith(leaf, absl::StrCat(".", u.key))) {
          hint = absl::StrCat(" (it belongs in ", leaf, ")");
          break;
        }
      }
      if (hint.empty()) hint = absl::StrCat("; expected one of ", Quoted(u.siblings));
    }
    ctx.problems.push_back(absl::StrCat(path, ": unknown key", hint));
  }
  if (!ctx.problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": ", ctx.problems.size(),
                                                   ctx.problems.size() == 1 ? " problem" : " problems", "\n  ",
                                                   absl::StrJoin(ctx.problems, "\n  ")));
  }
  return c;
}


}  // namespace

namespace {

// Objects merge key by key; any other value replaces the base's.
void Merge(Json* base, const Json& over) {
  if (!base->is_object() || !over.is_object()) {
    *base = over;
    return;
  }
  for (auto it = over.begin(); it != over.end(); ++it) Merge(&(*base)[it.key()], *it);
}

absl::StatusOr<Json> ReadJsonFile(const std::string& path, int depth);

// `text` parsed, with its "_base_" (a file name relative to `dir`) read and
// merged under it (MMEngine's config inheritance).
absl::StatusOr<Json> ParseJsonText(const std::string& text, const std::string& source, const std::string& dir,
                                   int depth) {
  Json root = Json::object();
  if (!absl::StripAsciiWhitespace(text).empty()) {
    ZS_ASSIGN_OR_RETURN(root, ParseConfigJson(text, source));  // Note [Config JSON is checked as it is parsed]
  }
  // A DeepSpeed config file: its keys are the "deepspeed" block of a default config.
  if (IsDeepSpeedConfig(root)) return Json{{"deepspeed", std::move(root)}};
  if (!root.is_object() || !root.contains("_base_")) return root;
  const Json base_name = root["_base_"];
  if (!base_name.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", source, ": _base_: expected a file name, found ", Found(base_name)));
  }
  if (depth >= 8) {
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": _base_: expected at most 8 levels of "
                                                   "inheritance, found more (a cycle?)"));
  }
  const std::string base_path = dir.empty() ? base_name.get<std::string>()
                                            : absl::StrCat(dir, "/", base_name.get<std::string>());
  ZS_ASSIGN_OR_RETURN(Json base, ReadJsonFile(base_path, depth + 1));
  root.erase("_base_");
  Merge(&base, root);
  return base;
}

absl::StatusOr<Json> ReadJsonFile(const std::string& path, int depth) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config ", path, ": cannot open the file"));
  std::stringstream text;
  text << in.rdbuf();
  const size_t slash = path.find_last_of('/');
  return ParseJsonText(text.str(), path, slash == std::string::npos ? "" : path.substr(0, slash), depth);
}

}  // namespace

absl::StatusOr<RunConfig> ConfigFromText(const std::string& json_text, const std::vector<std::string>& overrides,
                                         const std::string& source) {
  ZS_ASSIGN_OR_RETURN(Json root, ParseJsonText(json_text, source, "", 0));
  return Parse(std::move(root), overrides, source);
}

absl::StatusOr<RunConfig> LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  ZS_ASSIGN_OR_RETURN(Json root, ReadJsonFile(path, 0));
  return Parse(std::move(root), overrides, path);
}

absl::Status CheckWorldSize(const RunConfig& config, int world_size) {
  Context ctx;
  CheckWorld(config, world_size, "the number of ranks", &ctx);
  if (ctx.problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("config ", config.source, " on ", world_size, " ranks:\n  ",
                                                 absl::StrJoin(ctx.problems, "\n  ")));
}

std::string ResolvedConfigJson(const RunConfig& config) { return ToJson(config).dump(2) + "\n"; }

std::vector<std::string> ConfigKeyPaths() {
  std::vector<std::string> paths;
  for (const ConfigField& f : ConfigFields()) {
    if (f.kind != FieldKind::kSection && f.leaf && f.Reads("gpt")) paths.push_back(f.path);
  }
  return paths;
}

// ============================================================ flags

absl::StatusOr<std::vector<std::string>> OverridesFromFlags(
    const std::vector<std::pair<std::string, std::string>>& flags) {
  std::vector<std::string> out;
  for (const auto& [name, value] : flags) {
    const auto [field, flag] = FindConfigFlag(name);
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a config flag"));
    if (!flag->to_overrides) {
      out.push_back(absl::StrCat(field->path, "=", value));
      continue;
    }
    ZS_ASSIGN_OR_RETURN(std::vector<std::string> lines, flag->to_overrides(value));
    out.insert(out.end(), lines.begin(), lines.end());
  }
  return out;
}

}  // namespace zeroshard
