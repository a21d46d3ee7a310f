#include "train/config.h"

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
#include "runtime/status.h"

namespace zeroshard {

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

// ============================================================ problems

// What a value is, for "found ..." in messages.
std::string Found(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case Json::value_t::string: return absl::StrCat("string ", v.dump());
    case Json::value_t::array: {
      std::string s = v.dump();
      return absl::StrCat("array ", s.size() > 60 ? s.substr(0, 57) + "..." : s);
    }
    case Json::value_t::object: return "an object";
    default: return absl::StrCat("number ", v.dump());
  }
}

std::string Quoted(const std::vector<std::string>& names) {
  std::vector<std::string> q;
  for (const std::string& n : names) q.push_back(absl::StrCat("\"", n, "\""));
  return absl::StrJoin(q, ", ");
}

// The closest of `candidates` to `word`, when close enough to be a likely typo.
std::string Closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const std::string& c : candidates) {
    const int d = EditDistance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const int allowed = std::max<int>(2, static_cast<int>(word.size()) / 3);
  return best_d <= allowed ? best : "";
}

std::string JoinPath(const std::string& section, const std::string& key) {
  return section.empty() ? key : absl::StrCat(section, ".", key);
}

// Collects every problem of one parse, and which paths failed (so a
// contradiction is only checked between values that were read).
struct Context {
  std::vector<std::string> problems;
  std::set<std::string> failed;
  std::vector<std::string> known_leaves;  // every leaf key path read
  struct Unknown {
    std::string section;
    std::string key;
    std::vector<std::string> siblings;
  };
  std::vector<Unknown> unknowns;
  std::vector<std::string> overridden;  // key paths set on the command line (--set, flags)

  void Add(const std::string& path, const std::string& what) {
    problems.push_back(absl::StrCat(path, ": ", what));
    failed.insert(path);
  }
  // True when the command line set `path`, a key inside it or an object holding it.
  bool Overridden(const std::string& path) const {
    for (const std::string& o : overridden) {
      if (o == path || absl::StartsWith(o, path + ".") || absl::StartsWith(path, o + ".")) return true;
    }
    return false;
  }
  bool Ok(std::initializer_list<std::string> paths) const {
    for (const std::string& p : paths) {
      if (failed.count(p)) return false;
    }
    return true;
  }
};

// ============================================================ reading a section

struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;

  bool Contains(double v) const {
    return std::isfinite(v) && (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
  }
  std::string Describe(const char* what) const {
    const bool has_min = std::isfinite(min), has_max = std::isfinite(max);
    if (has_min && has_max) {
      return absl::StrCat(what, " in ", min_open ? "(" : "[", min, ", ", max, max_open ? ")" : "]");
    }
    if (has_min) return absl::StrCat(what, min_open ? " > " : " >= ", min);
    if (has_max) return absl::StrCat(what, max_open ? " < " : " <= ", max);
    return what;
  }
};

Range AtLeast(double v) { return Range{.min = v}; }
Range Above(double v) { return Range{.min = v, .min_open = true}; }
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// One JSON object of the config. Each reader marks its key as known, leaves
// the output untouched when the key is absent, and reports a wrong type or an
// out-of-range value with the key's path. Finish() reports the keys nobody read.
class Section {
 public:
  Section(Context* ctx, std::string path, const Json* obj) : ctx_(ctx), path_(std::move(path)), obj_(obj) {}

  const std::string& path() const { return path_; }
  const Context& ctx() const { return *ctx_; }
  bool present() const { return obj_ != nullptr; }
  std::string PathOf(const std::string& key) const { return JoinPath(path_, key); }

  // The value at `key` (nullptr when absent). `leaf`: a key of the schema
  // (not a sub-section) for ConfigKeyPaths.
  const Json* Get(const std::string& key, bool leaf = true) {
    known_.push_back(key);
    if (leaf) ctx_->known_leaves.push_back(PathOf(key));
    if (obj_ == nullptr) return nullptr;
    auto it = obj_->find(key);
    return it == obj_->end() ? nullptr : &*it;
  }
  bool Has(const std::string& key) const { return obj_ != nullptr && obj_->contains(key); }
  void Add(const std::string& key, const std::string& what) { ctx_->Add(PathOf(key), what); }

  bool Bool(const std::string& key, bool* out) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) {
      Add(key, absl::StrCat("expected true or false, found ", Found(*v)));
      return false;
    }
    *out = v->get<bool>();
    return true;
  }

  template <typename T>
  bool Int(const std::string& key, T* out, int64_t min, int64_t max = kNoMax) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    const std::string want =
        max == kNoMax ? absl::StrCat("an integer >= ", min) : absl::StrCat("an integer in [", min, ", ", max, "]");
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Add(key, absl::StrCat("expected ", want, ", found ", Found(*v)));
        return false;
      }
      x = static_cast<int64_t>(v->get<uint64_t>());
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9.007199254740992e15) {
      x = static_cast<int64_t>(v->get<double>());  // 1e6
    } else {
      Add(key, absl::StrCat("expected ", want, ", found ", Found(*v)));
      return false;
    }
    if (x < min || x > max) {
      Add(key, absl::StrCat("expected ", want, ", found ", x));
      return false;
    }
    *out = static_cast<T>(x);
    return true;
  }

  bool Number(const std::string& key, double* out, Range range = {}) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    if (!v->is_number()) {
      Add(key, absl::StrCat("expected ", range.Describe("a number"), ", found ", Found(*v)));
      return false;
    }
    const double x = v->get<double>();
    if (!range.Contains(x)) {
      Add(key, absl::StrCat("expected ", range.Describe("a number"), ", found ", v->dump()));
      return false;
    }
    *out = x;
    return true;
  }

  bool String(const std::string& key, std::string* out) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    if (!v->is_string()) {
      Add(key, absl::StrCat("expected a string, found ", Found(*v)));
      return false;
    }
    *out = v->get<std::string>();
    return true;
  }

  // One of `choices`, compared case-insensitively; *out gets the choice's spelling.
  bool Choice(const std::string& key, std::string* out, const std::vector<std::string>& choices) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    return ChoiceOf(key, *v, out, choices);
  }
  bool ChoiceOf(const std::string& key, const Json& v, std::string* out,
                const std::vector<std::string>& choices) {
    const std::string want = absl::StrCat("expected one of ", Quoted(choices));
    if (!v.is_string()) {
      Add(key, absl::StrCat(want, ", found ", Found(v)));
      return false;
    }
    const std::string s = v.get<std::string>();
    for (const std::string& c : choices) {
      if (absl::EqualsIgnoreCase(s, c)) {
        *out = c;
        return true;
      }
    }
    const std::string near = Closest(s, choices);
    Add(key, absl::StrCat(want, ", found ", Found(v), near.empty() ? "" : absl::StrCat(" (did you mean \"", near, "\"?)")));
    return false;
  }

  // A float dtype name as runtime/dtype.h parses it; *out unchanged otherwise.
  bool FloatDType(const std::string& key, DType* out) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    absl::StatusOr<DType> d = v->is_string() ? ParseDType(v->get<std::string>())
                                             : absl::StatusOr<DType>(absl::InvalidArgumentError(""));
    if (!d.ok() || !IsFloatingPoint(*d)) {
      Add(key, absl::StrCat("expected a float dtype (\"f32\", \"bf16\" or \"f16\"; also \"float32\", "
                            "\"bfloat16\", \"float16\", \"fp32\", \"fp16\"), found ", Found(*v)));
      return false;
    }
    *out = *d;
    return true;
  }

  // A list of strings.
  bool Strings(const std::string& key, std::vector<std::string>* out) {
    const Json* v = Get(key);
    if (v == nullptr) return false;
    return StringsOf(key, *v, out);
  }
  bool StringsOf(const std::string& key, const Json& v, std::vector<std::string>* out) {
    bool ok = v.is_array();
    if (ok) {
      for (const Json& e : v) ok = ok && e.is_string();
    }
    if (!ok) {
      Add(key, absl::StrCat("expected an array of strings, found ", Found(v)));
      return false;
    }
    out->clear();
    for (const Json& e : v) out->push_back(e.get<std::string>());
    return true;
  }

  // The object at `key` (absent: an empty section that reads nothing).
  Section Child(const std::string& key) {
    const Json* v = Get(key, /*leaf=*/false);
    if (v != nullptr && !v->is_object()) {
      Add(key, absl::StrCat("expected an object, found ", Found(*v)));
      v = nullptr;
    }
    return Section(ctx_, PathOf(key), v);
  }

  // Records the keys no reader asked for.
  void Finish() {
    if (obj_ == nullptr) return;
    for (auto it = obj_->begin(); it != obj_->end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
        ctx_->unknowns.push_back({path_, it.key(), known_});
      }
    }
  }

 private:
  Context* ctx_;
  std::string path_;
  const Json* obj_;
  std::vector<std::string> known_;
};

// The module types of the GPT (autograd/nn/layers.h, gpt.h), for wrap policies.
const std::vector<std::string>& GptModuleTypes() {
  static const auto* types = new std::vector<std::string>{"Block", "CausalSelfAttention", "Mlp", "LayerNorm"};
  return *types;
}

