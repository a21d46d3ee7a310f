// nccl_communicator.h over NCCL and the CUDA runtime. Built when the CUDA
// toolkit is enabled (see collectives/BUILD.bazel).
#include "zeroshard/collectives/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/collectives/cuda/convert_kernels.h"
#include "zeroshard/runtime/cuda/cuda_status.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {
namespace {

// A failed NCCL call as a Status: ncclRemoteError (a peer is gone or ended
// the group) is Unavailable, anything else Internal; NCCL's own account of
// the failure (ncclGetLastError: the simulator's names the rank) follows.
absl::Status NcclStatus(ncclResult_t r, const char* call, const char* file, int line,
                        ncclComm_t comm = nullptr) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  std::string text = absl::StrCat(file, ":", line, ": ", call, " failed: ", ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&text, ": ", last);
  return r == ncclRemoteError ? absl::UnavailableError(text) : absl::InternalError(text);
}

#define ZS_NCCL_RETURN_IF_ERROR(call) \
  ZS_RETURN_IF_ERROR(NcclStatus((call), #call, __FILE__, __LINE__))

ncclDataType_t NcclType(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kI8: return ncclInt8;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

}  // namespace

// State shared by a communicator and its Work handles (a Work may outlive
// the communicator): the NCCL handle, and whom to tell about an error.
struct NcclShared {
  ncclComm_t comm = nullptr;
  absl::Duration timeout;
  std::atomic<bool> aborted{false};
  absl::Mutex mu;
  // Set by the communicator while it lives: records the error in its ring,
  // prints it, and marks it aborted.
  std::function<void(const CollectiveDesc&, const absl::Status&)> on_error ABSL_GUARDED_BY(mu);

  void Fail(const CollectiveDesc& desc, const absl::Status& status, bool abort) {
    if (abort && !aborted.exchange(true)) ncclCommAbort(comm);
    absl::MutexLock lock(&mu);
    if (on_error) on_error(desc, status);
  }
};

namespace {

// Completion of one collective: an event recorded on the communication stream.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclShared> shared, CollectiveDesc desc, std::string prefix,
           std::shared_ptr<Event> done)
      : shared_(std::move(shared)),
        desc_(desc),
        prefix_(std::move(prefix)),
        done_(std::move(done)) {}

  absl::Status Wait() override {
    const absl::Time deadline = shared_->timeout == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + shared_->timeout;
    int idle = 0;
    while (true) {
      ZS_ASSIGN_OR_RETURN(const bool complete, done_->Query());
      if (complete) return absl::OkStatus();
      if (shared_->aborted.load()) {
        return absl::AbortedError(absl::StrCat(prefix_, "the communicator was aborted"));
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(shared_->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        const absl::Status s = absl::InternalError(
            absl::StrCat(prefix_, "NCCL reported: ", ncclGetErrorString(async)));
        shared_->Fail(desc_, s, /*abort=*/true);
        return s;
      }
      if (absl::Now() >= deadline) {
        const absl::Status s = absl::DeadlineExceededError(absl::StrCat(
            prefix_, "did not complete within ", absl::FormatDuration(shared_->timeout),
            "; NCCL cannot tell which rank is missing: compare the rings each rank printed "
            "(check mode names ranks that issue a different collective); the communicator is "
            "aborted"));
        shared_->Fail(desc_, s, /*abort=*/true);
        return s;
      }
      if (++idle < 1000) {
        std::this_thread::yield();
      } else {
        absl::SleepFor(absl::Microseconds(20));
      }
    }
  }

  bool IsCompleted() const override {
    absl::StatusOr<bool> q = done_->Query();
    return !q.ok() || *q;
  }

  absl::Status Block(const Stream& stream) override {
    if (!stream.device().is_cuda()) return Wait();
    return done_->Block(stream);
  }

 private:
  std::shared_ptr<NcclShared> shared_;
  const CollectiveDesc desc_;
  const std::string prefix_;
  std::shared_ptr<Event> done_;
};

}  // namespace

struct NcclCommunicator::Impl {
  Impl(std::shared_ptr<NcclShared> s, Stream st) : shared(std::move(s)), stream(std::move(st)) {}

  std::shared_ptr<NcclShared> shared;
  Stream stream;  // the communication stream
  float* barrier_buf = nullptr;                 // 1 float (Barrier)
  CollectiveDesc* desc_buf = nullptr;           // size descriptors (check mode)
  int group_depth = 0;
  std::vector<std::shared_ptr<Event>> group_events;          // recorded at GroupEnd
  std::vector<std::pair<CollectiveDesc, GpuMark>> group_spans;  // GPU spans ended at GroupEnd
  std::vector<std::function<absl::Status()>> after_group;    // narrowing casts, at GroupEnd
  std::vector<std::pair<int64_t, std::shared_ptr<Event>>> in_flight;  // for the ring
  // Guards in_flight's changes (issuing thread) against the watchdog's reads.
  mutable std::mutex in_flight_mu;
};

namespace {

absl::StatusOr<std::unique_ptr<NcclCommunicator>> Wrap(ncclComm_t comm, int rank, int size,
                                                       Device device,
                                                       const NcclOptions& options) {
  auto shared = std::make_shared<NcclShared>();
  shared->comm = comm;
  shared->timeout = options.comm.timeout;
  ZS_ASSIGN_OR_RETURN(Stream stream, Stream::Create(device));
  auto impl = std::make_unique<NcclCommunicator::Impl>(shared, std::move(stream));
  ZS_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->barrier_buf, sizeof(float)));
  ZS_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&impl->desc_buf), size * sizeof(CollectiveDesc)));
  return std::make_unique<NcclCommunicator>(rank, size, device, options, std::move(impl));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> InitRank(const ncclUniqueId& id, int rank,
                                                           int size, Device device,
                                                           const NcclOptions& options) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclCommunicator: device must be a GPU, got ", device.ToString()));
  }
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.index));
  ncclComm_t comm = nullptr;
  {
    // ncclCommInitRank waits for every rank with no deadline (issue 26).
    WatchdogWait wait(absl::StrCat("ncclCommInitRank (rank ", rank, " of ", size, ")"),
                      options.comm.timeout);
    ZS_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&comm, size, id, rank));
  }
  return Wrap(comm, rank, size, device, options);
}

}  // namespace

