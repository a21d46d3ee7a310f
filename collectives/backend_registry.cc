#include "zeroshard/collectives/backend_registry.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/collectives/builtin_backends.h"
#include "zeroshard/runtime/log.h"
#include "zeroshard/runtime/registry_name.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

BackendRegistry& BackendRegistry::Global() {
  // Built on first use (a registrar in another translation unit may come
  // first), with the built-in backends in it.
  static BackendRegistry* const registry = [] {
    auto* r = new BackendRegistry;
    builtin_backends_internal::RegisterBuiltinBackends(*r);
    return r;
  }();
  return *registry;
}

absl::Status BackendRegistry::Register(BackendInfo info, BackendFactory factory) {
  ZS_RETURN_IF_ERROR(CheckRegistryName("backend", info.name));
  if (factory == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("backend ", info.name, ": expected a factory, found none"));
  }
  absl::MutexLock lock(&mu_);
  if (entries_.count(info.name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("backend ", info.name, " is already registered"));
  }
  std::string name = info.name;
  entries_.emplace(std::move(name), Entry{std::move(info), std::move(factory)});
  return absl::OkStatus();
}

std::vector<std::string> BackendRegistry::Names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

std::string BackendRegistry::NamesText() const { return absl::StrJoin(Names(), ", "); }

absl::StatusOr<BackendInfo> BackendRegistry::Find(absl::string_view name) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it != entries_.end()) return it->second.info;
  }
  return absl::NotFoundError(
      absl::StrCat("backend \"", name, "\": expected a registered backend (", NamesText(), ")"));
}

absl::StatusOr<std::unique_ptr<BackendProcess>> BackendRegistry::Start(absl::string_view name,
                                                                       const BackendLaunch& launch) const {
  BackendFactory factory;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it != entries_.end()) factory = it->second.factory;
  }
  if (factory == nullptr) return Find(name).status();
  if (launch.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend ", name, ": expected world_size >= 1, found ", launch.world_size));
  }
  absl::StatusOr<std::unique_ptr<BackendProcess>> process = factory(launch);
  if (process.ok() && *process == nullptr) {
    return absl::InternalError(absl::StrCat("backend ", name, ": the factory returned no process"));
  }
  return process;
}

BackendRegistrar::BackendRegistrar(BackendInfo info, BackendFactory factory) {
  const std::string name = info.name;
  if (absl::Status s = BackendRegistry::Global().Register(std::move(info), std::move(factory)); !s.ok()) {
    // At static initialisation there is no caller to return the status to.
    Log(LogLevel::kFatal, "collectives", absl::StrCat("ZS_REGISTER_BACKEND(", name, "): ", s.ToString()));
    std::abort();
  }
}

absl::StatusOr<int64_t> BackendSetting(const BackendLaunch& launch, absl::string_view key, int64_t fallback) {
  auto it = launch.settings.find(std::string(key));
  if (it == launch.settings.end()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend setting ", key, ": expected an integer, found \"", it->second, "\""));
  }
  return v;
}

}  // namespace zeroshard
