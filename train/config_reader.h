// The machinery every config reader shares (train/config.cc walks the field
// table of train/config_schema.h with it; train/deepspeed_config.cc reads the
// DeepSpeed block with it): a Context that collects every problem of one parse,
// and a Section that reads one JSON object's keys with type and range checks,
// each problem named by its key path.
//
//   Context ctx;
//   Section train(&ctx, "train", &root["train"]);
//   train.Int("steps", &o.steps, 1);      // "train.steps: expected an integer >= 1, found ..."
//   train.Finish();                       // keys nobody read -> ctx.unknowns ("did you mean")
//
// Internal to train/: not an API for programs.
#ifndef ZEROSHARD_TRAIN_CONFIG_READER_H_
#define ZEROSHARD_TRAIN_CONFIG_READER_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/nvme/aio_options.h"
#include "zeroshard/sharding/sharding_options.h"

namespace zeroshard::config_internal {

using Json = nlohmann::json;

// What a value is, for "found ..." in messages.
std::string Found(const Json& v);

// Note [Config JSON is checked as it is parsed]: nlohmann's parser keeps the
// last of two equal keys and nests as deep as the text does. A config must not
// lose a setting silently, and its messages (Found, which prints an array) and
// _base_ merging recurse over the value, so a key written twice in one object
// and nesting deeper than kMaxJsonDepth are errors, found during the parse.
inline constexpr int kMaxJsonDepth = 32;
// `text` parsed (// and /* */ comments allowed). Errors name `source`; an
// invalid text is InvalidArgument "expected JSON, found a parse error ...".
absl::StatusOr<Json> ParseConfigJson(const std::string& text, const std::string& source);
// The index of the first byte of `text` that is not part of well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF, which
// is what nlohmann's parser and dump accept), or npos.
size_t FirstInvalidUtf8(const std::string& text);
// "\"a\", \"b\"".
std::string Quoted(const std::vector<std::string>& names);
// The closest of `candidates` to `word`, when close enough to be a likely typo ("" otherwise).
std::string Closest(const std::string& word, const std::vector<std::string>& candidates);
std::string JoinPath(const std::string& section, const std::string& key);

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
  const Json* root = nullptr;           // the whole config, overrides applied
  int64_t decay_steps = -1;             // lr_schedule.decay_steps when given (-1: the run's steps)

  void Add(const std::string& path, const std::string& what);
  // True when the command line set `path`, a key inside it or an object holding it.
  bool Overridden(const std::string& path) const;
  bool Ok(std::initializer_list<std::string> paths) const;
  // Whether the config holds the dotted `path`.
  bool Given(const std::string& path) const;
};

struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;

  bool Contains(double v) const {
    return std::isfinite(v) && (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
  }
  // "a number in [0, 1)", "a number >= 0", ...
  std::string Describe(const char* what) const;
};

inline Range AtLeast(double v) { return Range{.min = v}; }
inline Range Above(double v) { return Range{.min = v, .min_open = true}; }
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// "an integer >= min" or "an integer in [min, max]".
std::string DescribeInt(int64_t min, int64_t max);

// One JSON object of the config. Each reader marks its key as known, leaves
// the output untouched when the key is absent, and reports a wrong type or an
// out-of-range value with the key's path. Finish() reports the keys nobody read.
class Section {
 public:
  Section(Context* ctx, std::string path, const Json* obj) : ctx_(ctx), path_(std::move(path)), obj_(obj) {}

  const std::string& path() const { return path_; }
  Context& ctx() const { return *ctx_; }
  bool present() const { return obj_ != nullptr; }
  std::string PathOf(const std::string& key) const { return JoinPath(path_, key); }

  // The value at `key` (nullptr when absent). `leaf`: a key of the schema
  // (not a sub-section) for ConfigKeyPaths.
  const Json* Get(const std::string& key, bool leaf = true);
  bool Has(const std::string& key) const { return obj_ != nullptr && obj_->contains(key); }
  void Add(const std::string& key, const std::string& what) { ctx_->Add(PathOf(key), what); }

  bool Bool(const std::string& key, bool* out);
  bool Int(const std::string& key, int64_t* out, int64_t min, int64_t max = kNoMax);
  template <typename T>
  bool Int(const std::string& key, T* out, int64_t min, int64_t max = kNoMax) {
    int64_t x = 0;
    if (!Int(key, &x, min, max)) return false;
    *out = static_cast<T>(x);
    return true;
  }
  bool Number(const std::string& key, double* out, Range range = {});
  bool String(const std::string& key, std::string* out);
  // One of `choices`, compared case-insensitively; *out gets the choice's spelling.
  bool Choice(const std::string& key, std::string* out, const std::vector<std::string>& choices);
  bool ChoiceOf(const std::string& key, const Json& v, std::string* out, const std::vector<std::string>& choices);
  // A float dtype name as runtime/dtype.h parses it; *out unchanged otherwise.
  bool FloatDType(const std::string& key, DType* out);
  // A list of strings.
  bool Strings(const std::string& key, std::vector<std::string>* out);
  bool StringsOf(const std::string& key, const Json& v, std::vector<std::string>* out);
  // The object at `key` (absent: an empty section that reads nothing).
  Section Child(const std::string& key);
  // Records the keys no reader asked for.
  void Finish();

 private:
  Context* ctx_;
  std::string path_;
  const Json* obj_;
  std::vector<std::string> known_;
};

// A key of the other model type: an error when set (model_type is the config's).
void RejectKey(Section& s, const std::string& key, const std::string& model_type);

// A directory string, or null for "inherit" (*out unchanged).
bool PathOrNull(Section& s, const std::string& key, std::string* out);

// aio {block_size, queue_depth, thread_count, single_submit, overlap_events}:
// DeepSpeed's names and defaults (runtime/nvme/aio_options.h).
void ReadAio(Section a, AioOptions* aio);

// DeepSpeed's ZeRO stages: 0 NO_SHARD (DDP), 1 SHARD_OPTIMIZER, 2 SHARD_GRAD_OP, 3 FULL_SHARD.
ShardingStrategy StrategyOfZeroStage(int64_t stage);

}  // namespace zeroshard::config_internal

#endif  // ZEROSHARD_TRAIN_CONFIG_READER_H_
