// The main job: trains a GPT on a text (bytes) or token (.bin) file with
// sharded data parallelism over in-process ranks or MPI processes.
//
//   bazel run -c opt //examples:train_gpt -- --config=examples/configs/default.json
//   bazel-bin/examples/train_gpt --config=examples/configs/fp16.json --set train.steps=50
//       --set strategy.mixed_precision.reduce_dtype=bf16       (one line)
//   bazel-bin/examples/train_gpt --world_size=4 --steps=200          # flags alone: the defaults + flags
//   mpirun -np 2 bazel-bin/examples/train_gpt --config=... --backend=mpi
//   bazel-bin/examples/train_gpt --config=examples/configs/resnet.json   # the vision job (model.type "resnet")
//
// The run is described by one JSON config (train/config.h has the schema;
// examples/configs/ holds ready ones). Precedence, lowest first: the built-in
// defaults, the --config file, the flags below given on the command line
// (each is a shorthand for a config key), then every --set key.path=value in
// order. The whole config is checked before anything starts (--print_config
// prints the resolved config and exits). With a work_dir the run writes
// work_dir/experiment_name/<timestamp>/ {config.json, <timestamp>.log, metrics.csv,
// tensorboard/events.out.tfevents.*}.
//
// A config with model.type "resnet" runs the vision job instead
// (RunResNetTraining on the generated ShapesData set, train/resnet_job.h)
// over the same ranks and backends, into a run folder of config.json, the log
// and metrics.csv (step,loss,lr,images_per_s,ms_per_step,val_loss,val_accuracy).
//
// Prints one line per logged step: "step <n> loss <loss> lr <lr> <ms> ms/step
// <n> tokens/s", validation losses beside the corpus's unigram entropy, a
// generated sample and a summary. Flags (defaults in train/config.h):
// model --n_layer --n_head --n_embd --block_size --vocab_size --dropout;
// data --data --batch_size (per rank) --grad_accum_steps --accumulate;
// optimisation --steps --optimizer --lr --min_lr --warmup_steps --lr_schedule
// --weight_decay --beta1 --beta2 --grad_clip --seed; sharding --world_size
// --backend --sharding_strategy --zero_stage (1|2|3) --hybrid_shard_size --auto_wrap
// --forward_prefetch --backward_prefetch --limit_all_gathers
// --activation_checkpointing --offload --nvme_path --param_dtype --reduce_dtype
// --keep_layernorm_fp32 --keep_low_precision_grads; fp16
// --loss_scale --initial_scale_power --loss_scale_window --hysteresis
// --min_loss_scale; I/O --init_from --save --log_every --eval_every
// --eval_iters --tensorboard --sample_tokens --temperature --top_k --trace --trace_from
// --trace_steps; checkpoints --work_dir --save_every --state_dict_type
// --async_save --keep_last --resume (into work_dir/experiment_name/step-<n>) --write_tied_once.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/local_communicator.h"
#include "collectives/mpi_communicator.h"
#include "collectives/nccl_communicator.h"
#include "train/config.h"
#include "train/progress.h"
#include "train/resnet_job.h"
#include "train/run_dir.h"
#include "train/trainer.h"
#include "runtime/cuda/device_api.h"
#include "runtime/status.h"

