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
// The schema, with the defaults (those of train_gpt's flags; `make train` runs
// examples/configs/default.json):
//   description ""             printed at the start
//   experiment_name "default"  (the config file's stem when loaded from a file)
//   work_dir "work_dirs"       runs go to work_dir/experiment_name/<YYYYmmdd_HHMMSS>/ ("": nowhere),
//                              checkpoints to work_dir/experiment_name/step-<n>/ (as MMEngine: beside
//                              the timestamped folders, so resume "auto" finds the last run's)
//   distributed {world_size 4 (in-process ranks; mpirun decides under mpi), backend "local"|"mpi"|"nccl"}
//   model {type "gpt"|"resnet" (the vision job: see "model.type resnet" below),
//          vocab_size 256, block_size 64, n_layer 4, n_head 4, n_embd 128, dropout 0.0, bias true}
//   data {path "data/tinyshakespeare.txt", val_fraction 0.1}
//   train {steps 200, batch_size 8 (rows per rank per micro-step), grad_accum_steps 1,
//          accumulate "sharded"|"no_sync", grad_clip 1.0 (0: off), seed 1337, log_every 10,
//          eval_every 100 (0: only at the end), eval_iters 10, device_memory_limit 0 (bytes, 0: none),
//          tensorboard true (the run folder's tensorboard/ event file beside metrics.csv)}
//   optimizer {type "adamw"|"adam"|"sgd", lr 1e-3, weight_decay 0.1, betas [0.9, 0.95], eps 1e-8,
//              momentum 0.9, dampening 0.0, nesterov false}          (momentum..nesterov: sgd)
//   lr_schedule {type "cosine"|"linear"|"constant", min_lr 1e-4, warmup_steps 20,
//                decay_steps null (= max(train.steps, warmup_steps))}
//   loss_scaler {mode "auto"|"dynamic"|"none" (auto: dynamic when param_dtype is f16),
//                initial_scale_power 16, loss_scale_window 1000, hysteresis 2,
//                consecutive_hysteresis false, min_loss_scale 1.0, scale_factor 2.0}
//   strategy (PyTorch FSDP's / Lightning's FSDPStrategy's names) {
//     sharding_strategy "FULL_SHARD"|"SHARD_GRAD_OP"|"SHARD_OPTIMIZER"|"NO_SHARD"|"HYBRID_SHARD"
//                       (ZeRO-3, ZeRO-2, ZeRO-1 = DeepSpeed's stages 3, 2, 1),
//     zero_stage null (1|2|3: SHARD_OPTIMIZER|SHARD_GRAD_OP|FULL_SHARD; beside a sharding_strategy,
//                 a _base_ file's included, they must agree unless only one comes from the command
//                 line, which wins),
//     hybrid_shard_size 0 (HYBRID_SHARD: ranks per shard group; divides the world),
//     auto_wrap_policy ["Block"]      (module types; {"min_num_params": n}: by size; null: none),
//     backward_prefetch "BACKWARD_PRE"|"BACKWARD_POST"|null, forward_prefetch false,
//     limit_all_gathers 2 (units gathered at once; true = 2, false/0 = unlimited),
//     cpu_offload false (true: FSDP's CPUOffload(offload_params=True) = params, grads and
//                 optimizer on the host; or {"params", "grads", "optimizer"} booleans),
//     nvme_offload (ZeRO-Infinity: state in swap files on a local NVMe drive; null/false: off) {
//       nvme_path "" (an existing directory), optimizer {enabled false, nvme_path null (= the one above),
//       buffer_count 4, pin_memory false, read_ahead true, write_behind true}, params {enabled false,
//       nvme_path null, buffer_count 5, pin_memory false, max_in_cpu 0 (elements kept in host memory),
//       read_ahead true, write_behind true}, verify_checksums true,
//       aio {block_size 1048576, queue_depth 8, thread_count 1, single_submit false, overlap_events true}},
//     mixed_precision {param_dtype "f32", reduce_dtype "f32", buffer_dtype "f32" (f32|bf16|f16),
//                      fp32_module_types ["BatchNorm2d"] (module types kept fp32, in units of their own,
//                      when a dtype is not f32; add "LayerNorm" for the GPT's LayerNorms),
//                      keep_low_precision_grads false (gradient shards kept in reduce_dtype, not f32)},
//     activation_checkpointing [] (module types recomputed in backward: [] or ["Block"]),
//     state_dict_type "SHARDED_STATE_DICT"|"FULL_STATE_DICT" (also "sharded"|"full"),
//     sync_module_states false, skip_init_weights false, ignored_modules []}
//   checkpoint {init_from "" (.safetensors, nanoGPT names), save_weights "" (the same, at the end),
//               save_every 0 (steps; 0: never), resume "" ("auto": the newest complete
//               checkpoint of the experiment, or a checkpoint folder), async_save false,
//               keep_last 0 (0: keep all), write_tied_once false (full checkpoints and
//               save_weights hold the tied wte/lm_head matrix once, as transformer.wte.weight)}
//   sample {tokens 200, temperature 0.8, top_k 40}
//   trace {path "", from_step 2, steps 2}
//   deepspeed {...}: a DeepSpeed config block, an alternative to the strategy keys (see
//     Note [DeepSpeed mapping] in config.cc): zero_optimization {stage 0..3,
//     offload_optimizer {device "none"|"cpu"|"nvme", nvme_path, buffer_count, pin_memory,
//     pipeline_read, pipeline_write},
//     offload_param {device, nvme_path, buffer_count, pin_memory, max_in_cpu (default 1e9)},
//     overlap_comm, ...}, aio {block_size, queue_depth, thread_count, single_submit,
//     overlap_events}, bf16 {enabled},
//     fp16 {enabled, loss_scale, initial_scale_power, loss_scale_window, hysteresis,
//     consecutive_hysteresis, min_loss_scale}, communication_data_type, gradient_clipping,
//     gradient_accumulation_steps, train_micro_batch_size_per_gpu, train_batch_size,
//     steps_per_print, optimizer {type, params}.
//
// model.type "resnet" (the vision job of train/resnet_trainer.h on the
// generated ShapesData set; defaults those of train_resnet's flags) reads:
//   model {type, widths [16, 32, 64, 128], depths [1, 1, 1, 1], num_classes 10,
//          stem "cifar"|"imagenet", zero_init_residual false}
//   data {image_size 32, train_size 20000, val_size 2000, seed 0, noise 0.1}
//   train {steps 300, batch_size 32 (images per rank), seed 1337, log_every 25,
//          eval_every 100 (0: only at the end), eval_batch 100, average_bn_stats true,
//          threads_per_rank 0 (0: hardware threads / in-process ranks), tensorboard true}
//   optimizer (as above; default sgd, lr 0.05, weight_decay 5e-4, momentum 0.9, nesterov true),
//   lr_schedule (as above; default cosine, min_lr 5e-4, warmup_steps 20),
//   distributed, work_dir, experiment_name, description (as above),
//   strategy (as above, auto_wrap_policy default ["BasicBlock"]; without
//     activation_checkpointing, state_dict_type, skip_init_weights),
//   checkpoint {save_weights "" (.safetensors, torchvision names with BatchNorm buffers)}.
// A key of the other model type (model.n_layer, data.path, train.grad_clip,
// sample, trace, loss_scaler, deepspeed, ... under "resnet"; model.widths,
// data.image_size, ... under "gpt") is an error.
#ifndef ZEROSHARD_TRAIN_CONFIG_H_
#define ZEROSHARD_TRAIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/resnet_trainer.h"
#include "train/trainer.h"

namespace zeroshard {

struct RunConfig {
  std::string model_type = "gpt";  // model.type: "gpt" (train: RunTraining) or "resnet" (resnet: RunResNetTraining)
  TrainOptions train;  // what RunTraining reads (log_file / metrics_csv are set by the run folder;
                       // work_dir, where checkpoints go, is work_dir/experiment_name)
  int world_size = 4;
  std::string backend = "local";  // "local", "mpi" or "nccl" (one in-process rank per GPU)
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
