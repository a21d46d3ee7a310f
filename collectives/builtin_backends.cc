#include "zeroshard/collectives/builtin_backends.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/mpi_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/log.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::builtin_backends_internal {
namespace {

// ---------------------------------------------------------------- local

class LocalProcess final : public BackendProcess {
 public:
  LocalProcess(const BackendLaunch& launch, int threads_per_rank)
      : BackendProcess(launch.comm), world_(launch.world_size), threads_per_rank_(threads_per_rank) {}
  int world_size() const override { return world_; }
  std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions& comm) override {
    return RunRanks(world_, [&](Communicator& c) { return fn(c, nullptr); },
                    LocalOptions{.comm = comm, .threads_per_rank = threads_per_rank_});
  }

 private:
  const int world_;
  const int threads_per_rank_;
};

// ---------------------------------------------------------------- mpi

// MPI for the process: initialised by the first Start that finds it not
// initialised, finalised when that process object goes.
class MpiSession {
 public:
  static absl::StatusOr<std::shared_ptr<MpiSession>> Open(const BackendLaunch& launch) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    bool owns = false;
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(launch.argc, launch.argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        return absl::UnavailableError("MPI_Init_thread failed");
      }
      owns = true;
    }
    return std::shared_ptr<MpiSession>(new MpiSession(owns));
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  int rank() const {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  int size() const {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }

 private:
  explicit MpiSession(bool owns) : owns_(owns) {}
  const bool owns_;
};

constexpr int kStatusBytes = 2048;

// The setup steps of a job whose ranks are MPI processes.
class MpiProcessBase : public BackendProcess {
 public:
  MpiProcessBase(const BackendLaunch& launch, std::shared_ptr<MpiSession> mpi)
      : BackendProcess(launch.comm), mpi_(std::move(mpi)) {}
  int world_size() const override { return mpi_->size(); }
  int process_rank() const override { return mpi_->rank(); }
  absl::Status AllOk(const absl::Status& mine) override {
    int ok = mine.ok() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (mine.ok() && !ok) return absl::AbortedError("another rank failed to start");
    return mine;
  }
  std::string FromLead(std::string value) override {
    int n = static_cast<int>(value.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    value.resize(n);
    MPI_Bcast(value.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
    return value;
  }
  std::function<void(int)> Terminator() const override {
    return [](int code) {
      std::fflush(nullptr);
      MPI_Abort(MPI_COMM_WORLD, code);
    };
  }
  void AbortJob(int code) override {
    // A peer may be dead or stopped: MPI_Finalize (and a communicator's
    // MPI_Comm_free) would wait for it forever (issue 26). MPI_Abort ends
    // every process of the job.
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::vector<absl::Status> ShareStatuses(std::vector<absl::Status> mine) override {
    const absl::Status own = mine.empty() ? absl::OkStatus() : mine.front();
    const int size = mpi_->size();
    std::vector<char> send(kStatusBytes, 0), recv(static_cast<size_t>(kStatusBytes) * size);
    const int code = static_cast<int>(own.code());
    std::memcpy(send.data(), &code, sizeof(code));
    const std::string text(own.message().substr(0, kStatusBytes - sizeof(code) - 1));
    std::memcpy(send.data() + sizeof(code), text.data(), text.size());
    MPI_Allgather(send.data(), kStatusBytes, MPI_CHAR, recv.data(), kStatusBytes, MPI_CHAR, MPI_COMM_WORLD);
    std::vector<absl::Status> all;
    for (int r = 0; r < size; ++r) {
      const char* p = recv.data() + static_cast<size_t>(r) * kStatusBytes;
      int c = 0;
      std::memcpy(&c, p, sizeof(c));
      all.emplace_back(static_cast<absl::StatusCode>(c), std::string(p + sizeof(c)));
    }
    return all;
  }

 protected:
  std::shared_ptr<MpiSession> mpi_;
};

class MpiProcess final : public MpiProcessBase {
 public:
  MpiProcess(const BackendLaunch& launch, std::shared_ptr<MpiSession> mpi, int64_t chunk_bytes)
      : MpiProcessBase(launch, std::move(mpi)), chunk_bytes_(chunk_bytes) {}
  std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions& comm) override {
    absl::StatusOr<std::unique_ptr<MpiCommunicator>> c =
        MpiCommunicator::Create(MPI_COMM_WORLD, MpiOptions{.comm = comm, .chunk_bytes = chunk_bytes_});
    if (!c.ok()) return {c.status()};
    return {fn(**c, nullptr)};  // the communicator drains and goes before MPI_COMM_WORLD is used again
  }

 private:
  const int64_t chunk_bytes_;
};

// ---------------------------------------------------------------- nccl

// Under mpirun (its environment variables): one process per rank, NCCL
// bootstrapped by MPI on GPU rank % devices. Otherwise one thread per GPU,
// bootstrapped by the in-process backend, ranks on cuda:0 .. world_size-1.
bool UnderMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

class NcclThreadsProcess final : public BackendProcess {
 public:
  explicit NcclThreadsProcess(const BackendLaunch& launch) : BackendProcess(launch.comm), world_(launch.world_size) {}
  int world_size() const override { return world_; }
  std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions& comm) override {
    // The in-process group bootstraps NCCL and keeps the host numbers; both
    // have `comm`'s timeout.
    return RunRanks(world_, [&](Communicator& host) -> absl::Status {
      ZS_RETURN_IF_ERROR(cuda::CudaSetDevice(host.rank()));  // this thread's device, first
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                          NcclCommunicator::Create(host, Device::Cuda(host.rank()), NcclOptions{.comm = comm}));
      return fn(*nccl, &host);
    }, LocalOptions{.comm = comm});
  }

