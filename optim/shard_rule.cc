#include "zeroshard/optim/shard_rule.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard::optim {

namespace {

bool AllOf(const std::string& s, absl::string_view extra) {
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && extra.find(c) == absl::string_view::npos) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateShardOptimizerRule(const ShardOptimizerRule& rule) {
  const std::string name = rule.name();
  if (name.empty() || !AllOf(name, "_-.")) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer rule name \"", name,
                                                   "\": expected letters, digits, '_', '-' or '.', not empty"));
  }
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "adamw" || lower == "adam" || lower == "sgd") {
    return absl::InvalidArgumentError(absl::StrCat("optimizer rule name \"", name,
                                                   "\" is a built-in optimizer's (adamw, adam, sgd): checkpoints "
                                                   "could not tell them apart; choose another"));
  }
  const std::vector<std::string> slots = rule.state_slots();
  std::set<std::string> seen;
  for (const std::string& slot : slots) {
    if (slot.empty() || !AllOf(slot, "_") || slot == "param") {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer rule \"", name, "\": state slot \"", slot,
          "\": expected letters, digits or '_', not empty and not \"param\" (the parameters' own name in checkpoints)"));
    }
    if (!seen.insert(slot).second) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer rule \"", name, "\": state slot \"", slot,
                                                     "\" appears twice in [", absl::StrJoin(slots, ", "), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::optim