// ================================================================ creation

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Communicator& bootstrap, Device device, const NcclOptions& options) {
  if (!bootstrap.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NcclCommunicator::Create: the bootstrap communicator must work on the CPU, got a ",
        bootstrap.backend(), " one on ", bootstrap.device().ToString()));
  }
  static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) ZS_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  ZS_ASSIGN_OR_RETURN(Tensor bytes,
                      Tensor::Empty({static_cast<int64_t>(sizeof(id) / 4)}, DType::kI32));
  std::memcpy(bytes.raw_data(), &id, sizeof(id));
  ZS_RETURN_IF_ERROR(bootstrap.Broadcast(bytes, 0));
  std::memcpy(&id, bytes.raw_data(), sizeof(id));
  return InitRank(id, bootstrap.rank(), bootstrap.size(), device, options);
}

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  ZS_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateWithId(
    const std::string& unique_id, int rank, int size, Device device, const NcclOptions& options) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NcclCommunicator::CreateWithId: rank ", rank, " of ", size));
  }
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id)) {
    return absl::InvalidArgumentError(absl::StrCat("NcclCommunicator::CreateWithId: expected a unique id of ",
                                                   sizeof(id), " bytes, found ", unique_id.size()));
  }
  std::memcpy(&id, unique_id.data(), sizeof(id));
  return InitRank(id, rank, size, device, options);
}