ABSL_FLAG(std::string, config, "", "JSON config (examples/configs/); flags and --set override it");
ABSL_FLAG(std::string, set, "", "key.path=value: override one config key (repeat the flag for more)");
ABSL_FLAG(bool, print_config, false, "print the resolved config and exit");
ABSL_FLAG(int64_t, n_layer, 4, "transformer blocks");
ABSL_FLAG(int64_t, n_head, 4, "attention heads");
ABSL_FLAG(int64_t, n_embd, 128, "model width");
ABSL_FLAG(int64_t, block_size, 64, "context length T");
ABSL_FLAG(int64_t, vocab_size, 256, "vocabulary (256 for byte-level text)");
ABSL_FLAG(double, dropout, 0.0, "embedding and residual dropout");
ABSL_FLAG(std::string, data, "data/tinyshakespeare.txt", "text file (bytes) or .bin of uint16 tokens");
ABSL_FLAG(int64_t, batch_size, 8, "rows per rank per micro-step");
ABSL_FLAG(int64_t, grad_accum_steps, 1, "micro-steps per optimizer step");
ABSL_FLAG(std::string, accumulate, "sharded", "gradient accumulation: sharded (reduce-scatter every micro-step) or no_sync");
ABSL_FLAG(int64_t, steps, 200, "optimizer steps");
ABSL_FLAG(std::string, optimizer, "adamw", "adamw, adam or sgd");
ABSL_FLAG(double, lr, 1e-3, "peak learning rate");
ABSL_FLAG(double, min_lr, 1e-4, "learning rate at the end of decay");
ABSL_FLAG(int64_t, warmup_steps, 20, "linear warmup steps");
ABSL_FLAG(std::string, lr_schedule, "cosine", "constant, cosine or linear");
ABSL_FLAG(double, weight_decay, 0.1, "decoupled weight decay on 2-D weights");
ABSL_FLAG(double, beta1, 0.9, "Adam beta1 (SGD momentum)");
ABSL_FLAG(double, beta2, 0.95, "Adam beta2");
ABSL_FLAG(double, grad_clip, 1.0, "max global gradient norm (0: off)");
ABSL_FLAG(uint64_t, seed, 1337, "initialisation, dropout and sampling seed");
ABSL_FLAG(int, world_size, 4, "in-process ranks (--backend=local)");
ABSL_FLAG(std::string, backend, "local",
          "local (threads), mpi (one rank per process under mpirun) or nccl (one thread per GPU, "
          "cuda:0 .. cuda:world_size-1)");
ABSL_FLAG(std::string, sharding_strategy, "FULL_SHARD",
          "FULL_SHARD, SHARD_GRAD_OP, SHARD_OPTIMIZER, NO_SHARD or HYBRID_SHARD");
ABSL_FLAG(int, zero_stage, 3,
          "ZeRO stage: 1 (SHARD_OPTIMIZER), 2 (SHARD_GRAD_OP) or 3 (FULL_SHARD); an error beside a different "
          "--sharding_strategy");
ABSL_FLAG(int, hybrid_shard_size, 0, "ranks per shard group for HYBRID_SHARD");
ABSL_FLAG(std::string, auto_wrap, "block", "block, size:<min_num_params> or none");
ABSL_FLAG(bool, forward_prefetch, false, "prefetch the next unit's all-gather in forward");
ABSL_FLAG(std::string, backward_prefetch, "pre", "pre, post or none");
ABSL_FLAG(int, limit_all_gathers, 2, "gathered units in flight (0: unlimited)");
ABSL_FLAG(bool, activation_checkpointing, false, "recompute each block in backward");
ABSL_FLAG(std::string, init_from, "", "start from these weights (.safetensors, nanoGPT names)");
ABSL_FLAG(std::string, save, "", "write the trained weights (.safetensors, nanoGPT names)");
ABSL_FLAG(int64_t, log_every, 10, "print every n steps");
ABSL_FLAG(int64_t, eval_every, 100, "validation loss every n steps (0: only at the end)");
ABSL_FLAG(int64_t, eval_iters, 10, "validation batches per evaluation");
ABSL_FLAG(bool, tensorboard, true, "TensorBoard event file in the run folder's tensorboard/ (--notensorboard: none)");
ABSL_FLAG(int64_t, sample_tokens, 200, "tokens to generate at the end");
ABSL_FLAG(double, temperature, 0.8, "sampling temperature");
ABSL_FLAG(int64_t, top_k, 40, "sample among the k most likely tokens");
ABSL_FLAG(int64_t, device_memory_limit, 0, "bytes per rank (0: unlimited)");
ABSL_FLAG(std::string, offload, "none",
          "none; host offload: optimizer (state, master weights, gradients) or params_and_optimizer; NVMe offload "
          "(ZeRO-Infinity, files under --nvme_path): nvme_optimizer (optimizer state) or nvme_params_and_optimizer "
          "(and the master weight shards)");
ABSL_FLAG(std::string, nvme_path, "", "directory for the NVMe swap files (a local NVMe mount) of --offload=nvme_*");
ABSL_FLAG(std::string, param_dtype, "f32", "dtype of gathered parameters and compute: f32, bf16 or f16");
ABSL_FLAG(bool, keep_layernorm_fp32, false,
          "under mixed precision keep every LayerNorm in fp32 (units of their own, gathered and reduced in f32)");
