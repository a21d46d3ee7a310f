// The config's one table: every key of the main job's JSON config, declared
// once, with its JSON path, type, allowed values, how it binds to RunConfig,
// the PyTorch FSDP / DeepSpeed key it answers to, its command-line flag(s) and
// one line of help. Defaults are not written here: they are read from
// DefaultRunConfig() through the field's getter.
//
// From the table (train/config.cc, train/config_flags.cc, train/config_doc.cc):
// the reader (rows in table order, sections opened and finished as the paths
// go), the resolved JSON (ResolvedConfigJson writes every row in order), the
// flags (OverridesFromFlags, train_gpt's command line, --help), ConfigKeyPaths
// and docs/config.md. A test sets every row to its example through JSON and
// through its flag and reads the result back (tests/train/config_schema_test.cc).
//
//   for (const ConfigField& f : ConfigFields()) {
//     if (f.kind == FieldKind::kSection) continue;
//     std::cout << f.path << " = " << f.get(DefaultRunConfig()).dump() << "  # " << f.help << "\n";
//   }
//
// Structured keys (auto_wrap_policy list-or-object, cpu_offload bool-or-object,
// zero_stage beside sharding_strategy, betas, nvme paths, the DeepSpeed block)
// have rows of kind kCustom whose `read` does what a generic kind cannot.
#ifndef ZEROSHARD_TRAIN_CONFIG_SCHEMA_H_
#define ZEROSHARD_TRAIN_CONFIG_SCHEMA_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_reader.h"

namespace zeroshard {

enum class FieldKind {
  kSection,  // a JSON object holding the rows below it
  kBool,
  kInt,      // in [min, max]
  kNumber,   // in range
  kString,
  kChoice,   // one of choices (case-insensitive; the set() gets the listed spelling)
  kDType,    // a float dtype name
  kStrings,  // an array of strings
  kCustom,   // read by `read`
};

// Which model.type reads a row; a key of the other type is an error.
enum ModelMask : int { kGptOnly = 1, kResNetOnly = 2, kBothModels = 3 };

// A command-line flag of train_gpt: `--name=value` is the override
// "<field path>=<value>" unless `to_overrides` says otherwise.
struct ConfigFlag {
  std::string name;
  std::string help;
  bool is_bool = false;  // --name, --noname, --name=true|false
  std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)> to_overrides;
  std::string default_text;  // for --help when not the field's default ("" : the field's)
  std::string example;       // a non-default value (tests); "": the field's example as text
};

struct ConfigField {
  std::string path;  // "strategy.mixed_precision.param_dtype"
  FieldKind kind = FieldKind::kCustom;
  int models = kBothModels;
  int64_t min = 0, max = config_internal::kNoMax;  // kInt
  config_internal::Range range;                    // kNumber
  std::vector<std::string> choices;                // kChoice
  std::string type_text;                           // kCustom/kSection: the type in words, for the doc
  std::string allowed_text;                        // kCustom: the values in words, for the doc
  std::string peer;                                // "FSDP sharding_strategy; DeepSpeed zero_optimization.stage"
  std::vector<ConfigFlag> flags;
  std::string help;
  std::string example;   // JSON text of a valid non-default value ("": derived; tests and the doc)
  bool written = true;   // in ResolvedConfigJson (description and deepspeed are not)
  bool leaf = true;      // in ConfigKeyPaths (the deepspeed block is not)

  // The value in the resolved config (and the default, read from DefaultRunConfig()).
  std::function<nlohmann::ordered_json(const RunConfig&)> get;
  // Stores a value the generic reader checked against `kind` (not used by kCustom).
  std::function<void(RunConfig&, const nlohmann::json&)> set;
  // kCustom: reads `key` of `s` itself. kSection: called before the section
  // is opened; returns false when it handled the value (null, false) and the
  // rows below are to be skipped.
  std::function<bool(config_internal::Section& s, const std::string& key, RunConfig* c)> read;
  // After the row was read (whether or not the key was there): a check
  // between this row and the ones before it.
  std::function<void(config_internal::Section& s, const std::string& key, RunConfig* c)> check;

  std::string key() const { return path.substr(path.find_last_of('.') + 1); }
  std::string parent() const {
    const size_t dot = path.find_last_of('.');
    return dot == std::string::npos ? "" : path.substr(0, dot);
  }
  bool Reads(const std::string& model_type) const {
    return (models & (model_type == "resnet" ? kResNetOnly : kGptOnly)) != 0;
  }
};

// The table, in reading and writing order: every section row comes before
// the rows under it.
const std::vector<ConfigField>& ConfigFields();

// The row at `path`, or nullptr.
const ConfigField* FindConfigField(const std::string& path);

// The row holding flag `name` and the flag, or {nullptr, nullptr}.
std::pair<const ConfigField*, const ConfigFlag*> FindConfigFlag(const std::string& name);

// A valid non-default JSON value for the row (its example, or one derived from its kind and default).
nlohmann::json FieldExample(const ConfigField& f);

// The value text of `value` as a flag takes it ("sgd", "0.5", "true").
std::string FlagText(const nlohmann::json& value);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_CONFIG_SCHEMA_H_