namespace {

// The rendezvous file: a header line, then the id's bytes (Note in the header).
constexpr char kIdFileMagic[] = "zeroshard-nccl-id 2";

std::string IdFile(const ncclUniqueId& id, const std::string& job_id, int64_t created_ns) {
  return absl::StrCat(kIdFileMagic, " job=", job_id, " created_ns=", created_ns, "\n",
                      std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
}

// The id in `text` when it is this job's and new enough; else why not.
absl::StatusOr<ncclUniqueId> ReadIdFile(const std::string& text, const std::string& job_id, int64_t not_before_ns) {
  const size_t nl = text.find('\n');
  ncclUniqueId id;
  if (nl == std::string::npos || text.size() != nl + 1 + sizeof(id)) {
    return absl::UnavailableError("incomplete or not a rendezvous file of this version");
  }
  const std::string header = text.substr(0, nl);
  const std::string want = absl::StrCat(kIdFileMagic, " job=", job_id, " created_ns=");
  if (header.rfind(want, 0) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("another job's (\"", header, "\")"));
  }
  int64_t created = 0;
  if (!absl::SimpleAtoi(header.substr(want.size()), &created)) {
    return absl::UnavailableError(absl::StrCat("a malformed header \"", header, "\""));
  }
  if (created < not_before_ns) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stale: created ", absl::FormatDuration(absl::Nanoseconds(not_before_ns - created)),
        " before the earliest moment this run's rank 0 could have written it"));
  }
  std::memcpy(&id, text.data() + nl + 1, sizeof(id));
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateFromFile(
    const std::string& path, int rank, int size, Device device, const NcclOptions& options,
    const std::string& job_id) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclCommunicator::CreateFromFile: rank ", rank, " of ", size));
  }
  if (job_id.find_first_of(" \n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NcclCommunicator::CreateFromFile: expected a job id without spaces or newlines, found \"", job_id, "\""));
  }
  ncclUniqueId id;
  if (rank == 0) {
    ZS_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    // The id lets anyone join the group: written into a file only this user
    // can read (mkstemp: mode 0600), under a name no one can guess or plant a
    // link at beforehand (O_EXCL, random suffix), then renamed into place
    // (issue 26), replacing whatever an earlier run left there.
    const std::string text = IdFile(id, job_id, absl::ToUnixNanos(absl::Now()));
    std::string tmp = absl::StrCat(path, ".tmp.XXXXXX");
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("NcclCommunicator::CreateFromFile: creating a file next to ",
                                                 path, ": ", std::strerror(errno)));
    }
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const int write_errno = errno;
    ::close(fd);
    if (!written) {
      ::unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("NcclCommunicator::CreateFromFile: writing ", tmp, ": ",
                                                 std::strerror(write_errno)));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int rename_errno = errno;
      ::unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("NcclCommunicator::CreateFromFile: renaming ", tmp, " to ",
                                                 path, ": ", std::strerror(rename_errno)));
    }
  } else {
    // Rank 0 started at most the timeout before this rank (or it would have
    // given up on us): a file older than that is an earlier run's.
    const absl::Time start = absl::Now();
    const int64_t not_before = absl::ToUnixNanos(start - options.comm.timeout);
    const absl::Time deadline = start + options.comm.timeout;
    std::string ignored;
    while (true) {
      std::ifstream in(path, std::ios::binary);
      if (in) {
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        absl::StatusOr<ncclUniqueId> read = ReadIdFile(text, job_id, not_before);
        if (read.ok()) {
          id = *read;
          break;
        }
        if (absl::IsFailedPrecondition(read.status())) ignored = std::string(read.status().message());
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "NcclCommunicator::CreateFromFile: rank ", rank, " waited ", absl::FormatDuration(options.comm.timeout),
            " for rank 0 to write ", path, ignored.empty() ? "" : absl::StrCat(" (ignored the file there: ", ignored, ")"),
            ": rank 0 never arrived"));
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  return InitRank(id, rank, size, device, options);
}

NcclCommunicator::NcclCommunicator(int rank, int size, Device device, const NcclOptions& options,
                                   std::unique_ptr<Impl> impl)
    : Communicator(rank, size, device, options.comm),
      nccl_options_(options),
      impl_(std::move(impl)) {
  absl::MutexLock lock(&impl_->shared->mu);
  impl_->shared->on_error = [this](const CollectiveDesc& desc, const absl::Status& status) {
    Abort(status);
    (void)MarkDone(desc, status);
  };
}

NcclCommunicator::~NcclCommunicator() {
  StopWatchdog();
  {
    absl::MutexLock lock(&impl_->shared->mu);
    impl_->shared->on_error = nullptr;
  }
  cudaSetDevice(device().index);
  if (impl_->group_depth > 0) ncclGroupEnd();
  if (impl_->shared->aborted.load()) {
    // ncclCommAbort already released the communicator.
  } else {
    (void)impl_->stream.Synchronize();
    ncclCommDestroy(impl_->shared->comm);
  }
  cudaFree(impl_->barrier_buf);
  cudaFree(impl_->desc_buf);
}

const Stream& NcclCommunicator::stream() const { return impl_->stream; }

// ================================================================ watchdog