ABSL_FLAG(bool, keep_low_precision_grads, false,
          "keep gradient shards in --reduce_dtype (half the bytes) instead of upcasting them to f32");
ABSL_FLAG(std::string, reduce_dtype, "f32", "dtype of gradient reduction: f32, bf16 or f16");
ABSL_FLAG(std::string, loss_scale, "auto", "fp16 loss scaling: dynamic, none, or auto (dynamic when param_dtype is f16)");
ABSL_FLAG(int, initial_scale_power, 16, "initial loss scale 2^n");
ABSL_FLAG(int64_t, loss_scale_window, 1000, "clean steps before the scale grows");
ABSL_FLAG(int, hysteresis, 2, "overflows tolerated before the scale drops");
ABSL_FLAG(double, min_loss_scale, 1.0, "the scale never drops below this");
ABSL_FLAG(std::string, work_dir, "", "where checkpoints go (work_dir/step-<n>)");
ABSL_FLAG(int64_t, save_every, 0, "save a checkpoint every n steps (0: never)");
ABSL_FLAG(std::string, state_dict_type, "sharded", "checkpoint format: sharded (each rank its own file) or full (PyTorch-loadable)");
ABSL_FLAG(bool, async_save, false, "write checkpoints in the background (training blocks only for a snapshot)");
ABSL_FLAG(int, keep_last, 0, "keep only the newest n checkpoints (0: all)");
ABSL_FLAG(bool, write_tied_once, false,
          "full checkpoints and --save: the tied wte/lm_head matrix once, as transformer.wte.weight (Hugging Face's layout)");
ABSL_FLAG(std::string, resume, "", "auto (newest complete checkpoint under --work_dir) or a checkpoint directory");
ABSL_FLAG(std::string, trace, "", "write a Chrome trace (Perfetto) of a few steps to this file");
ABSL_FLAG(int64_t, trace_from, 2, "first traced step");
ABSL_FLAG(int64_t, trace_steps, 2, "traced steps");

namespace zeroshard {
namespace {

// Takes every --set out of argv (absl keeps only a flag's last value, and a
// value may hold commas): "--set=k=v", "--set k=v", "-set ...".
std::vector<std::string> TakeSetArgs(int* argc, char** argv) {
  std::vector<std::string> sets;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (; i < *argc; ++i) argv[out++] = argv[i];
      break;
    }
    if (a == "--set" || a == "-set") {
      if (i + 1 < *argc) sets.push_back(argv[++i]);
      continue;
    }
    if (absl::StartsWith(a, "--set=") || absl::StartsWith(a, "-set=")) {
      sets.push_back(a.substr(a.find('=') + 1));
      continue;
    }
    argv[out++] = argv[i];
  }
  *argc = out;
  return sets;
}