// The module types of the ResNet (autograd/nn/resnet.h, vision layers).
const std::vector<std::string>& ResNetModuleTypes() {
  static const auto* types = new std::vector<std::string>{"BasicBlock", "Conv2d", "BatchNorm2d", "Linear"};
  return *types;
}

// Keys that belong to the other model type: an error each when set.
void RejectKeys(Section& s, const std::vector<std::string>& keys, const std::string& model_type) {
  const std::string other = model_type == "resnet" ? "gpt" : "resnet";
  for (const std::string& k : keys) {
    if (!s.Has(k)) continue;
    const Json* v = s.Get(k, /*leaf=*/false);
    s.Add(k, absl::StrCat("a key of model.type \"", other, "\" only: expected it unset with model.type \"",
                          model_type, "\", found ", Found(*v)));
  }
}

const std::vector<std::string> kGptModelKeys = {"vocab_size", "block_size", "n_layer", "n_head",
                                                "n_embd",     "dropout",    "bias"};
const std::vector<std::string> kResNetModelKeys = {"widths", "depths", "num_classes", "stem", "zero_init_residual"};
const std::vector<std::string> kGptDataKeys = {"path", "val_fraction"};
const std::vector<std::string> kResNetDataKeys = {"image_size", "train_size", "val_size", "seed", "noise"};
const std::vector<std::string> kGptTrainKeys = {"grad_accum_steps", "accumulate", "grad_clip", "eval_iters",
                                                "device_memory_limit"};
const std::vector<std::string> kResNetTrainKeys = {"eval_batch", "average_bn_stats", "threads_per_rank"};
const std::vector<std::string> kGptStrategyKeys = {"activation_checkpointing", "state_dict_type", "skip_init_weights"};
const std::vector<std::string> kGptCheckpointKeys = {"init_from", "save_every", "resume", "async_save", "keep_last",
                                                     "write_tied_once"};
const std::vector<std::string> kGptSections = {"loss_scaler", "sample", "trace", "deepspeed"};

// ============================================================ the sections

void ReadModel(Section s, nn::GptConfig* m) {
  s.Int("vocab_size", &m->vocab_size, 1);
  s.Int("block_size", &m->block_size, 1);
  s.Int("n_layer", &m->n_layer, 1);
  s.Int("n_head", &m->n_head, 1);
  s.Int("n_embd", &m->n_embd, 1);
  s.Number("dropout", &m->dropout, Range{.min = 0, .max = 1, .max_open = true});
  s.Bool("bias", &m->bias);
  RejectKeys(s, kResNetModelKeys, "gpt");
  s.Finish();
}

// A non-empty array of integers >= min.
bool IntList(Section& s, const std::string& key, std::vector<int64_t>* out, int64_t min) {
  const Json* v = s.Get(key);
  if (v == nullptr) return false;
  bool ok = v->is_array() && !v->empty();
  if (ok) {
    for (const Json& e : *v) ok = ok && (e.is_number_integer() || e.is_number_unsigned()) && e.get<int64_t>() >= min;
  }
  if (!ok) {
    s.Add(key, absl::StrCat("expected a non-empty array of integers >= ", min, ", found ", Found(*v)));
    return false;
  }
  out->clear();
  for (const Json& e : *v) out->push_back(e.get<int64_t>());
  return true;
}

// model.type "resnet": nn::ResNetConfig.
void ReadResNetModel(Section s, nn::ResNetConfig* m) {
  const bool widths = IntList(s, "widths", &m->widths, 1);
  const bool depths = IntList(s, "depths", &m->depths, 1);
  if ((widths || depths) && m->widths.size() != m->depths.size() && s.ctx().Ok({s.PathOf("widths"), s.PathOf("depths")})) {
    s.Add("depths", absl::StrCat("expected as many entries as ", s.PathOf("widths"), " (", m->widths.size(),
                                 "), found ", m->depths.size()));
  }
  s.Int("num_classes", &m->num_classes, ShapesData::kNumClasses);
  std::string stem;
  if (s.Choice("stem", &stem, {"cifar", "imagenet"})) {
    m->stem = stem == "cifar" ? nn::ResNetStem::kCifar : nn::ResNetStem::kImageNet;
  }
  s.Bool("zero_init_residual", &m->zero_init_residual);
  RejectKeys(s, kGptModelKeys, "resnet");
  s.Finish();
}

// model.type "resnet": the generated ShapesData set (ShapesOptions).
void ReadShapesData(Section s, ShapesOptions* d) {
  s.Int("image_size", &d->image_size, 8);
  s.Int("train_size", &d->train_size, 1);
  s.Int("val_size", &d->val_size, 0);
  s.Int("seed", &d->seed, 0);
  double noise = d->noise;
  if (s.Number("noise", &noise, Range{.min = 0, .max = 1, .max_open = true})) d->noise = static_cast<float>(noise);
  RejectKeys(s, kGptDataKeys, "resnet");
  s.Finish();
}

// model.type "resnet": the train keys of ResNetTrainOptions.
void ReadResNetTrain(Section s, ResNetTrainOptions* o) {
  s.Int("steps", &o->steps, 1);
  s.Int("batch_size", &o->batch_size, 1);
  s.Int("seed", &o->seed, 0);
  s.Int("log_every", &o->log_every, 1);
  s.Int("eval_every", &o->eval_every, 0);
  s.Int("eval_batch", &o->eval_batch, 1);
  s.Bool("average_bn_stats", &o->average_bn_stats);
  s.Int("threads_per_rank", &o->threads_per_rank, 0, 1024);
  s.Bool("tensorboard", &o->tensorboard);
  RejectKeys(s, kGptTrainKeys, "resnet");
  s.Finish();
}

void ReadData(Section s, TrainOptions* o) {
  s.String("path", &o->data);
  s.Number("val_fraction", &o->val_fraction, Range{.min = 0, .max = 1, .min_open = true, .max_open = true});
  RejectKeys(s, kResNetDataKeys, "gpt");
  s.Finish();
}

void ReadTrain(Section s, TrainOptions* o) {
  s.Int("steps", &o->steps, 1);
  s.Int("batch_size", &o->batch_size, 1);
  s.Int("grad_accum_steps", &o->grad_accum_steps, 1);
  std::string acc;
  if (s.Choice("accumulate", &acc, {"sharded", "no_sync"})) o->no_sync = acc == "no_sync";
  s.Number("grad_clip", &o->grad_clip, AtLeast(0));
  s.Int("seed", &o->seed, 0);
  s.Int("log_every", &o->log_every, 1);
  s.Int("eval_every", &o->eval_every, 0);
  s.Int("eval_iters", &o->eval_iters, 1);
  s.Int("device_memory_limit", &o->device_memory_limit, 0);
  s.Bool("tensorboard", &o->tensorboard);
  RejectKeys(s, kResNetTrainKeys, "gpt");
  s.Finish();
}

void ReadOptimizer(Section s, optim::OptimizerOptions* opt, optim::LrSchedule* lr) {
  std::string type;
  if (s.Choice("type", &type, {"adamw", "adam", "sgd"})) opt->kind = *optim::ParseOptimizerKind(type);
  if (s.Number("lr", &opt->lr, AtLeast(0))) lr->lr = opt->lr;
  s.Number("weight_decay", &opt->weight_decay, AtLeast(0));
  if (const Json* b = s.Get("betas")) {
    const Range unit{.min = 0, .max = 1, .max_open = true};
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number()) {
      s.Add("betas", absl::StrCat("expected [beta1, beta2], two numbers in [0, 1), found ", Found(*b)));
    } else if (!unit.Contains((*b)[0].get<double>()) || !unit.Contains((*b)[1].get<double>())) {
      s.Add("betas", absl::StrCat("expected two numbers in [0, 1), found ", b->dump()));
    } else {
      opt->adamw.beta1 = (*b)[0].get<double>();
      opt->adamw.beta2 = (*b)[1].get<double>();
    }
  }
  s.Number("eps", &opt->adamw.eps, AtLeast(0));
  s.Number("momentum", &opt->sgd.momentum, AtLeast(0));
  s.Number("dampening", &opt->sgd.dampening, AtLeast(0));
  s.Bool("nesterov", &opt->sgd.nesterov);
  s.Finish();
}

// decay_steps: -1 until known (null or absent: the run's steps).
void ReadLrSchedule(Section s, optim::LrSchedule* lr, int64_t* decay_steps) {
  std::string type;
  if (s.Choice("type", &type, {"cosine", "linear", "constant"})) lr->kind = *optim::ParseLrScheduleKind(type);
  s.Number("min_lr", &lr->min_lr, AtLeast(0));
  s.Int("warmup_steps", &lr->warmup_steps, 0);
  if (s.Has("decay_steps") && s.Get("decay_steps", false)->is_null()) {
    s.Get("decay_steps");  // null: the default
  } else {
    s.Int("decay_steps", decay_steps, 0);
  }
  s.Finish();
}

void ReadLossScaler(Section s, RunConfig* c) {
  optim::LossScalerOptions& l = c->train.loss_scaler;
  s.Choice("mode", &c->loss_scale_mode, {"auto", "dynamic", "none"});
  s.Int("initial_scale_power", &l.initial_scale_power, 0, 126);
  s.Int("loss_scale_window", &l.scale_window, 1);
  s.Int("hysteresis", &l.hysteresis, 1);
  s.Bool("consecutive_hysteresis", &l.consecutive_hysteresis);
  s.Number("min_loss_scale", &l.min_scale, Above(0));
  s.Number("scale_factor", &l.scale_factor, Above(1));
  s.Finish();
}

