// The names registries accept (collective backends, communication hooks):
// lowercase identifiers, so that they read the same in configs, flags and
// file names.
//
//   ZS_RETURN_IF_ERROR(CheckRegistryName("backend", info.name));
#ifndef ZEROSHARD_RUNTIME_REGISTRY_NAME_H_
#define ZEROSHARD_RUNTIME_REGISTRY_NAME_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// OK for [a-z][a-z0-9_]*; else InvalidArgument "<kind> name: expected a
// lowercase identifier ([a-z][a-z0-9_]*), found \"<name>\"".
inline absl::Status CheckRegistryName(absl::string_view kind, absl::string_view name) {
  bool ok = !name.empty() && name[0] >= 'a' && name[0] <= 'z';
  for (char ch : name) ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(kind, " name: expected a lowercase identifier ([a-z][a-z0-9_]*), found \"", name, "\""));
}

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_REGISTRY_NAME_H_
