// The main job: trains a GPT on a text (bytes) or token (.bin) file with
// sharded data parallelism over in-process ranks or MPI processes.
//
//   bazel run -c opt //examples:train_gpt -- --config=examples/configs/default.json
//   bazel-bin/examples/train_gpt --config=examples/configs/fp16.json --set train.steps=50
//       --set strategy.mixed_precision.reduce_dtype=bf16       (one line)
//   bazel-bin/examples/train_gpt --world_size=4 --steps=200          # flags alone: the defaults + flags
//   mpirun -np 2 bazel-bin/examples/train_gpt --config=... --backend=mpi
//   (--backend takes any registered backend: collectives/backend_registry.h)
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
// over the same ranks and backends (nccl included: one GPU per rank, from
// threads or one process per GPU, as the GPT), into a run folder of config.json, the log
// and metrics.csv (step,loss,lr,images_per_s,ms_per_step,val_loss,val_accuracy).
//
// Prints one line per logged step: "step <n> loss <loss> lr <lr> <ms> ms/step
// <n> tokens/s", validation losses beside the corpus's unigram entropy, a
// generated sample and a summary. Flags: every config key that has one
// (--steps, --lr, --sharding_strategy, --offload, ...: the field table of
// train/config_schema.cc, parsed by train/config_flags.h); `--help` lists them
// with their defaults and docs/config.md has the whole reference.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/kernels/matmul.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_flags.h"
#include "zeroshard/train/progress.h"
#include "zeroshard/train/resnet_job.h"
#include "zeroshard/train/run_dir.h"
#include "zeroshard/train/trainer.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/watchdog.h"

ABSL_FLAG(std::string, config, "", "JSON config (examples/configs/); flags and --set override it");
ABSL_FLAG(std::string, set, "", "key.path=value: override one config key (repeat the flag for more)");
ABSL_FLAG(bool, print_config, false, "print the resolved config and exit");
// The config keys' flags are not ABSL_FLAGs: TakeConfigFlags (train/config_flags.h)
// takes them from the field table before Abseil parses the rest.

