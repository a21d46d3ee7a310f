#include "zeroshard/train/run_dir.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

std::string RunTimestamp(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d_%H%M%S", &tm);
  return buf;
}

absl::StatusOr<RunDir> RunDir::Create(const std::string& work_dir, const std::string& experiment_name,
                                      std::time_t now) {
  namespace fs = std::filesystem;
  const fs::path experiment = fs::path(work_dir) / experiment_name;
  std::error_code ec;
  fs::create_directories(experiment, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("run folder: cannot create ", experiment.string(), ": ", ec.message()));
  }
  const std::string stamp = RunTimestamp(now);
  for (int i = 0; i < 1000; ++i) {
    const std::string name = i == 0 ? stamp : absl::StrCat(stamp, "_", i);
    const fs::path dir = experiment / name;
    // create_directory is false (no error) when it exists: another run took the name.
    if (fs::create_directory(dir, ec)) return RunDir(dir.string(), name);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("run folder: cannot create ", dir.string(), ": ", ec.message()));
    }
  }
  return absl::AlreadyExistsError(absl::StrCat("run folder: 1000 runs named ", stamp, " already in ",
                                               experiment.string()));
}

RunDir RunDir::At(const std::string& path) {
  return RunDir(path, std::filesystem::path(path).filename().string());
}

std::string RunDir::experiment_dir() const { return std::filesystem::path(path_).parent_path().string(); }

absl::Status RunDir::WriteFile(const std::string& path, const std::string& text) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::StatusOr<RunDir> StartRun(RunConfig* config, const std::string& log_header, std::time_t now) {
  absl::StatusOr<RunDir> dir = RunDir::Create(config->work_dir, config->experiment_name, now);
  if (!dir.ok()) return dir.status();
  if (absl::Status s = dir->WriteFile(dir->config_path(), ResolvedConfigJson(*config)); !s.ok()) return s;
  if (absl::Status s = dir->WriteFile(dir->log_path(), log_header); !s.ok()) return s;
  PointOutputsInto(config, *dir);
  return dir;
}

void PointOutputsInto(RunConfig* config, const RunDir& dir) {
  config->train.log_file = dir.log_path();
  config->train.metrics_csv = dir.metrics_path();
  config->train.tensorboard_dir = config->train.tensorboard ? dir.tensorboard_dir() : "";
  config->resnet.log_file = dir.log_path();  // model.type "resnet"
  config->resnet.metrics_csv = dir.metrics_path();
  config->resnet.tensorboard_dir = config->resnet.tensorboard ? dir.tensorboard_dir() : "";
}

}  // namespace zeroshard