// The flags of this file given on the command line, as (name, value) in order.
std::vector<std::pair<std::string, std::string>> GivenFlags(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> given;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    std::string name = a.substr(a[1] == '-' ? 2 : 1);
    name = name.substr(0, name.find('='));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) flag = absl::FindCommandLineFlag(name.substr(2));
    if (flag == nullptr || !absl::EndsWith(flag->Filename(), "train_gpt.cc")) continue;
    const std::string n(flag->Name());
    if (n == "config" || n == "set" || n == "print_config") continue;
    std::erase_if(given, [&](const auto& g) { return g.first == n; });
    given.emplace_back(n, flag->CurrentValue());
  }
  return given;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "train_gpt: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  using namespace zeroshard;
  const std::vector<std::string> sets = TakeSetArgs(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::vector<std::string>> overrides = OverridesFromFlags(GivenFlags(argc, argv));
  if (!overrides.ok()) return Fail(overrides.status());
  overrides->insert(overrides->end(), sets.begin(), sets.end());
  const std::string config_path = absl::GetFlag(FLAGS_config);
  absl::StatusOr<RunConfig> config =
      config_path.empty() ? ConfigFromText("", *overrides) : LoadConfig(config_path, *overrides);
  if (!config.ok()) return Fail(config.status());
  if (absl::GetFlag(FLAGS_print_config)) {
    std::fputs(ResolvedConfigJson(*config).c_str(), stdout);
    return 0;
  }
  TrainOptions& options = config->train;
  // Rank 0 makes the run folder and writes the resolved config; the log opens
  // with this. Returns the folder's path ("" without a work_dir).
  auto open_run_dir = [&]() -> absl::StatusOr<std::string> {
    std::string header = absl::StrCat("config: ", config->source, "\n");
    for (const std::string& note : config->notes) absl::StrAppend(&header, "note: ", note, "\n");
    std::string path;
    if (!config->work_dir.empty()) {
      ZS_ASSIGN_OR_RETURN(RunDir dir, StartRun(&*config, header));
      absl::StrAppend(&header, "run folder: ", dir.path(), "\n");
      ZS_RETURN_IF_ERROR(dir.WriteFile(dir.log_path(), header));  // with its own path
      path = dir.path();
    }
    std::fputs(header.c_str(), stdout);
    return path;
  };
  if (config->backend == "mpi") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    absl::Status status;
    {
      absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
      status = comm.ok() ? CheckWorldSize(*config, (*comm)->size()) : comm.status();
      if (status.ok()) status = options.sharding.Validate((*comm)->size());
      if (status.ok()) config->world_size = (*comm)->size();  // what the resolved config records
      // Rank 0's run folder, told to every rank (they all gather the metrics' peak memory).
      std::string run;
      if (status.ok() && (*comm)->rank() == 0) {
        absl::StatusOr<std::string> opened = open_run_dir();
        status = opened.status();
        if (opened.ok()) run = *opened;
      }
      int ok = status.ok() ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (status.ok() && !ok) status = absl::AbortedError("another rank failed to start");
      if (status.ok()) {
        int n = static_cast<int>(run.size());
        MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        run.resize(n);
        MPI_Bcast(run.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (!run.empty()) PointOutputsInto(&*config, RunDir::At(run));
        status = config->model_type == "resnet" ? RunResNetTraining(config->resnet, **comm).status()
                                                : RunTraining(options, **comm);
      }
    }
    MPI_Finalize();
    return status.ok() ? 0 : Fail(status);
  }
  const int world = config->world_size;
  if (absl::Status s = options.sharding.Validate(world); !s.ok()) return Fail(s);
  if (absl::StatusOr<std::string> opened = open_run_dir(); !opened.ok()) return Fail(opened.status());
  if (config->model_type == "resnet") {
    if (config->backend == "nccl") {
      return Fail(absl::UnimplementedError(
          "backend nccl trains the GPT; the vision job runs on local or mpi ranks"));
    }
    absl::StatusOr<ResNetTrainResult> result = RunResNetConfig(*config);
    return result.ok() ? 0 : Fail(result.status());
  }
  const bool gpus = config->backend == "nccl";
  if (gpus) {
    absl::StatusOr<int> n = cuda::CudaDeviceCount();
    const int have = n.ok() ? *n : 0;
    if (have < world) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "backend nccl: expected ", world, " GPUs (distributed.world_size, one rank each), found ",
          have, cuda::BuiltWithCuda() ? "" : " (built without CUDA)")));
    }
  }
  // On a terminal: a progress bar (plain lines stay in the log and in pipes).
  options.progress_bar = isatty(fileno(stdout)) != 0;
  if (options.progress_bar && !gpus) {  // the measured peak is the CPU's
    const PeakFlops peak = MeasurePeakFlops();
    options.peak_flops = peak.flops_per_s;
    std::printf("MFU against the measured peak: %s\n", peak.how.c_str());
  }
  TraceRecorder trace;  // one recorder for every in-process rank
  if (!options.trace.empty()) options.shared_trace = &trace;
  // nccl: each in-process rank drives one GPU through NCCL, bootstrapped by
  // (and keeping its host numbers on) the in-process communicator.
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    if (!gpus) return RunTraining(options, comm);
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(comm, Device::Cuda(comm.rank())));
    return RunTraining(options, *nccl, nullptr, &comm);
  });
  int rc = 0;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      std::fprintf(stderr, "rank %zu: %s\n", r, statuses[r].ToString().c_str());
      rc = 1;
    }
  }
  return rc;
}
