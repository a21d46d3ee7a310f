#include "zeroshard/train/config_flags.h"

#include <algorithm>

#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_schema.h"

namespace zeroshard {
namespace {

// Abseil's spellings of a boolean.
bool ParseBool(const std::string& text, bool* out) {
  const std::string v = absl::AsciiStrToLower(text);
  if (v == "true" || v == "t" || v == "yes" || v == "y" || v == "1") {
    *out = true;
    return true;
  }
  if (v == "false" || v == "f" || v == "no" || v == "n" || v == "0") {
    *out = false;
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<RunConfig> ConfigFromCommandLine(int argc, char** argv,
                                                const std::function<std::string()>& config_path,
                                                const std::vector<std::string>& first) {
  const std::vector<std::string> sets = TakeFlagValues(&argc, argv, "set");
  ZS_ASSIGN_OR_RETURN(const auto given, TakeConfigFlags(&argc, argv));
  absl::ParseCommandLine(argc, argv);
  ZS_ASSIGN_OR_RETURN(std::vector<std::string> from_flags, OverridesFromFlags(given));
  std::vector<std::string> overrides = first;
  overrides.insert(overrides.end(), from_flags.begin(), from_flags.end());
  overrides.insert(overrides.end(), sets.begin(), sets.end());
  const std::string path = config_path();
  return path.empty() ? ConfigFromText("", overrides) : LoadConfig(path, overrides);
}

std::vector<std::string> TakeFlagValues(int* argc, char** argv, const std::string& name) {
  std::vector<std::string> values;
  const std::string one = "-" + name, two = "--" + name;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (; i < *argc; ++i) argv[out++] = argv[i];
      break;
    }
    if (a == two || a == one) {
      if (i + 1 < *argc) values.push_back(argv[++i]);
      continue;
    }
    if (absl::StartsWith(a, two + "=") || absl::StartsWith(a, one + "=")) {
      values.push_back(a.substr(a.find('=') + 1));
      continue;
    }
    argv[out++] = argv[i];
  }
  *argc = out;
  return values;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> TakeConfigFlags(int* argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> given;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (; i < *argc; ++i) argv[out++] = argv[i];
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      argv[out++] = argv[i];
      continue;
    }
    const std::string body = a.substr(a[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    std::string name = body.substr(0, eq);
    const bool has_value = eq != std::string::npos;
    const ConfigFlag* flag = FindConfigFlag(name).second;
    std::string value;
    if (flag == nullptr && absl::StartsWith(name, "no") && !has_value) {
      flag = FindConfigFlag(name.substr(2)).second;
      if (flag == nullptr || !flag->is_bool) {
        argv[out++] = argv[i];  // not ours: Abseil's to judge
        continue;
      }
      name = name.substr(2);
      value = "false";
    } else if (flag == nullptr) {
      argv[out++] = argv[i];
      continue;
    } else if (flag->is_bool) {
      bool on = true;
      if (has_value && !ParseBool(body.substr(eq + 1), &on)) {
        return absl::InvalidArgumentError(absl::StrCat(a, ": expected true or false"));
      }
      value = on ? "true" : "false";
    } else if (has_value) {
      value = body.substr(eq + 1);
    } else if (i + 1 < *argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(a, ": expected a value"));
    }
    std::erase_if(given, [&](const auto& g) { return g.first == name; });
    given.emplace_back(name, value);
  }
  *argc = out;
  return given;
}

std::string ConfigFlagsHelp() {
  const RunConfig defaults = DefaultRunConfig();
  std::string text;
  std::string section = "-";
  for (const ConfigField& f : ConfigFields()) {
    if (f.flags.empty()) continue;
    const std::string top = f.path.substr(0, f.path.find('.'));
    if (top != section) {
      section = top;
      absl::StrAppend(&text, "\n  ", f.path.find('.') == std::string::npos ? "(top level)" : section, ":\n");
    }
    for (const ConfigFlag& flag : f.flags) {
      const std::string def = !flag.default_text.empty() ? flag.default_text : FlagText(f.get(defaults));
      absl::StrAppend(&text, "    --", flag.name, flag.is_bool ? "" : "=<value>", "  ", flag.help, "\n      sets ",
                      f.path, "; default ", def.empty() ? "\"\"" : def, "\n");
    }
  }
  return text;
}

}  // namespace zeroshard