bool NcclCommunicator::IsCollectiveComplete(int64_t seq) const {
  std::shared_ptr<Event> event;
  {
    std::lock_guard<std::mutex> lock(impl_->in_flight_mu);
    for (const auto& [s, e] : impl_->in_flight) {
      if (s == seq) event = e;
    }
  }
  if (event == nullptr) return false;
  absl::StatusOr<bool> q = event->Query();
  return q.ok() && *q;
}

void NcclCommunicator::AbortBackend(const absl::Status& why) {
  // Kernels waiting for a peer that will never come end; Work::Wait and later
  // collectives fail with Aborted.
  (void)why;  // Abort(why) has recorded it
  if (!impl_->shared->aborted.exchange(true)) ncclCommAbort(impl_->shared->comm);
}

// ================================================================ groups

absl::Status NcclCommunicator::GroupStart() {
  ZS_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  ++impl_->group_depth;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::GroupEnd() {
  if (impl_->group_depth == 0) {
    return absl::FailedPreconditionError("NcclCommunicator::GroupEnd without GroupStart");
  }
  ZS_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  if (--impl_->group_depth > 0) return absl::OkStatus();
  // The grouped NCCL kernels are enqueued now: the casts and events after them.
  for (auto& fn : impl_->after_group) ZS_RETURN_IF_ERROR(fn());
  impl_->after_group.clear();
  for (auto& e : impl_->group_events) ZS_RETURN_IF_ERROR(e->Record(impl_->stream));
  impl_->group_events.clear();
  // Every collective of the group ends with the group's kernel (their GPU
  // spans share its end).
  for (auto& [desc, mark] : impl_->group_spans) EndGpuSpan(desc, mark, impl_->stream.native_handle());
  impl_->group_spans.clear();
  return absl::OkStatus();
}

// ================================================================ collectives

absl::StatusOr<std::shared_ptr<Work>> NcclCommunicator::Launch(CollectiveCall call) {
  Impl& im = *impl_;
  const CollectiveDesc& d = call.desc;
  const std::string prefix = ErrorPrefix(d, rank(), size());
  // The collective's GPU span and NVTX range while traced (Note [Communication
  // spans]): from just before its work on the communication stream to just
  // after it.
  GpuMark gpu_span;
  // An NCCL call that fails leaves the group unusable (a peer is gone, the
  // group was aborted, a wait timed out): the communicator is aborted, the
  // ring records why, and every later collective fails with Aborted.
  auto nccl_failed = [&](absl::Status s) -> absl::Status {
    EndGpuSpan(d, gpu_span, im.stream.native_handle());
    s = absl::Status(s.code(), absl::StrCat(prefix, s.message()));
    im.shared->Fail(d, s, /*abort=*/true);
    return s;
  };
#define ZS_NCCL_COLLECTIVE(call)                                                   \
  do {                                                                             \
    absl::Status zs_nccl_s = NcclStatus((call), #call, __FILE__, __LINE__, comm); \
    if (!zs_nccl_s.ok()) return nccl_failed(std::move(zs_nccl_s));                 \
  } while (0)
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device().index));
  ncclComm_t comm = im.shared->comm;
  auto s = static_cast<cudaStream_t>(im.stream.native_handle());

  // Ring bookkeeping: collectives whose event has fired are complete.
  for (auto it = im.in_flight.begin(); it != im.in_flight.end();) {
    absl::StatusOr<bool> q = it->second->Query();
    if (q.ok() && *q) {
      trace().SetState(it->first, CollectiveState::kCompleted);
      std::lock_guard<std::mutex> lock(im.in_flight_mu);
      it = im.in_flight.erase(it);
    } else {
      ++it;
    }
  }
  MarkRunning(d);
  // A collective that fails once it has started (the group is unhealthy, the
  // ranks disagree, an argument check failed on some rank) fails through its
  // Work, as on the host backends: an async caller sees the error at Wait,
  // like every other rank, instead of at issue.
  auto failed = [&](absl::Status status) -> absl::StatusOr<std::shared_ptr<Work>> {
    return std::shared_ptr<Work>(HostWork::Done(MarkDone(d, std::move(status))));
  };
  if (absl::Status h = health(); !h.ok()) {
    return failed(absl::AbortedError(absl::StrCat(prefix, h.message())));
  }
  // Start after the work the caller enqueued on its stream so far.
  if (call.stream != nullptr && call.stream->device().is_cuda()) {
    ZS_ASSIGN_OR_RETURN(Event ready, Event::Create(device()));
    ZS_RETURN_IF_ERROR(ready.Record(*call.stream));
    ZS_RETURN_IF_ERROR(ready.Block(im.stream));
  }
  // Check mode: all-gather every rank's descriptor and compare on the host.
  if (options().check_mode && im.group_depth == 0) {
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(im.desc_buf + rank(), &d, sizeof(d),
                                            cudaMemcpyHostToDevice, s));
    ZS_NCCL_COLLECTIVE(ncclAllGather(im.desc_buf + rank(), im.desc_buf, sizeof(d), ncclUint8,
                                          comm, s));
    std::vector<CollectiveDesc> all(size());
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(all.data(), im.desc_buf, size() * sizeof(d),
                                            cudaMemcpyDeviceToHost, s));
    ZS_ASSIGN_OR_RETURN(Event copied, Event::Create(device()));
    auto fired = std::make_shared<Event>(std::move(copied));
    ZS_RETURN_IF_ERROR(fired->Record(im.stream));
    ZS_RETURN_IF_ERROR(NcclWork(im.shared, d, prefix, fired).Wait());
    if (absl::Status c = CheckSameCollective(all); !c.ok()) {
      return failed(absl::Status(c.code(), absl::StrCat(prefix, c.message())));
    }
  }
  if (d.invalid_args) {
    return failed(absl::InvalidArgumentError(
                           absl::StrCat(prefix, "this rank failed the argument check")));
  }

  const ncclDataType_t type = NcclType(d.dtype);
  const bool half = d.dtype == DType::kBF16 || d.dtype == DType::kF16;
  const bool widen = nccl_options_.fp32_accumulation && half && d.reduce_op != ReduceOp::kMax &&
                     (d.op == CollectiveOp::kAllReduce || d.op == CollectiveOp::kReduceScatter);
  const auto ctype =
      d.dtype == DType::kBF16 ? cuda::ConvertType::kBF16 : cuda::ConvertType::kF16;
  void* in = call.input.defined() ? call.input.raw_data() : nullptr;
  void* out = call.output.defined() ? call.output.raw_data() : nullptr;
  gpu_span = BeginGpuSpan(d, s);
  switch (d.op) {
    case CollectiveOp::kAllGather:
      ZS_NCCL_COLLECTIVE(ncclAllGather(in, out, d.count, type, comm, s));
      break;
    case CollectiveOp::kBroadcast:
      ZS_NCCL_COLLECTIVE(ncclBroadcast(in, in, d.count, type, d.root, comm, s));
      break;
    case CollectiveOp::kBarrier:
      ZS_NCCL_COLLECTIVE(
          ncclAllReduce(im.barrier_buf, im.barrier_buf, 1, ncclFloat32, ncclSum, comm, s));
      break;
    case CollectiveOp::kSplit:
      return absl::InternalError("Split does not go through Launch");
    case CollectiveOp::kAllToAll: {
      // A send and a receive per rank (itself included) in one NCCL group:
      // ncclAlltoAll exists only from NCCL 2.28 on; grouped point-to-point
      // works from 2.7 and is what it does. Inside the caller's GroupStart
      // the group nests and launches at the outer GroupEnd.
      const size_t m = static_cast<size_t>(d.count / size());
      if (m == 0) break;
      const size_t block = m * DTypeSize(d.dtype);
      ZS_NCCL_COLLECTIVE(ncclGroupStart());
      absl::Status posted;
      for (int p = 0; p < size() && posted.ok(); ++p) {
        posted = NcclStatus(ncclSend(static_cast<const char*>(in) + p * block, m, type, p, comm, s),
                            "ncclSend", __FILE__, __LINE__, comm);
        if (posted.ok()) {
          posted = NcclStatus(ncclRecv(static_cast<char*>(out) + p * block, m, type, p, comm, s),
                              "ncclRecv", __FILE__, __LINE__, comm);
        }
      }
      // The group is closed whatever happened: an open one would swallow the
      // next collective.
      const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd", __FILE__, __LINE__, comm);
      if (!posted.ok()) return nccl_failed(posted);
      if (!ended.ok()) return nccl_failed(ended);
      break;
    }
    case CollectiveOp::kAllReduce:
    case CollectiveOp::kReduceScatter: {
      const bool rs = d.op == CollectiveOp::kReduceScatter;
      const int64_t out_count = rs ? d.count / size() : d.count;
      if (!widen) {
        if (rs) {
          ZS_NCCL_COLLECTIVE(
              ncclReduceScatter(in, out, out_count, type, NcclOp(d.reduce_op), comm, s));
        } else {
          ZS_NCCL_COLLECTIVE(
              ncclAllReduce(in, out, d.count, type, NcclOp(d.reduce_op), comm, s));
        }
        break;
      }
      // fp32 accumulation: widen, reduce in fp32, round once.
      float* tmp = nullptr;
      const int64_t tmp_count = d.count + (rs ? out_count : 0);
      ZS_CUDA_RETURN_IF_ERROR(
          cudaMallocAsync(reinterpret_cast<void**>(&tmp), tmp_count * sizeof(float), s));
      ZS_CUDA_RETURN_IF_ERROR(static_cast<cudaError_t>(cuda::LaunchWiden(ctype, in, tmp, d.count, s)));
      float* result = rs ? tmp + d.count : tmp;
      if (rs) {
        ZS_NCCL_COLLECTIVE(ncclReduceScatter(tmp, result, out_count, ncclFloat32,
                                                  NcclOp(d.reduce_op), comm, s));
      } else {
        ZS_NCCL_COLLECTIVE(
            ncclAllReduce(tmp, tmp, d.count, ncclFloat32, NcclOp(d.reduce_op), comm, s));
      }
      auto narrow = [ctype, tmp, result, out, out_count, s]() -> absl::Status {
        ZS_CUDA_RETURN_IF_ERROR(
            static_cast<cudaError_t>(cuda::LaunchNarrow(ctype, result, out, out_count, s)));
        ZS_CUDA_RETURN_IF_ERROR(cudaFreeAsync(tmp, s));
        return absl::OkStatus();
      };
      if (im.group_depth > 0) {
        im.after_group.push_back(narrow);
      } else {
        ZS_RETURN_IF_ERROR(narrow());
      }
      break;
    }
  }
  // Recorded now, before any wait on the host: the stream reaches it when the
  // collective ends. In a group, at GroupEnd, after the group's kernel.
  if (im.group_depth > 0) {
    im.group_spans.emplace_back(d, gpu_span);
    gpu_span = GpuMark{};
  } else {
    EndGpuSpan(d, gpu_span, s);
  }
  MarkEnqueued(d);
  ZS_ASSIGN_OR_RETURN(Event event, Event::Create(device()));
  auto done = std::make_shared<Event>(std::move(event));
  if (im.group_depth > 0) {
    im.group_events.push_back(done);
  } else {
    ZS_RETURN_IF_ERROR(done->Record(im.stream));
  }
  {
    std::lock_guard<std::mutex> lock(im.in_flight_mu);
    im.in_flight.emplace_back(d.seq, done);
  }
  auto work = std::make_shared<NcclWork>(im.shared, d, prefix, done);
  if (call.blocking) {
    ZS_RETURN_IF_ERROR(work->Wait());
    trace().SetState(d.seq, CollectiveState::kCompleted);
    std::lock_guard<std::mutex> lock(im.in_flight_mu);
    im.in_flight.pop_back();
  }
  return std::shared_ptr<Work>(work);
#undef ZS_NCCL_COLLECTIVE
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::DoSplit(
    const CollectiveDesc& desc) {
  MarkRunning(desc);
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device().index));
  ncclComm_t sub = nullptr;
  absl::Status s = NcclStatus(
      ncclCommSplit(impl_->shared->comm, desc.color < 0 ? NCCL_SPLIT_NOCOLOR : desc.color,
                    desc.key, &sub, nullptr),
      "ncclCommSplit", __FILE__, __LINE__, impl_->shared->comm);
  if (!s.ok()) return MarkDone(desc, s);
  (void)MarkDone(desc, absl::OkStatus());
  if (sub == nullptr) return std::unique_ptr<Communicator>();
  int sub_rank = 0, sub_size = 0;
  ZS_NCCL_RETURN_IF_ERROR(ncclCommUserRank(sub, &sub_rank));
  ZS_NCCL_RETURN_IF_ERROR(ncclCommCount(sub, &sub_size));
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> c,
                      Wrap(sub, sub_rank, sub_size, device(), nccl_options_));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace zeroshard