// aio {block_size, queue_depth, thread_count, single_submit, overlap_events}:
// DeepSpeed's names and defaults (runtime/nvme/aio_options.h).
void ReadAio(Section a, AioOptions* aio) {
  if (a.Int("block_size", &aio->block_size, kDirectIoAlignment, int64_t{1} << 30) &&
      aio->block_size % kDirectIoAlignment != 0) {
    a.Add("block_size", absl::StrCat("expected a multiple of ", kDirectIoAlignment,
                                     " bytes (the O_DIRECT alignment), found ", aio->block_size));
  }
  a.Int("queue_depth", &aio->queue_depth, 1, 4096);
  a.Int("thread_count", &aio->thread_count, 1, 64);
  a.Bool("single_submit", &aio->single_submit);
  a.Bool("overlap_events", &aio->overlap_events);
  a.Finish();
}

// A directory string, or null for "inherit" (*out unchanged).
bool PathOrNull(Section& s, const std::string& key, std::string* out) {
  const Json* v = s.Get(key);
  if (v == nullptr || v->is_null()) return false;
  return s.String(key, out);
}

// strategy.nvme_offload (ZeRO-Infinity; OffloadPolicy's nvme fields):
//   {nvme_path,
//    optimizer {enabled, nvme_path (null: the one above), buffer_count 4, pin_memory,
//               read_ahead true, write_behind true},
//    params {enabled, nvme_path, buffer_count 5, pin_memory, max_in_cpu 0, read_ahead, write_behind},
//    verify_checksums true, aio {...}}
void ReadNvmeOffload(Section s, OffloadPolicy* off) {
  std::string common;
  s.String("nvme_path", &common);
  auto kind = [&](const char* key, bool* enabled, NvmeOffload* n, bool params) {
    Section k = s.Child(key);
    k.Bool("enabled", enabled);
    std::string own;
    n->path = PathOrNull(k, "nvme_path", &own) ? own : common;
    k.Int("buffer_count", &n->buffer_count, 1, 1 << 16);
    k.Bool("pin_memory", &n->pin_memory);
    if (params) k.Int("max_in_cpu", &n->max_in_cpu, 0);
    k.Bool("read_ahead", &n->read_ahead);
    k.Bool("write_behind", &n->write_behind);
    if (*enabled && n->path.empty()) {
      k.Add("nvme_path", absl::StrCat("expected the directory for the ", key,
                                      " swap files (a local NVMe mount) here or in nvme_offload.nvme_path, found none"));
    }
    k.Finish();
  };
  kind("optimizer", &off->nvme_optimizer, &off->optimizer_nvme, false);
  kind("params", &off->nvme_params, &off->param_nvme, true);
  s.Bool("verify_checksums", &off->nvme_verify);
  ReadAio(s.Child("aio"), &off->aio);
  s.Finish();
}

// DeepSpeed's ZeRO stages: 0 NO_SHARD (DDP), 1 SHARD_OPTIMIZER, 2 SHARD_GRAD_OP, 3 FULL_SHARD.
ShardingStrategy StrategyOfZeroStage(int64_t stage) {
  switch (stage) {
    case 0: return ShardingStrategy::kNoShard;
    case 1: return ShardingStrategy::kShardOptimizer;
    case 2: return ShardingStrategy::kShardGradOp;
    default: return ShardingStrategy::kFullShard;
  }
}