 private:
  const int world_;
};

class NcclMpiProcess final : public MpiProcessBase {
 public:
  NcclMpiProcess(const BackendLaunch& launch, std::shared_ptr<MpiSession> mpi, int device)
      : MpiProcessBase(launch, std::move(mpi)), device_(device) {}
  std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions& comm) override {
    absl::Status s = [&]() -> absl::Status {
      // The device again on this thread (CUDA's current device is per thread),
      // before the first allocation.
      ZS_RETURN_IF_ERROR(cuda::CudaSetDevice(device_));
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> host,
                          MpiCommunicator::Create(MPI_COMM_WORLD, MpiOptions{.comm = comm}));
      // The NCCL unique id travels over MPI (rank 0's, broadcast by `host`).
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                          NcclCommunicator::Create(*host, Device::Cuda(device_), NcclOptions{.comm = comm}));
      return fn(*nccl, host.get());
    }();
    return {s};
  }

 private:
  const int device_;  // the node-local rank
};

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "this node";
  return name;
}

// Under mpirun or srun: the processes of this node (MPI_Comm_split_type,
// MPI_COMM_TYPE_SHARED) take its GPUs in the order of their world ranks;
// the node-local rank is the device. Every process learns whether some node
// has more processes than GPUs before any rank allocates anything, and the
// process picks its device before any other CUDA call of its rank.
absl::StatusOr<std::unique_ptr<BackendProcess>> StartNcclUnderMpi(const BackendLaunch& launch, int gpus) {
  ZS_ASSIGN_OR_RETURN(std::shared_ptr<MpiSession> mpi, MpiSession::Open(launch));
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi->rank(), MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  absl::Status mine = absl::OkStatus();
  if (local_size > gpus) {
    mine = absl::FailedPreconditionError(absl::StrCat(
        "backend nccl: node ", HostName(), " runs ", local_size, " processes of this job (world ranks ",
        "placed there by the launcher) but has ", gpus, " GPU(s): expected at most one process per GPU. "
        "Start at most ", gpus, " per node (mpirun --map-by ppr:", std::max(gpus, 1), ":node, srun "
        "--ntasks-per-node=", std::max(gpus, 1), ") or use more nodes; nothing was allocated"));
  }
  int ok = mine.ok() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!mine.ok()) return mine;
  if (!ok) {
    return absl::FailedPreconditionError(
        "backend nccl: another node runs more processes of this job than it has GPUs (its processes say "
        "which); nothing was allocated");
  }
  ZS_RETURN_IF_ERROR(cuda::CudaSetDevice(local_rank));
  return std::make_unique<NcclMpiProcess>(launch, std::move(mpi), local_rank);
}

absl::StatusOr<std::unique_ptr<BackendProcess>> StartNccl(const BackendLaunch& launch) {
  if (!cuda::BuiltWithCuda()) {
    return absl::FailedPreconditionError(
        "backend nccl: this program was built without CUDA (ZEROSHARD_CUDA=0 or no toolkit); "
        "build with CUDA to use it");
  }
  // The device count is the one CUDA call made before a process picks its
  // device (it creates no context).
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  const int have = n.ok() ? *n : 0;
  if (UnderMpirun()) {
    if (have == 0) return absl::FailedPreconditionError("backend nccl: expected a CUDA device, found none");
    return StartNcclUnderMpi(launch, have);
  }
  if (have < launch.world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend nccl: expected ", launch.world_size, " GPUs (world_size, one rank each), found ", have));
  }
  return std::make_unique<NcclThreadsProcess>(launch);
}

}  // namespace

void RegisterBuiltinBackends(BackendRegistry& registry) {
  auto must = [](const absl::Status& s) {
    if (!s.ok()) {
      Log(LogLevel::kFatal, "collectives", absl::StrCat("built-in backends: ", s.ToString()));
      std::abort();
    }
  };
  must(registry.Register(
      BackendInfo{.name = "local", .description = "in-process ranks: world_size threads (RunRanks)"},
      [](const BackendLaunch& launch) -> absl::StatusOr<std::unique_ptr<BackendProcess>> {
        ZS_ASSIGN_OR_RETURN(const int64_t threads, BackendSetting(launch, "threads_per_rank", 0));
        return std::make_unique<LocalProcess>(launch, static_cast<int>(threads));
      }));
  must(registry.Register(
      BackendInfo{.name = "mpi",
                  .description = "one rank per process under mpirun (the launcher sets the world size)",
                  .multi_process = true},
      [](const BackendLaunch& launch) -> absl::StatusOr<std::unique_ptr<BackendProcess>> {
        ZS_ASSIGN_OR_RETURN(const int64_t chunk, BackendSetting(launch, "chunk_bytes", MpiOptions{}.chunk_bytes));
        ZS_ASSIGN_OR_RETURN(std::shared_ptr<MpiSession> mpi, MpiSession::Open(launch));
        return std::make_unique<MpiProcess>(launch, std::move(mpi), chunk);
      }));
  must(registry.Register(
      BackendInfo{.name = "nccl",
                  .description = "one thread per GPU (cuda:0 .. world_size-1), or one process per GPU under "
                                 "mpirun; needs a CUDA build",
                  .gpus = true},
      StartNccl));
}

}  // namespace zeroshard::builtin_backends_internal