namespace zeroshard {
namespace {

// --help (and --helpfull, -help): this program's own flags and the config
// flags of the field table, with their defaults.
bool PrintHelpIfAsked(int argc, char** argv) {
  bool asked = false;
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i) {
    const std::string a = argv[i];
    asked = asked || a == "--help" || a == "-help" || a == "--helpfull" || a == "-helpfull";
  }
  if (!asked) return false;
  std::printf("train_gpt: trains a GPT (or, with model.type \"resnet\", a ResNet) from a JSON config.\n"
              "Precedence: defaults < --config < flags < --set (docs/config.md).\n\nFlags:\n");
  for (const char* name : {"config", "set", "print_config"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::printf("    --%s  %s\n      default %s\n", name, std::string(flag->Help()).c_str(),
                flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str());
  }
  std::printf("\nConfig flags (each sets one config key, as --set does):\n%s", ConfigFlagsHelp().c_str());
  return true;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "train_gpt: %s\n", s.ToString().c_str());
  return 1;
}

// The process watchdog (runtime/watchdog.h, issue 26): a collective in progress
// past distributed.timeout_s plus a grace, or a device wait (or NCCL init)
// past distributed.timeout_s, writes the flight records into the run folder,
// aborts the communicators and ends the process; under MPI through MPI_Abort,
// which ends every process of the job.
absl::Status StartWatchdog(const RunConfig& config, const std::string& run_dir, int mpi_rank,
                           std::function<void(int)> terminate) {
  WatchdogOptions w;
  w.grace = absl::Seconds(30);
  w.wait_timeout = absl::Seconds(config.timeout_s);
  w.dump_dir = run_dir;
  w.process_rank = mpi_rank;
  if (terminate != nullptr) w.terminate = std::move(terminate);
  ZS_RETURN_IF_ERROR(Watchdog::Process().Start(w));
  if (mpi_rank <= 0) {
    std::printf("watchdog: a collective %s past the timeout (%.0f s) or a device wait past it ends the job%s%s\n",
                absl::FormatDuration(w.grace).c_str(), config.timeout_s,
                run_dir.empty() ? "" : "; flight records in ", run_dir.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  using namespace zeroshard;
  if (PrintHelpIfAsked(argc, argv)) return 0;
  absl::StatusOr<RunConfig> config =
      ConfigFromCommandLine(argc, argv, [] { return absl::GetFlag(FLAGS_config); });
  if (!config.ok()) return Fail(config.status());
  if (absl::GetFlag(FLAGS_print_config)) {
    std::fputs(ResolvedConfigJson(*config).c_str(), stdout);
    return 0;
  }
  TrainOptions& options = config->train;
  SetMatMulAllowTf32(config->allow_tf32);  // train.allow_tf32 (kernels/matmul.h)
  // Rank 0 makes the run folder and writes the resolved config; the log opens
  // with this. Returns the folder's path ("" without a work_dir).
  auto open_run_dir = [&]() -> absl::StatusOr<std::string> {
    std::string header = absl::StrCat("config: ", config->source, "\n");
    for (const std::string& note : config->notes) absl::StrAppend(&header, "note: ", note, "\n");
    if (config->allow_tf32) {
      absl::StrAppend(&header, "note: train.allow_tf32: f32 GEMMs on CUDA run on TF32 tensor cores\n");
    }
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
  // The backend by name (collectives/backend_registry.h): local runs the ranks
  // as threads here; mpi is one rank per process under mpirun (MPI_Init_thread
  // in Start); nccl one thread per GPU.
  BackendRegistry& registry = BackendRegistry::Global();
  absl::StatusOr<BackendInfo> info = registry.Find(config->backend);
  if (!info.ok()) return Fail(info.status());
  const bool resnet = config->model_type == "resnet";
  absl::StatusOr<std::unique_ptr<BackendProcess>> started = registry.Start(
      config->backend, BackendLaunch{.world_size = config->world_size, .comm = CommunicatorOptionsOf(*config),
                                     .argc = &argc, .argv = &argv});
  if (!started.ok()) return Fail(started.status());
  BackendProcess& process = **started;
  const bool many_processes = process.process_rank() >= 0;
  const int world = process.world_size();
  // Setup: the world size, rank 0's run folder told to every process, the watchdog.
  absl::Status status = many_processes ? CheckWorldSize(*config, world) : absl::OkStatus();
  if (status.ok()) status = options.sharding.Validate(world);
  if (status.ok() && resnet && !many_processes) status = config->resnet.sharding.Validate(world);
  if (status.ok()) config->world_size = world;  // what the resolved config records
  std::string run;
  if (status.ok() && process.lead()) {
    absl::StatusOr<std::string> opened = open_run_dir();
    status = opened.status();
    if (opened.ok()) run = *opened;
  }
  status = process.AllOk(status);
  if (status.ok()) {
    run = process.FromLead(run);
    if (many_processes && !run.empty()) PointOutputsInto(&*config, RunDir::At(run));
    status = StartWatchdog(*config, run, process.process_rank(), process.Terminator());
  }
  if (!status.ok()) {
    Fail(status);
    process.AbortJob(1);
    return 1;
  }
  TraceRecorder trace;  // one recorder for every in-process rank
  ResNetTrainOptions resnet_options = config->resnet;
  if (!many_processes) {
    // On a terminal: a progress bar (plain lines stay in the log and in pipes).
    options.progress_bar = !resnet && isatty(fileno(stdout)) != 0;
    if (options.progress_bar && !info->gpus) {  // the measured peak is the CPU's
      const PeakFlops peak = MeasurePeakFlops();
      options.peak_flops = peak.flops_per_s;
      std::printf("MFU against the measured peak: %s\n", peak.how.c_str());
    }
    if (!options.trace.empty()) options.shared_trace = &trace;
    resnet_options.threads_per_rank = ThreadsPerRank(resnet_options.threads_per_rank, world);
  }
  // `host`: nccl's host-memory communicator (the one that bootstrapped it),
  // which keeps the run's host numbers; nullptr elsewhere.
  std::vector<absl::Status> statuses = process.Run([&](Communicator& comm, Communicator* host) -> absl::Status {
    if (resnet) return RunResNetTraining(resnet_options, comm, host).status();
    return RunTraining(options, comm, nullptr, host);
  });
  int rc = 0;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].ok()) continue;
    rc = 1;
    if (many_processes) {
      Fail(statuses[r]);
      process.AbortJob(1);
    } else {
      std::fprintf(stderr, "rank %zu: %s\n", r, statuses[r].ToString().c_str());
    }
  }
  Watchdog::Process().Stop();
  return rc;
}