void ReadStrategy(Section s, RunConfig* c) {
  ShardingOptions& sh = c->train.sharding;
  const bool resnet = c->model_type == "resnet";
  const std::vector<std::string>& module_types = resnet ? ResNetModuleTypes() : GptModuleTypes();
  std::string strategy;
  const bool named = s.Choice("sharding_strategy", &strategy,
                              {"FULL_SHARD", "SHARD_GRAD_OP", "SHARD_OPTIMIZER", "NO_SHARD", "HYBRID_SHARD"});
  if (named) sh.strategy = *ParseShardingStrategy(strategy);
  // zero_stage 1|2|3 (null: unset) names the strategy by its ZeRO stage. With
  // sharding_strategy too, they must agree unless exactly one of them comes
  // from the command line (which then wins).
  int64_t stage = 0;
  const bool stage_null = s.Has("zero_stage") && s.Get("zero_stage", false)->is_null();
  if (!stage_null && s.Int("zero_stage", &stage, 1, 3)) {
    const ShardingStrategy by_stage = StrategyOfZeroStage(stage);
    const bool stage_cli = s.ctx().Overridden(s.PathOf("zero_stage"));
    const bool name_cli = s.ctx().Overridden(s.PathOf("sharding_strategy"));
    if (!s.Has("sharding_strategy")) {
      sh.strategy = by_stage;
    } else if (named && sh.strategy != by_stage) {
      const std::string both = absl::StrCat(s.PathOf("zero_stage"), " ", stage, " is ", ShardingStrategyName(by_stage),
                                            " but ", s.PathOf("sharding_strategy"), " is ", strategy);
      if (stage_cli && !name_cli) {
        sh.strategy = by_stage;
        c->notes.push_back(absl::StrCat(both, ": the command line's ", s.PathOf("zero_stage"), " wins"));
      } else if (name_cli && !stage_cli) {
        c->notes.push_back(absl::StrCat(both, ": the command line's ", s.PathOf("sharding_strategy"), " wins"));
      } else {
        s.Add("zero_stage", absl::StrCat("ZeRO stage ", stage, " is ", ShardingStrategyName(by_stage), ", but ",
                                         s.PathOf("sharding_strategy"), " is ", strategy,
                                         ": keep one of them (or make them agree; a _base_ file's key counts too)"));
      }
    }
  }
  s.Int("hybrid_shard_size", &sh.hybrid_shard_size, 0);

  // auto_wrap_policy: ["Block", ...] (module types: FSDP's ModuleWrapPolicy /
  // transformer_auto_wrap_policy, Lightning's set of classes), a string (one
  // type, or "none"), {"min_num_params": n} (size_based_auto_wrap_policy) or null.
  if (const Json* w = s.Get("auto_wrap_policy")) {
    const std::string key = "auto_wrap_policy";
    std::vector<std::string> types;
    if (w->is_null() || (w->is_string() && absl::EqualsIgnoreCase(w->get<std::string>(), "none"))) {
      sh.wrap = WrapPolicy::None();
    } else if (w->is_object()) {
      const auto it = w->find("min_num_params");
      bool ok = w->size() == 1 && it != w->end();
      if (!ok) {
        std::vector<std::string> keys;
        for (auto k = w->begin(); k != w->end(); ++k) keys.push_back(k.key());
        s.Add(key, absl::StrCat("expected {\"min_num_params\": n} (size-based wrapping), found an object with ",
                                keys.empty() ? "no keys" : absl::StrCat("keys ", Quoted(keys))));
      } else {
        const Json& n = *it;
        const bool integral = n.is_number_integer() || n.is_number_unsigned() ||
                              (n.is_number_float() && std::nearbyint(n.get<double>()) == n.get<double>());
        if (!integral || n.get<double>() < 1) {
          s.Add(key + ".min_num_params", absl::StrCat("expected an integer >= 1, found ", Found(n)));
        } else {
          sh.wrap = WrapPolicy::BySize(static_cast<int64_t>(n.get<double>()));
        }
      }
    } else if (w->is_string() || w->is_array()) {
      Json list = w->is_string() ? Json::array({*w}) : *w;
      if (s.StringsOf(key, list, &types)) {
        bool ok = true;
        for (std::string& t : types) {
          std::string canonical;
          if (!s.ChoiceOf(key, Json(t), &canonical, module_types)) ok = false;
          t = canonical;
        }
        if (ok) sh.wrap = types.empty() ? WrapPolicy::None() : WrapPolicy::ByType({types.begin(), types.end()});
      }
    } else {
      s.Add(key, absl::StrCat("expected an array of module types (e.g. [\"Block\"]), {\"min_num_params\": n} "
                              "or null, found ", Found(*w)));
    }
  }

  if (const Json* p = s.Get("backward_prefetch")) {
    std::string name;
    if (p->is_null()) {
      sh.backward_prefetch = BackwardPrefetch::kNone;
    } else if (s.ChoiceOf("backward_prefetch", *p, &name, {"BACKWARD_PRE", "BACKWARD_POST", "NONE", "PRE", "POST"})) {
      sh.backward_prefetch = *ParseBackwardPrefetch(name);
    }
  }
  s.Bool("forward_prefetch", &sh.forward_prefetch);
  // limit_all_gathers: FSDP's boolean (true: our default of 2 units in flight) or the count (0: no limit).
  if (const Json* l = s.Get("limit_all_gathers")) {
    if (l->is_boolean()) {
      sh.limit_all_gathers = l->get<bool>() ? 2 : 0;
    } else {
      s.Int("limit_all_gathers", &sh.limit_all_gathers, 0, 1 << 20);
    }
  }
  // cpu_offload: true is FSDP's CPUOffload(offload_params=True): parameters,
  // gradients and the optimizer step on the host. An object picks: params,
  // grads, optimizer (OffloadPolicy), or FSDP's offload_params.
  if (const Json* off = s.Get("cpu_offload")) {
    if (off->is_boolean()) {
      const bool on = off->get<bool>();
      sh.offload = OffloadPolicy{.params = on, .grads = on, .optimizer = on};
    } else if (off->is_object()) {
      OffloadPolicy policy;
      bool ok = true;
      for (auto it = off->begin(); it != off->end(); ++it) {
        const std::string k = it.key();
        const std::string path = absl::StrCat("cpu_offload.", k);
        if (!it->is_boolean()) {
          s.Add(path, absl::StrCat("expected true or false, found ", Found(*it)));
          ok = false;
        } else if (k == "params") {
          policy.params = it->get<bool>();
        } else if (k == "grads") {
          policy.grads = it->get<bool>();
        } else if (k == "optimizer") {
          policy.optimizer = it->get<bool>();
        } else if (k == "offload_params") {
          if (it->get<bool>()) policy = OffloadPolicy{.params = true, .grads = true, .optimizer = true};
        } else {
          const std::string near = Closest(k, {"params", "grads", "optimizer", "offload_params"});
          s.Add(path, absl::StrCat("unknown key", near.empty() ? "; expected one of \"params\", \"grads\", "
                                                                 "\"optimizer\", \"offload_params\""
                                                               : absl::StrCat(" (did you mean \"", near, "\"?)")));
          ok = false;
        }
      }
      if (ok) sh.offload = policy;
    } else {
      s.Add("cpu_offload", absl::StrCat("expected true, false or {\"params\", \"grads\", \"optimizer\"}, found ",
                                        Found(*off)));
    }
  }
  // nvme_offload: null or false turns it off; an object as ReadNvmeOffload says.
  if (s.Has("nvme_offload") && (s.Get("nvme_offload", false)->is_null() || s.Get("nvme_offload", false)->is_boolean())) {
    const Json* n = s.Get("nvme_offload", false);
    if (n->is_boolean() && n->get<bool>()) {
      s.Add("nvme_offload", "expected an object ({\"nvme_path\": ..., \"optimizer\": {\"enabled\": true}, ...}), "
                            "null or false, found true");
    }
    sh.offload.nvme_optimizer = sh.offload.nvme_params = false;
  } else {
    ReadNvmeOffload(s.Child("nvme_offload"), &sh.offload);
  }
  if (s.Has("mixed_precision") && s.Get("mixed_precision", false)->is_null()) {
    sh.mixed_precision = MixedPrecision{};  // FSDP's mixed_precision=None
  } else {
    Section mp = s.Child("mixed_precision");
    mp.FloatDType("param_dtype", &sh.mixed_precision.param_dtype);
    mp.FloatDType("reduce_dtype", &sh.mixed_precision.reduce_dtype);
    mp.FloatDType("buffer_dtype", &sh.mixed_precision.buffer_dtype);
    // fp32_module_types (FSDP's _module_classes_to_ignore): module types that
    // stay fp32 units of their own under mixed precision, Note [BatchNorm under
    // mixed precision]; ["BatchNorm2d", "LayerNorm"] keeps the GPT's LayerNorms fp32.
    std::vector<std::string> fp32_types;
    if (mp.Strings("fp32_module_types", &fp32_types)) {
      std::vector<std::string> known = module_types;
      if (!resnet) known.push_back("BatchNorm2d");
      bool ok = true;
      for (std::string& t : fp32_types) {
        std::string canonical;
        if (!mp.ChoiceOf("fp32_module_types", Json(t), &canonical, known)) ok = false;
        t = canonical;
      }
      if (ok) sh.mixed_precision.fp32_module_types = {fp32_types.begin(), fp32_types.end()};
    }
    // FSDP's keep_low_precision_grads: gradient shards stay in reduce_dtype.
    mp.Bool("keep_low_precision_grads", &sh.mixed_precision.keep_low_precision_grads);
    mp.Finish();
  }
  if (resnet) {
    s.Bool("sync_module_states", &sh.sync_module_states);
    s.Strings("ignored_modules", &sh.ignored_modules);
    RejectKeys(s, kGptStrategyKeys, "resnet");
    s.Finish();
    return;
  }
  // activation_checkpointing: the module types recomputed in backward
  // (Lightning's activation_checkpointing_policy); the GPT recomputes whole blocks.
  std::vector<std::string> ac;
  if (s.Strings("activation_checkpointing", &ac)) {
    bool ok = true;
    for (const std::string& t : ac) {
      if (t != "Block") {
        s.Add("activation_checkpointing",
              absl::StrCat("expected [] or [\"Block\"] (the GPT recomputes whole blocks), found \"", t, "\"",
                           absl::EqualsIgnoreCase(t, "block") ? " (did you mean \"Block\"?)" : ""));
        ok = false;
      }
    }
    if (ok) c->train.model.activation_checkpointing = !ac.empty();
  }
  // state_dict_type: FSDP's names or Lightning's. FSDP's LOCAL_STATE_DICT (each
  // rank's flat shard as is) has no format of its own here: SHARDED is that plus names.
  if (const Json* t = s.Get("state_dict_type")) {
    std::string name;
    if (t->is_string() && absl::EqualsIgnoreCase(t->get<std::string>(), "LOCAL_STATE_DICT")) {
      s.Add("state_dict_type", "expected \"SHARDED_STATE_DICT\" or \"FULL_STATE_DICT\", found \"LOCAL_STATE_DICT\" "
                               "(not supported: SHARDED_STATE_DICT holds each rank's shard with names)");
    } else if (s.ChoiceOf("state_dict_type", *t, &name,
                          {"SHARDED_STATE_DICT", "FULL_STATE_DICT", "sharded", "full"})) {
      c->train.state_dict_type = absl::StartsWithIgnoreCase(name, "full") ? "full" : "sharded";
    }
  }
  s.Bool("sync_module_states", &sh.sync_module_states);
  s.Bool("skip_init_weights", &c->skip_init_weights);
  s.Strings("ignored_modules", &sh.ignored_modules);
  s.Finish();
}

void ReadCheckpoint(Section s, RunConfig* c) {
  s.String("init_from", &c->train.init_from);
  s.String("save_weights", &c->train.save);
  s.Int("save_every", &c->train.save_every, 0);
  s.String("resume", &c->train.resume);
  s.Bool("async_save", &c->train.async_save);
  s.Int("keep_last", &c->train.keep_last, 0, 1 << 20);
  s.Bool("write_tied_once", &c->train.write_tied_once);
  s.Finish();
}

void ReadSample(Section s, TrainOptions* o) {
  s.Int("tokens", &o->sample_tokens, 0);
  s.Number("temperature", &o->temperature, Above(0));
  s.Int("top_k", &o->top_k, 1);
  s.Finish();
}

void ReadTrace(Section s, TrainOptions* o) {
  s.String("path", &o->trace);
  s.Int("from_step", &o->trace_from, 0);
  s.Int("steps", &o->trace_steps, 1);
  s.Finish();
}

// ============================================================ DeepSpeed

