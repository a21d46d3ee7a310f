// The training loop of the main job: a GPT trained on a token file with a
// ShardedModel over any Communicator, printing progress. The command-line
// program (examples/train_gpt.cc) fills TrainOptions from flags and runs
// RunTraining on every rank.
//
//   TrainOptions o;                         // defaults: the tiny GPT of `make train`
//   o.data = "data/tinyshakespeare.txt";
//   std::vector<absl::Status> s = RunRanks(4, [&](Communicator& comm) {
//     return RunTraining(o, comm);
//   });
#ifndef ZEROSHARD_TRAIN_TRAINER_H_
#define ZEROSHARD_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/optim/loss_scaler.h"
#include "zeroshard/optim/lr_schedule.h"
#include "zeroshard/optim/optim_wrapper.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharding_options.h"
#include "zeroshard/runtime/trace.h"

namespace zeroshard {

struct TrainOptions {
  // "gpt" (nn::Gpt) or "llama" (nn::Llama). Both read model.{vocab_size,
  // n_layer, n_head, n_embd} as their sizes and model.block_size as the
  // sequence length trained on; a Llama takes the rest from `llama`, or all of
  // its sizes from HF_DIR/config.json when init_from is a Hugging Face folder.
  std::string model_type = "gpt";
  nn::GptConfig model{.vocab_size = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  // Llama only: num_key_value_heads (0: n_head), intermediate_size (0: 8/3
  // n_embd rounded up to a multiple of 64), max_position_embeddings (0:
  // block_size), rms_norm_eps, rope_theta, rope_scaling, tie_word_embeddings,
  // attention_bias, mlp_bias, initializer_range.
  nn::LlamaConfig llama{.intermediate_size = 0, .num_key_value_heads = 0, .max_position_embeddings = 0,
                        .rms_norm_eps = 1e-5};
  std::string data = "data/tinyshakespeare.txt";
  double val_fraction = 0.1;   // the last 10% of the tokens
  // How a text file becomes tokens and the final sample becomes text: "bytes"
  // (one token per byte, vocabulary 256) or "gpt2" (GPT-2's byte-level BPE,
  // data/tokenizer.h; vocabulary 50257, so model.vocab_size >= 50257). A .bin
  // token file is read as tokens either way; the tokenizer then only decodes the sample.
  std::string tokenizer = "bytes";
  int64_t batch_size = 8;      // rows per rank per micro-step
  int64_t grad_accum_steps = 1;
  bool no_sync = false;        // accumulate unsharded gradients (FSDP no_sync) instead of sharded
  int64_t steps = 200;
  optim::LrSchedule lr{.kind = optim::LrScheduleKind::kCosine, .lr = 1e-3, .min_lr = 1e-4,
                       .warmup_steps = 20, .decay_steps = 200};
  optim::OptimizerOptions optimizer{.kind = optim::OptimizerKind::kAdamW, .lr = 1e-3, .weight_decay = 0.1};
  double grad_clip = 1.0;      // 0: off
  uint64_t seed = 1337;
  // Start from these weights (optional): a .safetensors with the model's
  // names (nanoGPT's for GPT), or for a Llama a Hugging Face folder
  // (config.json + model.safetensors or its sharded index; each rank reads
  // only the byte ranges of its own shards: checkpoint/hf_folder.h).
  std::string init_from;
  // Write the trained weights here (optional): GPT a .safetensors file; Llama
  // a Hugging Face folder (config.json, index, shards of save_shard_bytes).
  std::string save;
  int64_t save_shard_bytes = 5'000'000'000;
  int64_t log_every = 10;
  int64_t eval_every = 100;    // 0: only at the end
  int64_t eval_iters = 10;
  int64_t sample_tokens = 200; // generated at the end (byte vocabularies only)
  double temperature = 0.8;
  int64_t top_k = 40;
  ShardingOptions sharding;      // includes mixed_precision {param, reduce, buffer dtypes}
  // fp16 dynamic loss scaling (on by default when param_dtype is f16).
  bool loss_scaling = false;
  optim::LossScalerOptions loss_scaler;
  int64_t inject_inf_at_step = -1;  // fault injection for tests: rank 0's loss becomes Inf at this step
  int64_t device_memory_limit = 0;  // bytes per rank of the "device" allocator; 0: unlimited
  // Checkpoints (checkpoint/checkpoint.h): every `save_every` steps into
  // work_dir/step-<n>, keeping the newest `keep_last` (0: all) throughout the
  // run: older ones are removed once a save is complete (async: when the next
  // save starts), so the disk holds at most keep_last + 1.
  std::string work_dir;
  int64_t save_every = 0;
  std::string state_dict_type = "sharded";  // or "full"
  bool async_save = false;
  int keep_last = 0;
  // Full checkpoints and `save`: the tied matrix once, as transformer.wte.weight
  // (SaveOptions::write_tied_once, Note [Tied parameters in files]).
  bool write_tied_once = false;
  std::string resume;          // "", "auto" (newest complete under work_dir) or a checkpoint directory
  std::string trace;           // Chrome trace of steps [trace_from, trace_from + trace_steps)
  int64_t trace_from = 2;
  int64_t trace_steps = 2;
  TraceRecorder* shared_trace = nullptr;  // in-process ranks share one recorder (set by the caller)
  // Run folder outputs (train/run_dir.h), written by rank 0: every printed
  // line is appended to log_file, one row per step to metrics_csv
  // (train/metrics.h), the same figures as TensorBoard scalars to an event
  // file in tensorboard_dir (train/tensorboard.h). Give every rank the same
  // values: the per-rank peak memory of the metrics is gathered from all of them.
  std::string log_file;
  std::string metrics_csv;
  std::string tensorboard_dir;
  bool tensorboard = true;  // train.tensorboard: whether the run folder gets tensorboard_dir
  // Rank 0 redraws a one-line progress bar every step (train/progress.h);
  // for terminals, and the same on every rank (it gathers per-rank memory).
  bool progress_bar = false;
  // Set: rank 0's printed lines (the step lines, evaluations, the sample, the
  // summary) go to this function instead of stdout, and no progress bar is
  // drawn; log_file still gets them (LogSink::Options::writer). For an
  // embedder that owns stdout. Not a config key.
  std::function<void(absl::string_view text)> output;
  double peak_flops = 0;  // the MFU's denominator, FLOP/s of all ranks together; 0: no MFU

  std::string ToString() const;
};

// What a finished run reports (rank 0's view; losses are global means).
struct TrainSummary {
  std::vector<double> losses;  // per step
  int64_t skipped_steps = 0;   // overflowed fp16 steps
  double final_loss_scale = 0;
  double final_val_loss = 0;
  double unigram_entropy = 0;
  double seconds = 0;
  int64_t tokens = 0;
  int64_t peak_bytes = 0;      // this rank's device allocator
  // Bytes this rank sent per training step (the mean over the run's steps) in
  // the step's collectives, by the ring convention of Note [Bytes sent]
  // (collectives/communicator.h); the "done:" line's comm_bytes_per_step.
  int64_t comm_bytes_per_step = 0;
  int64_t start_step = 0;      // > 0 when resumed
  std::string last_checkpoint;
  double save_blocked_seconds = 0;  // training time spent inside saves (async: the snapshots)
  // On GPUs, rank 0's calls per step after the first two (runtime/cuda/device_api.h
  // ThreadCudaCallCounts): cudaMalloc (0 once the caching allocator is warm) and
  // host synchronisations; -1 where not measured (CPU ranks, or fewer than 3 steps).
  double cuda_mallocs_per_step = -1;
  // Per quiet step: one that neither logs, evaluates, saves nor writes a
  // metrics row (those read the loss back: a host synchronisation each).
  double host_syncs_per_step = -1;
  // Of those, limit_all_gathers' waits (sharding/device_schedule.h,
  // FreeEventQueue): an all-gather issued while the limit's number are in
  // flight and the GPU has not yet freed the oldest holds the host back, by
  // design (PyTorch FSDP's rate limiter does the same). 0 while the GPU keeps up.
  double rate_limiter_waits_per_step = -1;
  int64_t quiet_steps_counted = 0;
  // On GPUs, the linears' bias gradients of the whole run (every rank of this
  // process): in the weight-gradient GEMM's epilogue, and fallen back to our
  // reduction where cuBLASLt refused it (Note [Bias gradient in the GEMM]).
  int64_t bias_grads_fused = 0;
  int64_t bias_grad_fallbacks = 0;
  // Likewise the MLPs' GELU (forward, with its input kept) and GELU gradient
  // in the GEMMs' epilogues, and their fallbacks (Note [GELU in the GEMM]).
  int64_t gelu_epilogues_fused = 0;
  int64_t gelu_epilogue_fallbacks = 0;
  // Attention calls (forward and backward each one) by the kernel that ran:
  // cuDNN's fused attention, our tensor-core kernel, our scalar kernel
  // (AttentionKernelCounts, kernels/attention.h).
  int64_t attention_cudnn = 0;
  int64_t attention_tensor_core = 0;
  int64_t attention_scalar = 0;
};

// Runs on every rank; rank 0 prints. `summary` (optional) receives rank 0's figures.
//
// On GPUs (`comm` an NcclCommunicator, one rank per device): parameters,
// activations and gradients live in a caching allocator of comm.device()
// (runtime/cuda/caching_allocator.h, on the legacy default stream the op entries
// use), batches
// are copied there, and `host` (e.g. the in-process communicator that
// bootstrapped NCCL) carries the run's host-side numbers: mean losses, peak
// memory, barriers. Checkpoints, --init_from and NVMe offload are not yet
// supported on GPUs: refused with an error naming the option.
absl::Status RunTraining(const TrainOptions& options, Communicator& comm,
                         TrainSummary* summary = nullptr, Communicator* host = nullptr);

// The Llama a run of `options` builds (model_type "llama"): from the init_from
// folder's config.json, or from options.model and options.llama. Checks the
// sequence length (model.block_size) fits max_position_embeddings.
absl::StatusOr<nn::LlamaConfig> LlamaConfigFor(const TrainOptions& options);
// The job's model, shapes only (a GPT from options.model seeded for `rank`'s
// dropout, or the Llama of LlamaConfigFor), as RunTraining and the simulator
// (sim/simulator.h) build it.
absl::StatusOr<std::shared_ptr<nn::CausalLm>> MakeJobModel(const TrainOptions& options, int rank);
// options.sharding as the job runs it: the default unit (a GPT Block) becomes
// the model's own layer type; init_seed is the run's seed.
ShardingOptions JobShardingOptions(const TrainOptions& options, const nn::CausalLm& model);
// The optimizer step of the job (optimizer, schedule, accumulation, clipping, loss scaling).
optim::OptimWrapperOptions JobStepOptions(const TrainOptions& options);
// Whether `path` is a Hugging Face model folder (a directory with config.json).
bool IsHfFolder(const std::string& path);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_TRAINER_H_
