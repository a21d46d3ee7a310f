// RunConfig: the main job's one JSON config (model, data, training, strategy),
// read with `--set key.path=value` overrides, checked as a whole (every problem
// reported at once, each with its JSON path), and mapped onto TrainOptions.
//
//   ZS_ASSIGN_OR_RETURN(RunConfig c, LoadConfig("examples/configs/default.json",
//                                                {"train.steps=50", "strategy.forward_prefetch=true"}));
//   c.train                      // TrainOptions for RunTraining
//   ResolvedConfigJson(c)        // the same run in canonical form, every default filled in
//
// A config file may start from another: {"_base_": "default.json", ...} reads
// default.json (relative to this file) and merges this one over it, objects
// key by key (MMEngine's inheritance). JSON comments (// and /* */) are allowed.
//
// Every key, with its type, default, allowed values, the PyTorch FSDP /
// DeepSpeed key it answers to, its train_gpt flag and help, is one row of the
// field table in train/config_schema.cc; docs/config.md is generated from it
// (make config-doc). A "deepspeed" block (or a DeepSpeed config file on its
// own) maps onto the same options: train/deepspeed_config.cc, Note [DeepSpeed
// mapping]. model.type "resnet" runs the vision job (train/resnet_trainer.h)
// with its own model, data and train keys; a key of the other model type is
// an error.
#ifndef ZEROSHARD_TRAIN_CONFIG_H_
#define ZEROSHARD_TRAIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/train/resnet_trainer.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {

struct RunConfig {
  std::string model_type = "gpt";  // model.type: "gpt" (train: RunTraining) or "resnet" (resnet: RunResNetTraining)
  TrainOptions train;  // what RunTraining reads (log_file / metrics_csv are set by the run folder;
                       // work_dir, where checkpoints go, is work_dir/experiment_name)
  int world_size = 4;
  std::string backend = "local";  // "local", "mpi" or "nccl" (one in-process rank per GPU)
  // distributed.timeout_s: how long a rank waits for its peers in one
  // collective (CommunicatorOptions::timeout of every communicator the job
  // creates: CommunicatorOptionsOf).
  double timeout_s = 600;
  // train.allow_tf32: f32 GEMMs on CUDA run on TF32 tensor cores
  // (SetMatMulAllowTf32, kernels/matmul.h), set before training starts.
  bool allow_tf32 = false;
  std::string work_dir = "work_dirs";
  std::string experiment_name = "default";
  std::string loss_scale_mode = "auto";  // loss_scaler.mode (train.loss_scaling is its effect)
  int64_t train_batch_size = 0;  // deepspeed.train_batch_size when given (checked against the world)
  // strategy.skip_init_weights (MMEngine's): the weights come from
  // checkpoint.init_from or checkpoint.resume, so initialising them is wasted
  // work. Validated only: RunTraining initialises each rank's shards lazily
  // and overwrites them on load, which costs one fill per shard.
  bool skip_init_weights = false;
  // model.type "resnet": what RunResNetTraining reads (log_file / metrics_csv
  // set by the run folder). train.sharding holds the same ShardingOptions.
  ResNetTrainOptions resnet;
  std::string source;               // the file read, or "<defaults>"
  std::vector<std::string> notes;   // how a DeepSpeed block was mapped; keys read without effect
};

// The built-in defaults (train_gpt's flag defaults).
RunConfig DefaultRunConfig();

// The options of the communicators the job creates (in-process, MPI and the
// NCCL ones they bootstrap): distributed.timeout_s as the collective timeout.
CommunicatorOptions CommunicatorOptionsOf(const RunConfig& config);

// `json_text` (an object; "" means {}) with `overrides` ("key.path=value", in
// order) applied, checked and mapped. Every problem is in the one
// InvalidArgument message, one per line ("<path>: <what was expected>, found <what>").
// `source` names the text in messages; its stem is the default experiment_name.
absl::StatusOr<RunConfig> ConfigFromText(const std::string& json_text,
                                         const std::vector<std::string>& overrides,
                                         const std::string& source = "<defaults>");
absl::StatusOr<RunConfig> LoadConfig(const std::string& path, const std::vector<std::string>& overrides);

// The problems that depend on the world size (hybrid_shard_size dividing it,
// deepspeed.train_batch_size): ConfigFromText checks them against
// distributed.world_size; under MPI the program checks the real size with this.
absl::Status CheckWorldSize(const RunConfig& config, int world_size);

// The run in canonical form (FSDP-style strategy; a DeepSpeed block appears as
// what it mapped to), every default filled in; reading it back gives the same run.
std::string ResolvedConfigJson(const RunConfig& config);

// train_gpt's flags as overrides: (flag name, value as given) -> "key.path=value"
// lines in the --set syntax, so a flag means the same with or without --config.
// Names that are not config flags (config, set, ...) are an error.
absl::StatusOr<std::vector<std::string>> OverridesFromFlags(
    const std::vector<std::pair<std::string, std::string>>& flags);

// Every key path of the schema ("model.n_layer", "strategy.mixed_precision.param_dtype", ...).
std::vector<std::string> ConfigKeyPaths();

// Edit distance (insertions, deletions, substitutions, adjacent transpositions;
// case-insensitive) used to suggest the closest valid key for a misspelt one.
int EditDistance(const std::string& a, const std::string& b);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_CONFIG_H_