// Note [DeepSpeed mapping]
// A "deepspeed" block holds DeepSpeed config keys; they set the same
// TrainOptions as the FSDP-style keys. A setting given both ways is a
// contradiction (even with equal values: one place to read).
//   zero_optimization.stage 3 -> FULL_SHARD; 2 -> SHARD_GRAD_OP; 1 ->
//     SHARD_OPTIMIZER (ZeRO-1: optimizer state and master weights sharded, the
//     whole gradient all-reduced and kept on every rank, Note [Replicated
//     gradients] in sharding/sharded_model.h); 0 (DeepSpeed's default)
//     -> NO_SHARD (DDP). Also strategy.zero_stage, which must then agree.
//   offload_optimizer.device "cpu" -> cpu_offload {grads, optimizer} (ZeRO-Offload:
//     the step runs on the host); offload_param.device "cpu" -> params too
//     (ZeRO-Infinity; DeepSpeed allows it with stage 3 only, and so do we).
//   device "nvme" -> nvme_offload {optimizer | params: enabled, nvme_path,
//     buffer_count, pin_memory, max_in_cpu}; offload_optimizer's pipeline_read /
//     pipeline_write -> read_ahead / write_behind (on when absent: DeepSpeed's
//     default is off); the top-level aio block -> nvme_offload.aio.
//     max_in_cpu keeps DeepSpeed's default (1e9 elements) here, 0 in nvme_offload.
//   bf16.enabled -> mixed_precision {bf16, bf16, bf16}; fp16.enabled -> f16 and
//     dynamic loss scaling with the fp16 block's keys (loss_scale 0 = dynamic; a
//     static scale is not supported). The reduction dtype is the model's
//     (DeepSpeed's default) unless communication_data_type says otherwise.
//   overlap_comm -> forward and backward prefetch (on: forward_prefetch, BACKWARD_PRE;
//     off: neither): what overlaps communication with compute here.
//   optimizer {type, params}: "Adam" is AdamW unless params.adam_w_mode is false
//     (DeepSpeed's FusedAdam default), "AdamW", "SGD".
//   Bucket sizes and the other tuning keys of zero_optimization are read
//   (type-checked) without effect: the unit of communication is the wrap unit.
void ReadDeepSpeed(Section ds, const Json& root, RunConfig* c, Context* ctx) {
  TrainOptions& o = c->train;
  ShardingOptions& sh = o.sharding;
  // Whether the config (after overrides) holds the dotted `path`.
  auto given = [&](const std::string& path) {
    const Json* node = &root;
    for (const std::string& k : std::vector<std::string>(absl::StrSplit(path, '.'))) {
      if (!node->is_object() || !node->contains(k)) return false;
      node = &(*node)[k];
    }
    return true;
  };
  // A setting given both as an FSDP-style key (`path`) and in the DeepSpeed
  // block (`ds_paths`): the one set on the command line wins; both in the
  // file (or both on the command line) is a contradiction. True when the
  // DeepSpeed value is to be used.
  auto use_ds = [&](const std::vector<std::string>& ds_paths, const std::string& path) {
    if (!given(path)) return true;
    bool ds_cli = false;
    for (const std::string& p : ds_paths) ds_cli = ds_cli || ctx->Overridden(p);
    const bool cli = ctx->Overridden(path);
    if (cli && !ds_cli) {
      c->notes.push_back(absl::StrCat(path, " from the command line wins over ", absl::StrJoin(ds_paths, ", ")));
      return false;
    }
    if (ds_cli && !cli) return true;
    ctx->Add(path, absl::StrCat("also set by ", absl::StrJoin(ds_paths, ", "), ": keep one of them"));
    return false;
  };
  std::vector<std::string> without_effect;

  // ---- batch, accumulation, clipping, printing
  int64_t micro = 0;
  if (ds.Int("train_micro_batch_size_per_gpu", &micro, 1) &&
      use_ds({ds.PathOf("train_micro_batch_size_per_gpu")}, "train.batch_size")) {
    o.batch_size = micro;
  }
  int64_t accum = 0;
  if (ds.Int("gradient_accumulation_steps", &accum, 1) &&
      use_ds({ds.PathOf("gradient_accumulation_steps")}, "train.grad_accum_steps")) {
    o.grad_accum_steps = accum;
  }
  ds.Int("train_batch_size", &c->train_batch_size, 1);
  double clip = 0;
  if (ds.Number("gradient_clipping", &clip, AtLeast(0)) && use_ds({ds.PathOf("gradient_clipping")}, "train.grad_clip")) {
    o.grad_clip = clip;
  }
  int64_t print = 0;
  if (ds.Int("steps_per_print", &print, 1) && use_ds({ds.PathOf("steps_per_print")}, "train.log_every")) {
    o.log_every = print;
  }
  for (const char* k : {"wall_clock_breakdown", "zero_allow_untested_optimizer"}) {
    bool unused = false;
    if (ds.Bool(k, &unused)) without_effect.push_back(ds.PathOf(k));
  }

  // ---- zero_optimization
  Section zero = ds.Child("zero_optimization");
  int64_t stage = 0;
  zero.Int("stage", &stage, 0, 3);
  // strategy.zero_stage: null there means unset.
  const bool zero_stage_given = given("strategy.zero_stage") && !root.at("strategy").at("zero_stage").is_null();
  if (use_ds({zero.PathOf("stage")}, "strategy.sharding_strategy") &&
      (!zero_stage_given || use_ds({zero.PathOf("stage")}, "strategy.zero_stage"))) {
    sh.strategy = StrategyOfZeroStage(stage);
    if (stage == 0) {
      c->notes.push_back("deepspeed.zero_optimization.stage 0 runs as NO_SHARD (DDP: gradients all-reduced)");
    }
  }
  // offload_optimizer / offload_param {device "none"|"cpu"|"nvme", pin_memory,
  // nvme_path, buffer_count; offload_param: max_in_cpu (DeepSpeed's default 1e9)}.
  struct DsOffload {
    std::string device = "none";
    NvmeOffload nvme;
  };
  auto read_device = [&](const char* key, bool params) {
    Section dev = zero.Child(key);
    DsOffload out;
    out.nvme.buffer_count = params ? 5 : 4;
    out.nvme.max_in_cpu = params ? 1000000000 : 0;
    if (const Json* d = dev.Get("device")) dev.ChoiceOf("device", *d, &out.device, {"none", "cpu", "nvme"});
    const bool nvme = out.device == "nvme";
    if (dev.Bool("pin_memory", &out.nvme.pin_memory) && !nvme) without_effect.push_back(dev.PathOf("pin_memory"));
    if (PathOrNull(dev, "nvme_path", &out.nvme.path) && !nvme) without_effect.push_back(dev.PathOf("nvme_path"));
    if (dev.Int("buffer_count", &out.nvme.buffer_count, 1, 1 << 16) && !nvme) {
      without_effect.push_back(dev.PathOf("buffer_count"));
    }
    if (params && dev.Int("max_in_cpu", &out.nvme.max_in_cpu, 0) && !nvme) {
      without_effect.push_back(dev.PathOf("max_in_cpu"));
    }
    // Buffers are sized to the largest unit here.
    if (dev.Get("buffer_size") != nullptr) without_effect.push_back(dev.PathOf("buffer_size"));
    if (!params) {
      // Overlap of the optimizer's swaps with its step; on unless turned off
      // (DeepSpeed's default is off).
      if (dev.Bool("pipeline_read", &out.nvme.read_ahead) && !nvme) without_effect.push_back(dev.PathOf("pipeline_read"));
      if (dev.Bool("pipeline_write", &out.nvme.write_behind) && !nvme) {
        without_effect.push_back(dev.PathOf("pipeline_write"));
      }
      bool unused = false;
      if (dev.Bool("fast_init", &unused)) without_effect.push_back(dev.PathOf("fast_init"));
    }
    if (nvme && out.nvme.path.empty()) {
      dev.Add("nvme_path", "expected the directory for the NVMe swap files with device \"nvme\", found none");
    }
    dev.Finish();
    return out;
  };
  const DsOffload offload_optimizer = read_device("offload_optimizer", false);
  const DsOffload offload_param = read_device("offload_param", true);
  if (offload_param.device != "none" && stage != 3 && ctx->Ok({zero.PathOf("stage")})) {
    ctx->Add(zero.PathOf("offload_param.device"),
             absl::StrCat("parameter offload needs zero_optimization.stage 3 (as in DeepSpeed), found stage ", stage));
  }
  const bool opt_cpu = offload_optimizer.device == "cpu", param_cpu = offload_param.device == "cpu";
  if (use_ds({zero.PathOf("offload_optimizer"), zero.PathOf("offload_param")}, "strategy.cpu_offload")) {
    sh.offload.params = param_cpu;
    sh.offload.grads = sh.offload.optimizer = opt_cpu;
  }
  // ZeRO-Infinity: device "nvme" and the aio block -> strategy.nvme_offload.
  Section aio = ds.Child("aio");
  if (use_ds({zero.PathOf("offload_optimizer"), zero.PathOf("offload_param"), aio.path()}, "strategy.nvme_offload")) {
    OffloadPolicy& off = sh.offload;
    off.nvme_optimizer = offload_optimizer.device == "nvme";
    off.nvme_params = offload_param.device == "nvme";
    off.optimizer_nvme = offload_optimizer.nvme;
    off.param_nvme = offload_param.nvme;
    ReadAio(aio, &off.aio);
  } else {
    AioOptions unused;
    ReadAio(aio, &unused);
  }
  bool overlap = false;
  if (zero.Bool("overlap_comm", &overlap)) {
    if (use_ds({zero.PathOf("overlap_comm")}, "strategy.forward_prefetch")) sh.forward_prefetch = overlap;
    if (use_ds({zero.PathOf("overlap_comm")}, "strategy.backward_prefetch")) {
      sh.backward_prefetch = overlap ? BackwardPrefetch::kBackwardPre : BackwardPrefetch::kNone;
    }
  }
  for (const char* k : {"contiguous_gradients", "reduce_scatter", "allgather_partitions", "round_robin_gradients",
                        "stage3_gather_16bit_weights_on_model_save"}) {
    bool unused = false;
    if (zero.Bool(k, &unused)) without_effect.push_back(zero.PathOf(k));
  }
  for (const char* k : {"reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                        "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                        "stage3_max_reuse_distance", "sub_group_size"}) {
    const Json* v = zero.Get(k);
    if (v == nullptr) continue;
    if (v->is_number() || (v->is_string() && v->get<std::string>() == "auto")) {
      without_effect.push_back(zero.PathOf(k));
    } else {
      zero.Add(k, absl::StrCat("expected a number or \"auto\", found ", Found(*v)));
    }
  }
  zero.Finish();

  // ---- precision and loss scaling
  Section bf16 = ds.Child("bf16");
  bool bf16_on = false;
  bf16.Bool("enabled", &bf16_on);
  bf16.Finish();
  Section fp16 = ds.Child("fp16");
  bool fp16_on = false;
  fp16.Bool("enabled", &fp16_on);
  if (fp16_on && bf16_on) {
    ctx->Add(fp16.PathOf("enabled"), "fp16 and bf16 both on (deepspeed.bf16.enabled is true too): expected at most one");
  }
  const std::vector<std::string> precision = {bf16.PathOf("enabled"), fp16.PathOf("enabled")};
  const DType model_dtype = fp16_on ? DType::kF16 : bf16_on ? DType::kBF16 : DType::kF32;
  MixedPrecision& mp = sh.mixed_precision;
  if (use_ds(precision, "strategy.mixed_precision.param_dtype")) mp.param_dtype = model_dtype;
  if (use_ds(precision, "strategy.mixed_precision.buffer_dtype")) mp.buffer_dtype = model_dtype;
  DType comm_dtype = model_dtype;  // DeepSpeed's default: the model's dtype
  ds.FloatDType("communication_data_type", &comm_dtype);
  if (use_ds({ds.PathOf("communication_data_type"), bf16.PathOf("enabled"), fp16.PathOf("enabled")},
             "strategy.mixed_precision.reduce_dtype")) {
    mp.reduce_dtype = comm_dtype;
  }
  if (fp16_on && use_ds({fp16.PathOf("enabled")}, "loss_scaler.mode")) c->loss_scale_mode = "dynamic";
  double static_scale = 0;
  if (fp16.Number("loss_scale", &static_scale, AtLeast(0)) && static_scale != 0) {
    fp16.Add("loss_scale", absl::StrCat("expected 0 (dynamic loss scaling; a static loss scale is not supported), "
                                        "found ", static_scale));
  }
  optim::LossScalerOptions scaler = o.loss_scaler;
  if (fp16.Int("initial_scale_power", &scaler.initial_scale_power, 0, 126) &&
      use_ds({fp16.PathOf("initial_scale_power")}, "loss_scaler.initial_scale_power")) {
    o.loss_scaler.initial_scale_power = scaler.initial_scale_power;
  }
  if (fp16.Int("loss_scale_window", &scaler.scale_window, 1) &&
      use_ds({fp16.PathOf("loss_scale_window")}, "loss_scaler.loss_scale_window")) {
    o.loss_scaler.scale_window = scaler.scale_window;
  }
  if (fp16.Int("hysteresis", &scaler.hysteresis, 1) && use_ds({fp16.PathOf("hysteresis")}, "loss_scaler.hysteresis")) {
    o.loss_scaler.hysteresis = scaler.hysteresis;
  }
  if (fp16.Bool("consecutive_hysteresis", &scaler.consecutive_hysteresis) &&
      use_ds({fp16.PathOf("consecutive_hysteresis")}, "loss_scaler.consecutive_hysteresis")) {
    o.loss_scaler.consecutive_hysteresis = scaler.consecutive_hysteresis;
  }
  if (fp16.Number("min_loss_scale", &scaler.min_scale, Above(0)) &&
      use_ds({fp16.PathOf("min_loss_scale")}, "loss_scaler.min_loss_scale")) {
    o.loss_scaler.min_scale = scaler.min_scale;
  }
  fp16.Finish();

  // ---- optimizer {type, params}
  Section opt = ds.Child("optimizer");
  std::string type;
  if (opt.Choice("type", &type, {"Adam", "AdamW", "SGD"}) && use_ds({opt.PathOf("type")}, "optimizer.type")) {
    o.optimizer.kind = type == "SGD" ? optim::OptimizerKind::kSgd : optim::OptimizerKind::kAdamW;
  }
  Section params = opt.Child("params");
  double x = 0;
  if (params.Number("lr", &x, AtLeast(0)) && use_ds({params.PathOf("lr")}, "optimizer.lr")) o.optimizer.lr = x;
  if (params.Number("weight_decay", &x, AtLeast(0)) && use_ds({params.PathOf("weight_decay")}, "optimizer.weight_decay")) {
    o.optimizer.weight_decay = x;
  }
  if (const Json* b = params.Get("betas")) {
    const Range unit{.min = 0, .max = 1, .max_open = true};
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number() ||
        !unit.Contains((*b)[0].get<double>()) || !unit.Contains((*b)[1].get<double>())) {
      params.Add("betas", absl::StrCat("expected [beta1, beta2], two numbers in [0, 1), found ", Found(*b)));
    } else if (use_ds({params.PathOf("betas")}, "optimizer.betas")) {
      o.optimizer.adamw.beta1 = (*b)[0].get<double>();
      o.optimizer.adamw.beta2 = (*b)[1].get<double>();
    }
  }
  if (params.Number("eps", &x, AtLeast(0)) && use_ds({params.PathOf("eps")}, "optimizer.eps")) o.optimizer.adamw.eps = x;
  bool adam_w_mode = true;
  if (params.Bool("adam_w_mode", &adam_w_mode) && type == "Adam" && !adam_w_mode &&
      use_ds({opt.PathOf("type"), params.PathOf("adam_w_mode")}, "optimizer.type")) {
    o.optimizer.kind = optim::OptimizerKind::kAdam;
  }
  if (params.Number("momentum", &x, AtLeast(0)) && use_ds({params.PathOf("momentum")}, "optimizer.momentum")) {
    o.optimizer.sgd.momentum = x;
  }
  if (params.Number("dampening", &x, AtLeast(0)) && use_ds({params.PathOf("dampening")}, "optimizer.dampening")) {
    o.optimizer.sgd.dampening = x;
  }
  bool nesterov = false;
  if (params.Bool("nesterov", &nesterov) && use_ds({params.PathOf("nesterov")}, "optimizer.nesterov")) {
    o.optimizer.sgd.nesterov = nesterov;
  }
  params.Finish();
  opt.Finish();
  if (ds.Get("scheduler", false) != nullptr) {
    ctx->Add(ds.PathOf("scheduler"), "not supported: expected the schedule in lr_schedule {type, min_lr, "
                                     "warmup_steps, decay_steps}");
  }
  ds.Finish();
  if (!without_effect.empty()) {
    c->notes.push_back(absl::StrCat("read without effect (communication runs per wrap unit): ",
                                    absl::StrJoin(without_effect, ", ")));
  }
}

