// train_gpt's config flags on the command line: every flag of the field table
// (train/config_schema.h) is parsed here, not declared with ABSL_FLAG, so a
// new config key's flag is one entry of the table.
//
//   absl::StatusOr<std::vector<std::pair<std::string, std::string>>> given = TakeConfigFlags(&argc, argv);
//   absl::ParseCommandLine(argc, argv);              // the program's other flags (--config, ...)
//   absl::StatusOr<std::vector<std::string>> sets = OverridesFromFlags(*given);   // train/config.h
//
// Spellings, as Abseil's: --name=value, --name value, -name=value; a boolean
// flag also --name (true) and --noname (false), never taking the next argument.
// "--" ends the flags.
#ifndef ZEROSHARD_TRAIN_CONFIG_FLAGS_H_
#define ZEROSHARD_TRAIN_CONFIG_FLAGS_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/train/config.h"

namespace zeroshard {

// Takes the table's flags out of argv (the rest stays, in order, for Abseil)
// and returns them as (name, value) in command-line order; a flag given twice
// counts once, where it was last given. A boolean flag's value is "true" or
// "false". Errors: a missing value, a boolean flag's value that is not one.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> TakeConfigFlags(int* argc, char** argv);

// Takes every occurrence of --<name> out of argv and returns the values in
// order (Abseil keeps only a flag's last value, and a value may hold commas):
// "--name=v", "--name v", "-name=v", "-name v". "--" ends the flags.
// train_gpt's and zs_simulate's --set; zs_simulate's --model (a config flag's name too).
std::vector<std::string> TakeFlagValues(int* argc, char** argv, const std::string& name);
// A program's command line read as train_gpt reads it: --set and the config
// flags are taken out of argv, absl::ParseCommandLine parses the program's own
// flags, then the file `config_path()` names (read after parsing; "" means the
// defaults) is loaded with the flags and --set applied, in that order
// (defaults < --config < flags < --set). train_gpt, zs_simulate and zs_plan.
// `first` are overrides applied before the flags (a program's own defaults).
absl::StatusOr<RunConfig> ConfigFromCommandLine(int argc, char** argv,
                                                const std::function<std::string()>& config_path,
                                                const std::vector<std::string>& first = {});
// The table's flags for --help: one entry per flag with its help, the config
// key it sets and its default, grouped by the key's section.
std::string ConfigFlagsHelp();

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_CONFIG_FLAGS_H_
