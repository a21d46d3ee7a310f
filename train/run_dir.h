// RunDir: the folder of one run, in MMEngine's layout:
//
//   work_dir/experiment_name/<YYYYmmdd_HHMMSS>/
//     config.json          the resolved config (every default filled in)
//     <YYYYmmdd_HHMMSS>.log what rank 0 printed
//     metrics.csv          one row per step (train/metrics.h)
//     tensorboard/         the same as TensorBoard scalars, events.out.tfevents.* (train/tensorboard.h;
//                          train.tensorboard false: none)
//     checkpoints/         for the checkpointing code (created by it)
//
//   ZS_ASSIGN_OR_RETURN(RunDir dir, StartRun(&config, "config: my.json\n"));
//   // config.train.log_file, metrics_csv and tensorboard_dir now point into dir; RunTraining fills them.
//
// Two runs started within the same second get <timestamp> and <timestamp>_1.
#ifndef ZEROSHARD_TRAIN_RUN_DIR_H_
#define ZEROSHARD_TRAIN_RUN_DIR_H_

#include <ctime>
#include <string>

#include "absl/status/statusor.h"
#include "zeroshard/train/config.h"

namespace zeroshard {

class RunDir {
 public:
  // Creates work_dir/experiment_name/<timestamp of `now`, local time>/.
  static absl::StatusOr<RunDir> Create(const std::string& work_dir, const std::string& experiment_name,
                                       std::time_t now = std::time(nullptr));
  // The run folder at `path`, made by Create (e.g. on rank 0, its path sent to the other ranks).
  static RunDir At(const std::string& path);

  const std::string& path() const { return path_; }
  const std::string& timestamp() const { return timestamp_; }  // the folder's name
  std::string experiment_dir() const;                         // work_dir/experiment_name
  std::string config_path() const { return path_ + "/config.json"; }
  std::string log_path() const { return path_ + "/" + timestamp_ + ".log"; }
  std::string metrics_path() const { return path_ + "/metrics.csv"; }
  std::string tensorboard_dir() const { return path_ + "/tensorboard"; }
  std::string checkpoint_dir() const { return path_ + "/checkpoints"; }

  // Writes `text` to a file of the folder (e.g. the resolved config).
  absl::Status WriteFile(const std::string& path, const std::string& text) const;

 private:
  RunDir(std::string path, std::string timestamp) : path_(std::move(path)), timestamp_(std::move(timestamp)) {}
  std::string path_;
  std::string timestamp_;
};

// Creates the run folder of `config` (work_dir/experiment_name/<now>/), writes
// config.json (ResolvedConfigJson) and the log's first lines (`log_header`),
// and points the run's outputs into it (PointOutputsInto).
absl::StatusOr<RunDir> StartRun(RunConfig* config, const std::string& log_header,
                                std::time_t now = std::time(nullptr));

// Points config->train's and config->resnet's log_file, metrics_csv and (when
// their `tensorboard` is on) tensorboard_dir into `dir`.
void PointOutputsInto(RunConfig* config, const RunDir& dir);

// "20240131_235959" (local time), MMEngine's timestamp format.
std::string RunTimestamp(std::time_t t);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_RUN_DIR_H_
