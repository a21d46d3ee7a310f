#include "zeroshard/collectives/builtin_backends.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/collectives/env_rendezvous.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/mpi_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/collectives/staged_communicator.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
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

// Under mpirun or srun (their environment variables): one process per rank,
// NCCL bootstrapped by MPI on the GPU of the node-local rank. Started
// torchrun-style (RANK and WORLD_SIZE set, env_rendezvous.h): one process
// per rank, rank 0's id over TCP or a file, host numbers through NCCL.
// Otherwise one thread per GPU, bootstrapped by the in-process backend,
// ranks on cuda:0 .. world_size-1.
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

// Started by torchrun, a Kubernetes Job, Slurm without MPI or a script
// (collectives/env_rendezvous.h): one process per GPU; rank 0's NCCL id goes
// over the TCP rendezvous (or the rendezvous file), the run's host numbers
// through NCCL (StagedCommunicator). The group forms at Start, with the
// launch's options, so that the setup steps before Run (AllOk, FromLead,
// ShareStatuses) have a way to talk; Run uses it.
class NcclEnvProcess final : public BackendProcess {
 public:
  NcclEnvProcess(const BackendLaunch& launch, EnvLaunch env) : BackendProcess(launch.comm), env_(std::move(env)) {}

  absl::Status Form(const CommunicatorOptions& comm) {
    const Device device = Device::Cuda(env_.local_rank);
    const NcclOptions options{.comm = comm};
    if (!env_.rendezvous_file.empty()) {
      ZS_ASSIGN_OR_RETURN(nccl_, NcclCommunicator::CreateFromFile(env_.rendezvous_file, env_.rank, env_.world_size,
                                                                  device, options, env_.job_id));
    } else {
      std::string id;
      if (env_.rank == 0) {
        ZS_ASSIGN_OR_RETURN(id, NcclCommunicator::NewUniqueId());
      }
      ZS_ASSIGN_OR_RETURN(id, TcpRendezvous(env_, id, comm.timeout));
      ZS_ASSIGN_OR_RETURN(nccl_, NcclCommunicator::CreateWithId(id, env_.rank, env_.world_size, device, options));
    }
    // The host numbers get an NCCL group of their own over the same ranks (not
    // a split, which would share the model's byte count: Note [Bytes sent]),
    // its id broadcast over the first.
    staging_ = std::make_unique<CudaAllocator>(env_.local_rank);
    std::string second;
    if (env_.rank == 0) {
      ZS_ASSIGN_OR_RETURN(second, NcclCommunicator::NewUniqueId());
    }
    second.resize(128);  // NCCL_UNIQUE_ID_BYTES, what NewUniqueId returns
    ZS_ASSIGN_OR_RETURN(Tensor bytes, Tensor::Empty({128}, DType::kI8, staging_.get()));
    ZS_ASSIGN_OR_RETURN(Tensor host_bytes, Tensor::Empty({128}, DType::kI8));
    std::memcpy(host_bytes.raw_data(), second.data(), 128);
    ZS_RETURN_IF_ERROR(bytes.CopyFrom(host_bytes));
    ZS_RETURN_IF_ERROR(nccl_->Broadcast(bytes, 0));
    ZS_RETURN_IF_ERROR(host_bytes.CopyFrom(bytes));
    std::memcpy(second.data(), host_bytes.raw_data(), 128);
    ZS_ASSIGN_OR_RETURN(host_device_,
                        NcclCommunicator::CreateWithId(second, env_.rank, env_.world_size, device, options));
    ZS_ASSIGN_OR_RETURN(host_, StagedCommunicator::Create(*host_device_, staging_.get()));
    return absl::OkStatus();
  }