// ============================================================ cross-field checks

void CheckWorld(const RunConfig& c, int world, const std::string& world_source, Context* ctx) {
  const ShardingOptions& sh = c.train.sharding;
  if (sh.strategy == ShardingStrategy::kHybridShard && ctx->Ok({"strategy.hybrid_shard_size"})) {
    if (sh.hybrid_shard_size < 1 || world % sh.hybrid_shard_size != 0) {
      ctx->Add("strategy.hybrid_shard_size",
               absl::StrCat("HYBRID_SHARD needs a shard group size >= 1 that divides the world size ", world,
                            " (", world_source, "), found ", sh.hybrid_shard_size));
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
  if (c->backend != "mpi" && ctx->Ok({"distributed.world_size"})) {
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
    value = Json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = raw;
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

OrderedJson ToJson(const RunConfig& c);

absl::StatusOr<RunConfig> Parse(Json root, const std::vector<std::string>& overrides, const std::string& source,
                                std::vector<std::string>* known_leaves) {
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

  RunConfig c = DefaultRunConfig();
  c.source = source;
  std::string stem = source;
  if (size_t slash = stem.find_last_of('/'); slash != std::string::npos) stem = stem.substr(slash + 1);
  if (size_t dot = stem.find_last_of('.'); dot != std::string::npos && dot > 0) stem = stem.substr(0, dot);
  c.experiment_name = source == "<defaults>" || stem.empty() ? "default" : stem;

  Section top(&ctx, "", &root);
  std::string description;
  top.String("description", &description);
  top.String("experiment_name", &c.experiment_name);
  top.String("work_dir", &c.work_dir);
  if (c.experiment_name.empty() || absl::StrContains(c.experiment_name, "/")) {
    ctx.Add("experiment_name", absl::StrCat("expected a non-empty name without '/', found \"", c.experiment_name, "\""));
  }
  {
    Section d = top.Child("distributed");
    d.Int("world_size", &c.world_size, 1, 4096);
    d.Choice("backend", &c.backend, {"local", "mpi", "nccl"});
    d.Finish();
  }
  Section model = top.Child("model");
  model.Choice("type", &c.model_type, {"gpt", "resnet"});
  int64_t decay_steps = -1;
  if (c.model_type == "resnet") {
    // The vision job (ResNetTrainOptions); train.sharding holds its strategy too.
    c.train.sharding.wrap = WrapPolicy::ByType({"BasicBlock"});
    ReadResNetModel(model, &c.resnet.model);
    ReadShapesData(top.Child("data"), &c.resnet.data);
    ReadResNetTrain(top.Child("train"), &c.resnet);
    ReadOptimizer(top.Child("optimizer"), &c.resnet.optimizer, &c.resnet.lr);
    ReadLrSchedule(top.Child("lr_schedule"), &c.resnet.lr, &decay_steps);
    ReadStrategy(top.Child("strategy"), &c);
    {
      Section k = top.Child("checkpoint");
      k.String("save_weights", &c.resnet.save);
      RejectKeys(k, kGptCheckpointKeys, "resnet");
      k.Finish();
    }
    RejectKeys(top, kGptSections, "resnet");
    top.Finish();
    c.resnet.sharding = c.train.sharding;
    c.resnet.lr.lr = c.resnet.optimizer.lr;
    c.resnet.lr.decay_steps = decay_steps >= 0 ? decay_steps : std::max(c.resnet.steps, c.resnet.lr.warmup_steps);
  } else {
    ReadModel(model, &c.train.model);
    ReadData(top.Child("data"), &c.train);
    ReadTrain(top.Child("train"), &c.train);
    ReadOptimizer(top.Child("optimizer"), &c.train.optimizer, &c.train.lr);
    ReadLrSchedule(top.Child("lr_schedule"), &c.train.lr, &decay_steps);
    ReadLossScaler(top.Child("loss_scaler"), &c);
    ReadStrategy(top.Child("strategy"), &c);
    ReadCheckpoint(top.Child("checkpoint"), &c);
    ReadSample(top.Child("sample"), &c.train);
    ReadTrace(top.Child("trace"), &c.train);
    {
      Section ds = top.Child("deepspeed");
      if (ds.present()) ReadDeepSpeed(ds, root, &c, &ctx);
    }
    top.Finish();
    c.train.lr.lr = c.train.optimizer.lr;
    c.train.lr.decay_steps = decay_steps >= 0 ? decay_steps : std::max(c.train.steps, c.train.lr.warmup_steps);
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
  if (known_leaves != nullptr) *known_leaves = ctx.known_leaves;
  if (!ctx.problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": ", ctx.problems.size(),
                                                   ctx.problems.size() == 1 ? " problem" : " problems", "\n  ",
                                                   absl::StrJoin(ctx.problems, "\n  ")));
  }
  if (!description.empty()) c.notes.insert(c.notes.begin(), description);
  return c;
}

// ============================================================ writing

// The double with the fewest digits that reads back as `f` (0.1f -> 0.1, not 0.10000000149).
double ShortestDouble(float f) {
  for (int digits = 1; digits < 10; ++digits) {
    const double d = std::strtod(absl::StrFormat("%.*g", digits, f).c_str(), nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return f;
}

// model.type "resnet": the GPT's sections replaced by the vision job's
// (strategy is shared: train.sharding holds the same ShardingOptions).
void ToResNetJson(const RunConfig& c, OrderedJson* j) {
  const ResNetTrainOptions& r = c.resnet;
  (*j)["model"] = {{"type", "resnet"},
                   {"widths", r.model.widths},
                   {"depths", r.model.depths},
                   {"num_classes", r.model.num_classes},
                   {"stem", r.model.stem == nn::ResNetStem::kCifar ? "cifar" : "imagenet"},
                   {"zero_init_residual", r.model.zero_init_residual}};
  (*j)["data"] = {{"image_size", r.data.image_size},
                  {"train_size", r.data.train_size},
                  {"val_size", r.data.val_size},
                  {"seed", r.data.seed},
                  {"noise", ShortestDouble(r.data.noise)}};
  (*j)["train"] = {{"steps", r.steps},
                   {"batch_size", r.batch_size},
                   {"seed", r.seed},
                   {"log_every", r.log_every},
                   {"eval_every", r.eval_every},
                   {"eval_batch", r.eval_batch},
                   {"average_bn_stats", r.average_bn_stats},
                   {"threads_per_rank", r.threads_per_rank},
                   {"tensorboard", r.tensorboard}};
  (*j)["optimizer"] = {{"type", std::string(optim::OptimizerKindName(r.optimizer.kind))},
                       {"lr", r.optimizer.lr},
                       {"weight_decay", r.optimizer.weight_decay},
                       {"betas", {r.optimizer.adamw.beta1, r.optimizer.adamw.beta2}},
                       {"eps", r.optimizer.adamw.eps},
                       {"momentum", r.optimizer.sgd.momentum},
                       {"dampening", r.optimizer.sgd.dampening},
                       {"nesterov", r.optimizer.sgd.nesterov}};
  (*j)["lr_schedule"] = {{"type", std::string(optim::LrScheduleKindName(r.lr.kind))},
                         {"min_lr", r.lr.min_lr},
                         {"warmup_steps", r.lr.warmup_steps},
                         {"decay_steps", r.lr.decay_steps}};
  for (const std::string& k : kGptStrategyKeys) (*j)["strategy"].erase(k);
  (*j)["checkpoint"] = {{"save_weights", r.save}};
  for (const std::string& k : kGptSections) j->erase(k);
}

OrderedJson ToJson(const RunConfig& c) {
  const TrainOptions& o = c.train;
  const ShardingOptions& sh = o.sharding;
  OrderedJson j;
  j["experiment_name"] = c.experiment_name;
  j["work_dir"] = c.work_dir;
  j["distributed"] = {{"world_size", c.world_size}, {"backend", c.backend}};
  j["model"] = {{"type", "gpt"},
                {"vocab_size", o.model.vocab_size}, {"block_size", o.model.block_size},
                {"n_layer", o.model.n_layer},       {"n_head", o.model.n_head},
                {"n_embd", o.model.n_embd},         {"dropout", o.model.dropout},
                {"bias", o.model.bias}};
  j["data"] = {{"path", o.data}, {"val_fraction", o.val_fraction}};
  j["train"] = {{"steps", o.steps},
                {"batch_size", o.batch_size},
                {"grad_accum_steps", o.grad_accum_steps},
                {"accumulate", o.no_sync ? "no_sync" : "sharded"},
                {"grad_clip", o.grad_clip},
                {"seed", o.seed},
                {"log_every", o.log_every},
                {"eval_every", o.eval_every},
                {"eval_iters", o.eval_iters},
                {"device_memory_limit", o.device_memory_limit},
                {"tensorboard", o.tensorboard}};
  j["optimizer"] = {{"type", std::string(optim::OptimizerKindName(o.optimizer.kind))},
                    {"lr", o.optimizer.lr},
                    {"weight_decay", o.optimizer.weight_decay},
                    {"betas", {o.optimizer.adamw.beta1, o.optimizer.adamw.beta2}},
                    {"eps", o.optimizer.adamw.eps},
                    {"momentum", o.optimizer.sgd.momentum},
                    {"dampening", o.optimizer.sgd.dampening},
                    {"nesterov", o.optimizer.sgd.nesterov}};
  j["lr_schedule"] = {{"type", std::string(optim::LrScheduleKindName(o.lr.kind))},
                      {"min_lr", o.lr.min_lr},
                      {"warmup_steps", o.lr.warmup_steps},
                      {"decay_steps", o.lr.decay_steps}};
  j["loss_scaler"] = {{"mode", c.loss_scale_mode},
                      {"initial_scale_power", o.loss_scaler.initial_scale_power},
                      {"loss_scale_window", o.loss_scaler.scale_window},
                      {"hysteresis", o.loss_scaler.hysteresis},
                      {"consecutive_hysteresis", o.loss_scaler.consecutive_hysteresis},
                      {"min_loss_scale", o.loss_scaler.min_scale},
                      {"scale_factor", o.loss_scaler.scale_factor}};
  OrderedJson s;
  s["sharding_strategy"] = std::string(ShardingStrategyName(sh.strategy));
  s["zero_stage"] = nullptr;  // sharding_strategy says it
  s["hybrid_shard_size"] = sh.hybrid_shard_size;
  switch (sh.wrap.kind) {
    case WrapPolicy::Kind::kByType: s["auto_wrap_policy"] = std::vector<std::string>(sh.wrap.types.begin(), sh.wrap.types.end()); break;
    case WrapPolicy::Kind::kBySize: s["auto_wrap_policy"] = {{"min_num_params", sh.wrap.min_num_params}}; break;
    default: s["auto_wrap_policy"] = nullptr; break;
  }
  s["backward_prefetch"] = sh.backward_prefetch == BackwardPrefetch::kNone
                               ? OrderedJson(nullptr)
                               : OrderedJson(std::string(BackwardPrefetchName(sh.backward_prefetch)));
  s["forward_prefetch"] = sh.forward_prefetch;
  s["limit_all_gathers"] = sh.limit_all_gathers;
  const OffloadPolicy& off = sh.offload;
  if (!off.params && !off.grads && !off.optimizer) {
    s["cpu_offload"] = false;
  } else if (off.params && off.grads && off.optimizer) {
    s["cpu_offload"] = true;
  } else {
    s["cpu_offload"] = {{"params", off.params}, {"grads", off.grads}, {"optimizer", off.optimizer}};
  }
  {
    // One nvme_path for both kinds unless they differ.
    const std::string common = !off.optimizer_nvme.path.empty() ? off.optimizer_nvme.path : off.param_nvme.path;
    auto own = [&](const std::string& path) { return path == common ? OrderedJson(nullptr) : OrderedJson(path); };
    s["nvme_offload"] = {
        {"nvme_path", common},
        {"optimizer", {{"enabled", off.nvme_optimizer},
                       {"nvme_path", own(off.optimizer_nvme.path)},
                       {"buffer_count", off.optimizer_nvme.buffer_count},
                       {"pin_memory", off.optimizer_nvme.pin_memory},
                       {"read_ahead", off.optimizer_nvme.read_ahead},
                       {"write_behind", off.optimizer_nvme.write_behind}}},
        {"params", {{"enabled", off.nvme_params},
                    {"nvme_path", own(off.param_nvme.path)},
                    {"buffer_count", off.param_nvme.buffer_count},
                    {"pin_memory", off.param_nvme.pin_memory},
                    {"max_in_cpu", off.param_nvme.max_in_cpu},
                    {"read_ahead", off.param_nvme.read_ahead},
                    {"write_behind", off.param_nvme.write_behind}}},
        {"verify_checksums", off.nvme_verify},
        {"aio", {{"block_size", off.aio.block_size},
                 {"queue_depth", off.aio.queue_depth},
                 {"thread_count", off.aio.thread_count},
                 {"single_submit", off.aio.single_submit},
                 {"overlap_events", off.aio.overlap_events}}}};
  }
  s["mixed_precision"] = {{"param_dtype", std::string(DTypeName(sh.mixed_precision.param_dtype))},
                          {"reduce_dtype", std::string(DTypeName(sh.mixed_precision.reduce_dtype))},
                          {"buffer_dtype", std::string(DTypeName(sh.mixed_precision.buffer_dtype))},
                          {"fp32_module_types", std::vector<std::string>(sh.mixed_precision.fp32_module_types.begin(),
                                                                         sh.mixed_precision.fp32_module_types.end())},
                          {"keep_low_precision_grads", sh.mixed_precision.keep_low_precision_grads}};
  s["activation_checkpointing"] =
      o.model.activation_checkpointing ? std::vector<std::string>{"Block"} : std::vector<std::string>{};
  s["state_dict_type"] = o.state_dict_type == "full" ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT";
  s["sync_module_states"] = sh.sync_module_states;
  s["skip_init_weights"] = c.skip_init_weights;
  s["ignored_modules"] = sh.ignored_modules;
  j["strategy"] = s;
  j["checkpoint"] = {{"init_from", o.init_from},
                     {"save_weights", o.save},
                     {"save_every", o.save_every},
                     {"resume", o.resume},
                     {"async_save", o.async_save},
                     {"keep_last", o.keep_last},
                     {"write_tied_once", o.write_tied_once}};
  j["sample"] = {{"tokens", o.sample_tokens}, {"temperature", o.temperature}, {"top_k", o.top_k}};
  j["trace"] = {{"path", o.trace}, {"from_step", o.trace_from}, {"steps", o.trace_steps}};
  if (c.model_type == "resnet") ToResNetJson(c, &j);
  return j;
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
    try {
      root = Json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
    } catch (const Json::parse_error& e) {
      std::string what = e.what();
      if (size_t p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
      return absl::InvalidArgumentError(absl::StrCat("config ", source, ": expected JSON, found a ", what));
    }
  }
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
  return Parse(std::move(root), overrides, source, nullptr);
}

absl::StatusOr<RunConfig> LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  ZS_ASSIGN_OR_RETURN(Json root, ReadJsonFile(path, 0));
  return Parse(std::move(root), overrides, path, nullptr);
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
  std::vector<std::string> leaves;
  (void)Parse(Json::object(), {}, "<defaults>", &leaves);
  return leaves;
}

// ============================================================ flags

absl::StatusOr<std::vector<std::string>> OverridesFromFlags(
    const std::vector<std::pair<std::string, std::string>>& flags) {
  // Flags whose value is the config value as is.
  static const auto* direct = new std::map<std::string, std::string>{
      {"n_layer", "model.n_layer"},
      {"n_head", "model.n_head"},
      {"n_embd", "model.n_embd"},
      {"block_size", "model.block_size"},
      {"vocab_size", "model.vocab_size"},
      {"dropout", "model.dropout"},
      {"data", "data.path"},
      {"batch_size", "train.batch_size"},
      {"grad_accum_steps", "train.grad_accum_steps"},
      {"accumulate", "train.accumulate"},
      {"steps", "train.steps"},
      {"grad_clip", "train.grad_clip"},
      {"seed", "train.seed"},
      {"eval_every", "train.eval_every"},
      {"eval_iters", "train.eval_iters"},
      {"device_memory_limit", "train.device_memory_limit"},
      {"tensorboard", "train.tensorboard"},
      {"optimizer", "optimizer.type"},
      {"lr", "optimizer.lr"},
      {"weight_decay", "optimizer.weight_decay"},
      {"beta2", "optimizer.betas.1"},
      {"min_lr", "lr_schedule.min_lr"},
      {"warmup_steps", "lr_schedule.warmup_steps"},
      {"lr_schedule", "lr_schedule.type"},
      {"world_size", "distributed.world_size"},
      {"backend", "distributed.backend"},
      {"sharding_strategy", "strategy.sharding_strategy"},
      {"zero_stage", "strategy.zero_stage"},
      {"hybrid_shard_size", "strategy.hybrid_shard_size"},
      {"forward_prefetch", "strategy.forward_prefetch"},
      {"backward_prefetch", "strategy.backward_prefetch"},
      {"limit_all_gathers", "strategy.limit_all_gathers"},
      {"param_dtype", "strategy.mixed_precision.param_dtype"},
      {"reduce_dtype", "strategy.mixed_precision.reduce_dtype"},
      {"keep_low_precision_grads", "strategy.mixed_precision.keep_low_precision_grads"},
      {"loss_scale", "loss_scaler.mode"},
      {"initial_scale_power", "loss_scaler.initial_scale_power"},
      {"loss_scale_window", "loss_scaler.loss_scale_window"},
      {"hysteresis", "loss_scaler.hysteresis"},
      {"min_loss_scale", "loss_scaler.min_loss_scale"},
      {"init_from", "checkpoint.init_from"},
      {"save", "checkpoint.save_weights"},
      {"work_dir", "work_dir"},
      {"save_every", "checkpoint.save_every"},
      {"resume", "checkpoint.resume"},
      {"async_save", "checkpoint.async_save"},
      {"keep_last", "checkpoint.keep_last"},
      {"write_tied_once", "checkpoint.write_tied_once"},
      {"state_dict_type", "strategy.state_dict_type"},
      {"sample_tokens", "sample.tokens"},
      {"temperature", "sample.temperature"},
      {"top_k", "sample.top_k"},
      {"trace", "trace.path"},
      {"trace_from", "trace.from_step"},
      {"trace_steps", "trace.steps"},
      {"nvme_path", "strategy.nvme_offload.nvme_path"},
  };
  std::vector<std::string> out;
  for (const auto& [name, value] : flags) {
    if (auto it = direct->find(name); it != direct->end()) {
      out.push_back(absl::StrCat(it->second, "=", value));
    } else if (name == "beta1") {  // Adam's beta1 and SGD's momentum, as before the config
      out.push_back(absl::StrCat("optimizer.betas.0=", value));
      out.push_back(absl::StrCat("optimizer.momentum=", value));
    } else if (name == "log_every") {
      int64_t n = 1;
      out.push_back(absl::StrCat("train.log_every=",
                                 absl::SimpleAtoi(value, &n) ? absl::StrCat(std::max<int64_t>(n, 1)) : value));
    } else if (name == "auto_wrap") {
      int64_t min_params = 0;
      if (value == "block") {
        out.push_back("strategy.auto_wrap_policy=[\"Block\"]");
      } else if (value == "none") {
        out.push_back("strategy.auto_wrap_policy=null");
      } else if (absl::StartsWith(value, "size:") && absl::SimpleAtoi(value.substr(5), &min_params)) {
        out.push_back(absl::StrCat("strategy.auto_wrap_policy={\"min_num_params\": ", min_params, "}"));
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--auto_wrap=", value, ": expected block, size:<n> or none"));
      }
    } else if (name == "keep_layernorm_fp32") {
      // The default list (BatchNorm2d) with or without the GPT's LayerNorm.
      const bool on = value == "true" || value == "1";
      out.push_back(absl::StrCat("strategy.mixed_precision.fp32_module_types=",
                                 on ? "[\"BatchNorm2d\", \"LayerNorm\"]" : "[\"BatchNorm2d\"]"));
    } else if (name == "activation_checkpointing") {
      const bool on = value == "true" || value == "1";
      out.push_back(absl::StrCat("strategy.activation_checkpointing=", on ? "[\"Block\"]" : "[]"));
    } else if (name == "offload") {
      // Host offload (FSDP's CPUOffload) or NVMe offload (ZeRO-Infinity), never both.
      bool nvme_optimizer = false, nvme_params = false;
      if (value == "none") {
        out.push_back("strategy.cpu_offload=false");
      } else if (value == "optimizer") {
        out.push_back("strategy.cpu_offload={\"params\": false, \"grads\": true, \"optimizer\": true}");
      } else if (value == "params_and_optimizer") {
        out.push_back("strategy.cpu_offload=true");
      } else if (value == "nvme_optimizer" || value == "nvme_params_and_optimizer") {
        out.push_back("strategy.cpu_offload=false");
        nvme_optimizer = true;
        nvme_params = value == "nvme_params_and_optimizer";
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--offload=", value, ": expected none, optimizer, "
                                                       "params_and_optimizer, nvme_optimizer or nvme_params_and_optimizer"));
      }
      out.push_back(absl::StrCat("strategy.nvme_offload.optimizer.enabled=", nvme_optimizer ? "true" : "false"));
      out.push_back(absl::StrCat("strategy.nvme_offload.params.enabled=", nvme_params ? "true" : "false"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a config flag"));
    }
  }
  return out;
}

}  // namespace zeroshard
