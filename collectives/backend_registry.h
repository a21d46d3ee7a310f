// The backend registry: communication backends by name, so that the job, the
// config and the benches take `--backend=<name>` for any backend linked into
// the program, including out-of-tree ones.
//
//   // Out-of-tree code (any .cc file linked into the program; in a library,
//   // mark it alwayslink so the linker keeps the registrar):
//   ZS_REGISTER_BACKEND(my_backend, (BackendInfo{.name = "my_backend", .description = "..."}),
//                       [](const BackendLaunch& launch) -> absl::StatusOr<std::unique_ptr<BackendProcess>> {
//                         return std::make_unique<MyProcess>(launch);
//                       });
//
//   // A program:
//   ZS_ASSIGN_OR_RETURN(std::unique_ptr<BackendProcess> process,
//                       BackendRegistry::Global().Start(name, {.world_size = 4, .comm = options}));
//   std::vector<absl::Status> statuses = process->Run([&](Communicator& comm, Communicator* host) {
//     return RunTraining(options, comm, nullptr, host);
//   });
//
// A backend is a factory of BackendProcess: Start does what this process does
// once (MPI_Init_thread, count the GPUs), BackendProcess::Run starts the
// ranks this process hosts on a fresh group of communicators and runs a
// function on each. How ranks are launched is the backend's business: the
// in-process backend runs world_size threads (RunRanks); mpi has one rank per
// process under mpirun (the launcher decides the world size); nccl runs one
// thread per GPU bootstrapped by the in-process backend, or one process per
// GPU: under mpirun / srun bootstrapped by MPI, or started torchrun-style
// (RANK, WORLD_SIZE, ...) bootstrapped by a TCP rendezvous (docs/launch.md).
//
// Built in (registered by the registry itself, so every program that links
// it knows them): local, mpi, nccl. nccl is registered in every build; in a
// build without CUDA, Start fails with FailedPrecondition saying so.
//
// Names are lowercase identifiers ([a-z][a-z0-9_]*); registering a name twice
// is an error (ZS_REGISTER_BACKEND reports it and ends the program at start-up,
// as a link-time mistake); an unknown name gives NotFound listing the
// registered names.
#ifndef ZEROSHARD_COLLECTIVES_BACKEND_REGISTRY_H_
#define ZEROSHARD_COLLECTIVES_BACKEND_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/collectives/communicator.h"

namespace zeroshard {

// What a program asks of a backend.
struct BackendLaunch {
  // Ranks to start, for backends whose ranks are threads of this process.
  // Backends under a launcher (BackendInfo::multi_process) take the
  // launcher's count; see BackendProcess::world_size.
  int world_size = 1;
  // The options of every communicator the backend makes (Run may override).
  CommunicatorOptions comm;
  // Backend-specific knobs by name; a backend reads the ones it knows and
  // ignores the rest (a bench passes its flags to whichever backend runs).
  // Built in: "threads_per_rank" (local: OpenMP threads per rank), "chunk_bytes"
  // (mpi: the reductions' pipeline chunk).
  std::map<std::string, std::string> settings;
  // The program's arguments, for launchers that take them (MPI_Init_thread); may be null.
  int* argc = nullptr;
  char*** argv = nullptr;
};

// A rank's function: `comm` carries the collectives; `host` is a host-memory
// communicator over the same ranks for CPU-side numbers when `comm` is not
// one (nccl: the communicator that bootstrapped it), else nullptr.
using BackendRankFn = std::function<absl::Status(Communicator& comm, Communicator* host)>;

// A started backend in this process. Destroying it undoes Start (mpi:
// MPI_Finalize, when Start initialised MPI).
class BackendProcess {
 public:
  virtual ~BackendProcess() = default;

  // Ranks of the whole job.
  virtual int world_size() const = 0;
  // This process's rank among the job's processes, or -1 when every rank
  // runs in this process.
  virtual int process_rank() const { return -1; }
  // Whether this process hosts rank 0 (it writes the run folder).
  bool lead() const { return process_rank() <= 0; }

  // Setup agreement before the ranks start: OK on every process when `mine`
  // is OK on every process; otherwise this process's error, or Aborted on
  // the processes that were fine.
  virtual absl::Status AllOk(const absl::Status& mine) { return mine; }
  // The lead process's `value`, on every process.
  virtual std::string FromLead(std::string value) { return value; }
  // How the process watchdog ends the job (mpi: MPI_Abort, which ends every
  // process); nullptr: the watchdog's default.
  virtual std::function<void(int)> Terminator() const { return nullptr; }
  // After a rank failed: ends the whole job at once where peers could hang
  // in a collective (mpi: MPI_Abort); does nothing where Run returned every
  // rank's status.
  virtual void AbortJob(int code) { (void)code; }

  // Runs `fn` on each rank this process hosts, on fresh communicators with
  // `comm` options. Returns those ranks' statuses: every rank's (index =
  // rank) for in-process backends, this process's one rank's otherwise.
  virtual std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions& comm) = 0;
  std::vector<absl::Status> Run(const BackendRankFn& fn) { return Run(fn, launch_comm_); }
  // Every rank's status on every process (index = rank), from what Run
  // returned here: a collective over the processes (mpi), or `mine` itself.
  virtual std::vector<absl::Status> ShareStatuses(std::vector<absl::Status> mine) { return mine; }

 protected:
  explicit BackendProcess(CommunicatorOptions comm) : launch_comm_(std::move(comm)) {}

 private:
  CommunicatorOptions launch_comm_;
};

struct BackendInfo {
  std::string name;         // a lowercase identifier
  std::string description;  // one line, for --help and errors
  // Ranks are processes started by a launcher (mpirun); BackendLaunch::world_size
  // is then not how many ranks run.
  bool multi_process = false;
  // Tensors live on GPUs (comm.device() is a CUDA device).
  bool gpus = false;
};

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<BackendProcess>>(const BackendLaunch&)>;

class BackendRegistry {
 public:
  // The process's registry, the built-in backends registered.
  static BackendRegistry& Global();

  // InvalidArgument for a name that is not a lowercase identifier or a null
  // factory; AlreadyExists for a name registered before.
  absl::Status Register(BackendInfo info, BackendFactory factory);
  // The backend's description, or NotFound naming the registered backends.
  absl::StatusOr<BackendInfo> Find(absl::string_view name) const;
  // The registered names, sorted.
  std::vector<std::string> Names() const;
  // "local, mpi, nccl".
  std::string NamesText() const;
  // Starts the backend in this process (Find's error for an unknown name).
  absl::StatusOr<std::unique_ptr<BackendProcess>> Start(absl::string_view name, const BackendLaunch& launch) const;

 private:
  struct Entry {
    BackendInfo info;
    BackendFactory factory;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
};

// Registers at static initialisation; a failed registration (a duplicate or
// a bad name) is printed and ends the program, as any link-time mistake.
struct BackendRegistrar {
  BackendRegistrar(BackendInfo info, BackendFactory factory);
};

// BackendLaunch::settings[key] as an integer, `fallback` when absent.
absl::StatusOr<int64_t> BackendSetting(const BackendLaunch& launch, absl::string_view key, int64_t fallback);

#define ZS_REGISTER_BACKEND(id, info, factory) \
  static const ::zeroshard::BackendRegistrar zs_backend_registrar_##id(info, factory)

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_BACKEND_REGISTRY_H_