  int world_size() const override { return env_.world_size; }
  int process_rank() const override { return env_.rank; }
  absl::Status AllOk(const absl::Status& mine) override {
    absl::StatusOr<Tensor> flag = Tensor::Full({1}, mine.ok() ? 1.0 : 0.0, DType::kF32);
    if (!flag.ok()) return flag.status();
    // The ranks that started, summed: the world size when every one did.
    if (absl::Status s = host_->AllReduce(*flag, ReduceOp::kSum); !s.ok()) return s;
    absl::StatusOr<double> ok = flag->Item();
    if (!ok.ok()) return ok.status();
    if (mine.ok() && *ok < env_.world_size) return absl::AbortedError("another rank failed to start");
    return mine;
  }
  std::string FromLead(std::string value) override {
    absl::StatusOr<std::string> got = BroadcastText(std::move(value));
    return got.ok() ? *got : std::string();
  }
  void AbortJob(int code) override {
    // No launcher ends the other processes: exiting does (a peer waiting in
    // NCCL fails, naming this rank; on GPUs NCCL or the watchdog notice).
    std::fflush(nullptr);
    std::_Exit(code);
  }
  std::vector<absl::Status> ShareStatuses(std::vector<absl::Status> mine) override {
    const absl::Status own = mine.empty() ? absl::OkStatus() : mine.front();
    std::vector<absl::Status> all;
    std::vector<int32_t> blob(kStatusBytes, 0);
    blob[0] = static_cast<int32_t>(own.code());
    const std::string text(own.message().substr(0, kStatusBytes - 2));
    for (size_t i = 0; i < text.size(); ++i) blob[1 + i] = static_cast<unsigned char>(text[i]);
    absl::StatusOr<Tensor> in = Tensor::FromVector(blob, {kStatusBytes}, DType::kI32);
    absl::StatusOr<Tensor> out = Tensor::Empty({kStatusBytes * env_.world_size}, DType::kI32);
    absl::Status s = in.status();
    if (s.ok()) s = out.status();
    if (s.ok()) s = host_->AllGather(*in, *out);
    absl::StatusOr<std::vector<int32_t>> v = s.ok() ? out->ToVector<int32_t>() : s;
    if (!v.ok()) return std::vector<absl::Status>(env_.world_size, v.status());
    for (int r = 0; r < env_.world_size; ++r) {
      const int32_t* p = v->data() + static_cast<size_t>(r) * kStatusBytes;
      std::string m;
      for (int i = 1; i < kStatusBytes && p[i] != 0; ++i) m.push_back(static_cast<char>(p[i]));
      all.emplace_back(static_cast<absl::StatusCode>(p[0]), m);
    }
    return all;
  }
  std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions&) override {
    return {fn(*nccl_, host_.get())};
  }

 private:
  absl::StatusOr<std::string> BroadcastText(std::string value) {
    ZS_ASSIGN_OR_RETURN(Tensor n, Tensor::FromVector(std::vector<int64_t>{static_cast<int64_t>(value.size())}, {1}));
    ZS_RETURN_IF_ERROR(host_->Broadcast(n, 0));
    ZS_ASSIGN_OR_RETURN(double size, n.Item());
    std::vector<int32_t> bytes(static_cast<size_t>(size), 0);
    for (size_t i = 0; i < value.size() && i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(value[i]);
    if (bytes.empty()) return std::string();
    ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector(bytes, {static_cast<int64_t>(bytes.size())}, DType::kI32));
    ZS_RETURN_IF_ERROR(host_->Broadcast(t, 0));
    ZS_ASSIGN_OR_RETURN(bytes, t.ToVector<int32_t>());
    std::string out(bytes.size(), '\0');
    for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<char>(bytes[i]);
    return out;
  }

  const EnvLaunch env_;
  std::unique_ptr<CudaAllocator> staging_;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<NcclCommunicator> host_device_;  // what host_ runs on
  std::unique_ptr<StagedCommunicator> host_;
};

// The env launch: the GPU count checked against this node's processes
// before anything is allocated, the device set first, then the group.
absl::StatusOr<std::unique_ptr<BackendProcess>> StartNcclFromEnv(const BackendLaunch& launch, const EnvLaunch& env,
                                                                  int gpus) {
  const int local = env.local_world_size > 0 ? env.local_world_size : env.local_rank + 1;
  if (env.local_rank >= gpus || local > gpus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend nccl: ", env.ToString(), " on node ", HostName(), ", which has ", gpus,
        " GPU(s): expected at most one process per GPU (LOCAL_RANK below the node's GPU count",
        env.local_world_size > 0 ? ", LOCAL_WORLD_SIZE at most it" : "", "); nothing was allocated"));
  }
  ZS_RETURN_IF_ERROR(cuda::CudaSetDevice(env.local_rank));
  auto process = std::make_unique<NcclEnvProcess>(launch, env);
  ZS_RETURN_IF_ERROR(process->Form(launch.comm));
  return std::unique_ptr<BackendProcess>(std::move(process));
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
        "backend nccl: node ", HostName(), " runs ", local_size, " processes of this job but has ", gpus,
        " GPU(s): expected at most one process per GPU. "
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
  ZS_ASSIGN_OR_RETURN(const std::optional<EnvLaunch> env, EnvLaunchFromEnvironment());
  if (env) return StartNcclFromEnv(launch, *env, have);
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
                  .description = "one thread per GPU (cuda:0 .. world_size-1); or one process per GPU under "
                                 "mpirun / srun, or started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, "
                                 "MASTER_ADDR, MASTER_PORT, ZEROSHARD_JOB_TOKEN; docs/launch.md); needs a CUDA build",
                  .gpus = true},
      StartNccl));
}

}  // namespace zeroshard::builtin_backends_internal
