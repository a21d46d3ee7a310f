// The row builder of the config's field table (train/config_schema.h): a row
// is F(path, kind) with chained setters (Ref, Peer, Flag, Help, ...), started
// by Sec, Bool, Str, Int, Num, Choice, Custom, ... so the rows read as a
// table. Shared by the table's files: config_schema.cc (the table, in order)
// and config_schema_strategy.cc (its strategy rows). Internal to train/.
#ifndef ZEROSHARD_TRAIN_CONFIG_SCHEMA_BUILDER_H_
#define ZEROSHARD_TRAIN_CONFIG_SCHEMA_BUILDER_H_

#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "zeroshard/train/config_custom.h"
#include "zeroshard/train/config_schema.h"

namespace zeroshard::config_schema_internal {

using config_internal::Above;
using config_internal::AtLeast;
using config_internal::IsResNet;
using config_internal::kNoMax;
using config_internal::OptimizerOf;
using config_internal::Range;
using config_internal::ScheduleOf;
using config_internal::Section;
using Json = nlohmann::json;
// What a row's get() returns: key order kept (cpu_offload's object reads params, grads, optimizer).
using OJson = nlohmann::ordered_json;
using Overrides = absl::StatusOr<std::vector<std::string>>;

// ============================================================ value conversions

template <typename T>
OJson ToJ(const T& v) {
  if constexpr (std::is_same_v<T, float>) {
    // The double with the fewest digits that reads back as `v` (0.1f -> 0.1, not 0.10000000149).
    for (int digits = 1; digits < 10; ++digits) {
      const double d = std::strtod(absl::StrFormat("%.*g", digits, v).c_str(), nullptr);
      if (static_cast<float>(d) == v) return d;
    }
    return static_cast<double>(v);
  } else {
    return OJson(v);
  }
}

template <typename T>
void FromJ(const Json& v, T* out) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
    *out = v.get<T>();
  } else if constexpr (std::is_integral_v<T>) {
    *out = static_cast<T>(v.get<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    *out = static_cast<T>(v.get<double>());
  } else {
    *out = v.get<T>();
  }
}

// ============================================================ the row builder

class F {
 public:
  F(std::string path, FieldKind kind) {
    f_.path = std::move(path);
    f_.kind = kind;
  }
  // Binds get/set to the member `ref(config)` names (a generic lambda, so one
  // serves the const getter and the setter).
  template <typename R>
  F&& Ref(R ref) && {
    f_.get = [ref](const RunConfig& c) { return ToJ(ref(c)); };
    f_.set = [ref](RunConfig& c, const Json& v) { FromJ(v, &ref(c)); };
    return std::move(*this);
  }
  F&& Get(std::function<OJson(const RunConfig&)> get) && { f_.get = std::move(get); return std::move(*this); }
  F&& Set(std::function<void(RunConfig&, const Json&)> set) && { f_.set = std::move(set); return std::move(*this); }
  F&& Read(decltype(ConfigField::read) read) && { f_.read = std::move(read); return std::move(*this); }
  F&& Check(decltype(ConfigField::check) check) && { f_.check = std::move(check); return std::move(*this); }
  F&& Gpt() && { f_.models = kGptOnly; return std::move(*this); }
  F&& ResNet() && { f_.models = kResNetOnly; return std::move(*this); }
  F&& Peer(std::string peer) && { f_.peer = std::move(peer); return std::move(*this); }
  F&& Help(std::string help) && { f_.help = std::move(help); return std::move(*this); }
  // The values in words, for the doc (a kString row checked by its Check).
  F&& Allowed(std::string text) && { f_.allowed_text = std::move(text); return std::move(*this); }
  F&& Example(std::string json) && { f_.example = std::move(json); return std::move(*this); }
  F&& Flag(std::string name, std::string help) && {
    f_.flags.push_back({.name = std::move(name), .help = std::move(help), .is_bool = f_.kind == FieldKind::kBool});
    return std::move(*this);
  }
  F&& Flag(ConfigFlag flag) && { f_.flags.push_back(std::move(flag)); return std::move(*this); }
  F&& NotWritten() && { f_.written = false; return std::move(*this); }
  F&& NotALeaf() && { f_.leaf = false; return std::move(*this); }
  operator ConfigField() && { return std::move(f_); }  // NOLINT: the rows read as a table
  ConfigField& field() { return f_; }

 private:
  ConfigField f_;
};

inline F Sec(std::string path, std::string help) { return std::move(F(std::move(path), FieldKind::kSection).Help(std::move(help))); }
inline F Bool(std::string path) { return F(std::move(path), FieldKind::kBool); }
inline F Str(std::string path) { return F(std::move(path), FieldKind::kString); }
inline F DTypeF(std::string path) { return F(std::move(path), FieldKind::kDType); }
inline F Strs(std::string path) { return F(std::move(path), FieldKind::kStrings); }
inline F Int(std::string path, int64_t min, int64_t max = kNoMax) {
  F f(std::move(path), FieldKind::kInt);
  f.field().min = min;
  f.field().max = max;
  return f;
}
inline F Num(std::string path, Range range) {
  F f(std::move(path), FieldKind::kNumber);
  f.field().range = range;
  return f;
}
inline F Choice(std::string path, std::vector<std::string> choices) {
  F f(std::move(path), FieldKind::kChoice);
  f.field().choices = std::move(choices);
  return f;
}
// `read` does the reading (config_custom.h); `type` and `allowed` say it in words.
inline F Custom(std::string path, std::string type, std::string allowed, decltype(ConfigField::read) read) {
  F f(std::move(path), FieldKind::kCustom);
  f.field().type_text = std::move(type);
  f.field().allowed_text = std::move(allowed);
  f.field().read = std::move(read);
  return f;
}

// A flag spelled its own way: `map` turns its value into overrides; `example`
// is a value for the tests.
inline ConfigFlag Mapped(std::string name, std::string help, bool is_bool, std::string default_text, std::string example,
                         std::function<Overrides(const std::string&)> map) {
  return ConfigFlag{.name = std::move(name), .help = std::move(help), .is_bool = is_bool, .to_overrides = std::move(map),
                    .default_text = std::move(default_text), .example = std::move(example)};
}

inline bool FlagOn(const std::string& v) { return v == "true" || v == "1"; }
inline Overrides One(std::string line) { return std::vector<std::string>{std::move(line)}; }

// The strategy rows (config_schema_strategy.cc), appended where the table
// has them.
void AppendStrategyFields(std::vector<ConfigField>* t);

}  // namespace zeroshard::config_schema_internal

#endif  // ZEROSHARD_TRAIN_CONFIG_SCHEMA_BUILDER_H_
