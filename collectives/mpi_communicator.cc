// The MPI backend of Communicator (mpi_communicator.h). Kept in one file (issue 19):
// the Exchange (point-to-point transfers, handshakes, chunking) and the collective
// algorithms built on it share its private thresholds and are read together.
#include "zeroshard/collectives/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/collectives/cpu_reduce.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::string MpiOptions::ToString() const {
  return absl::StrCat(comm.ToString(), " chunk_bytes=", chunk_bytes);
}

namespace {

// Larger messages are sent as several pieces (MPI counts are ints).
constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;
constexpr int kHandshakeTag = 1;
// AllReduce up to this many bytes exchanges whole inputs (one round).
constexpr int64_t kDirectAllReduceBytes = int64_t{32} << 10;
// Broadcasts at least this large among 3+ ranks scatter, then all-gather.
constexpr int64_t kScatterBroadcastBytes = int64_t{256} << 10;
// AllGather and AllReduce up to this many bytes per rank (without check
// mode) send their handshake inside their one data message per peer.
// The whole message must stay within OpenMPI's shared-memory eager limit
// (4 KiB): past it the rendezvous protocol costs more than a separate
// handshake message.
constexpr int64_t kPiggybackBytes = 4096 - static_cast<int64_t>(sizeof(CollectiveDesc));

absl::Status MpiError(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(call, " failed: ", absl::string_view(text, len)));
}

#define ZS_MPI_RETURN_IF_ERROR(call) ZS_RETURN_IF_ERROR(MpiError((call), #call))

// [lo, hi) of rank r's block when `count` elements are split over n ranks in
// whole cache lines (the in-process backend splits AllReduce the same way).
std::pair<int64_t, int64_t> Block(int64_t count, int64_t esize, int r, int n) {
  const int64_t per_line = std::max<int64_t>(1, 64 / esize);
  const int64_t lines = (count + per_line - 1) / per_line;
  return {std::min(count, lines * r / n * per_line), std::min(count, lines * (r + 1) / n * per_line)};
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

// ================================================================ Exchange

// The requests of one collective: the handshake (every rank's CollectiveDesc
// to every peer) and the data messages, each in a numbered group that can be
// waited for. Polls with a deadline; compares handshakes as they arrive.
class MpiCommunicator::Exchange {
 public:
  // Requests are waited for by group: the handshake, two groups of sends,
  // and receive groups numbered from kFirstRecvGroup (e.g. one per chunk).
  static constexpr int kHandshakeGroup = 0;
  static constexpr int kSendGroup = 1;
  static constexpr int kLateSendGroup = 2;
  static constexpr int kFirstRecvGroup = 3;

  Exchange(MpiCommunicator& comm, const CollectiveDesc& desc, absl::Time deadline)
      : comm_(comm),
        mine_(std::make_shared<CollectiveDesc>(desc)),
        deadline_(deadline),
        theirs_(comm.size(), desc),
        arrived_(comm.size(), false) {
    arrived_[comm.rank()] = true;
    // Room for the usual requests up front: allocations show at small sizes.
    const size_t expected = 4 * static_cast<size_t>(comm.size()) + 8;
    reqs_.reserve(expected);
    meta_.reserve(expected);
    pending_by_group_.resize(kFirstRecvGroup + 2, 0);
  }

  ~Exchange() {
    if (clean_) return;
    // An error: cancel what we still expect, let sends finish on their own.
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;
      if (meta_[i].is_send) {
        MPI_Request_free(&reqs_[i]);
      } else {
        MPI_Cancel(&reqs_[i]);
        MPI_Wait(&reqs_[i], MPI_STATUS_IGNORE);
      }
    }
    // A send may still read the handshake buffers: they must outlive it.
    comm_.orphans_.push_back(std::move(mine_));
    comm_.orphans_.push_back(std::move(incoming_));
  }

  const CollectiveDesc& mine() const { return *mine_; }
  // True once data messages were posted: an error after that leaves messages
  // in flight, so the communicator must be aborted.
  bool data_posted() const { return data_posted_; }

  absl::Status StartHandshake() {
    const int n = comm_.size(), me = comm_.rank();
    incoming_ = std::shared_ptr<CollectiveDesc[]>(new CollectiveDesc[n]);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      MPI_Request req;
      ZS_MPI_RETURN_IF_ERROR(MPI_Irecv(&incoming_[p], sizeof(CollectiveDesc), MPI_BYTE, p,
                                       kHandshakeTag, comm_.comm_, &req));
      Add(req, Meta{.is_send = false, .handshake = true, .peer = p, .group = kHandshakeGroup});
    }
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      MPI_Request req;
      ZS_MPI_RETURN_IF_ERROR(MPI_Isend(mine_.get(), sizeof(CollectiveDesc), MPI_BYTE, p,
                                       kHandshakeTag, comm_.comm_, &req));
      Add(req, Meta{.is_send = true, .handshake = true, .peer = p, .group = kHandshakeGroup});
    }
    return absl::OkStatus();
  }

  absl::Status Recv(void* buf, int64_t bytes, int peer, int tag, int group) {
    data_posted_ = true;
    char* p = static_cast<char*>(buf);
    for (int64_t off = 0; off < bytes; off += kMaxMessageBytes) {
      const int len = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
      MPI_Request req;
      ZS_MPI_RETURN_IF_ERROR(MPI_Irecv(p + off, len, MPI_BYTE, peer, tag, comm_.comm_, &req));
      Add(req, Meta{.is_send = false, .handshake = false, .peer = peer, .group = group});
    }
    return absl::OkStatus();
  }

  // A message of `bytes` (< 2 GiB) whose first bytes are the sender's
  // CollectiveDesc: it stands in for that peer's handshake.
  absl::Status RecvWithHeader(void* buf, int64_t bytes, int peer, int tag, int group) {
    data_posted_ = true;
    MPI_Request req;
    ZS_MPI_RETURN_IF_ERROR(
        MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_.comm_, &req));
    Add(req, Meta{.is_send = false, .handshake = false, .peer = peer, .group = group,
                  .header = static_cast<const char*>(buf)});
    return absl::OkStatus();
  }

  absl::Status Send(const void* buf, int64_t bytes, int peer, int tag, int group = kSendGroup) {
    data_posted_ = true;
    const char* p = static_cast<const char*>(buf);
    for (int64_t off = 0; off < bytes; off += kMaxMessageBytes) {
      const int len = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
      MPI_Request req;
      ZS_MPI_RETURN_IF_ERROR(MPI_Isend(p + off, len, MPI_BYTE, peer, tag, comm_.comm_, &req));
      Add(req, Meta{.is_send = true, .handshake = false, .peer = peer, .group = group});
    }
    return absl::OkStatus();
  }

  absl::Status WaitHandshakes() { return WaitGroup(kHandshakeGroup); }
  absl::Status WaitGroup(int group) {
    return Poll([&] { return PendingIn(group) == 0; });
  }
  // Everything, then marks the exchange clean.
  absl::Status WaitAll() {
    ZS_RETURN_IF_ERROR(Poll([&] { return pending_ == 0; }));
    clean_ = true;
    return absl::OkStatus();
  }

 private:
  struct Meta {
    bool is_send;
    bool handshake;
    int peer;
    int group;
    // A data message that starts with the sender's CollectiveDesc (small
    // collectives carry the handshake in their data).
    const char* header = nullptr;
  };

  void Add(MPI_Request req, Meta meta) {
    reqs_.push_back(req);
    meta_.push_back(meta);
    ++pending_;
    ++pending_by_group_[GroupIndex(meta.group)];
  }
  int& PendingIn(int group) { return pending_by_group_[GroupIndex(group)]; }
  size_t GroupIndex(int group) {
    const size_t i = static_cast<size_t>(group);
    if (i >= pending_by_group_.size()) pending_by_group_.resize(i + 1, 0);
    return i;
  }

  // Polls until `done()`, an MPI error or the deadline. A mismatching
  // handshake ends the wait too, once every handshake is in (a handshake left
  // unreceived would be taken for the next collective's).
  template <typename Done>
  absl::Status Poll(Done done) {
    absl::InlinedVector<int, 64> indices;
    absl::Time last_progress = absl::Now();
    int idle = 0;
    while (true) {
      if (mismatch_) {
        if (PendingIn(kHandshakeGroup) == 0) return MismatchError();
      } else if (done()) {
        return absl::OkStatus();
      }
      indices.resize(reqs_.size());
      int completed = 0;
      ZS_MPI_RETURN_IF_ERROR(MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(),
                                          &completed, indices.data(), MPI_STATUSES_IGNORE));
      if (completed == MPI_UNDEFINED) completed = 0;
      for (int k = 0; k < completed; ++k) {
        const Meta& m = meta_[indices[k]];
        --pending_;
        --PendingIn(m.group);
        if (m.handshake && !m.is_send) OnHandshake(m.peer, incoming_[m.peer]);
        if (m.header != nullptr) {
          CollectiveDesc desc;
          std::memcpy(&desc, m.header, sizeof(desc));
          OnHandshake(m.peer, desc);
        }
      }
      if (completed > 0) {
        idle = 0;
        last_progress = absl::Now();
        continue;
      }
      // Back off: spin, then yield the core, then sleep (a rank that is far
      // behind should not cost its peers' compute a core).
      ++idle;
      if (idle < 128) {
        CpuRelax();
        continue;
      }
      const absl::Time now = absl::Now();
      if (now >= deadline_) return mismatch_ ? MismatchError() : Timeout();
      if (now - last_progress < absl::Milliseconds(5)) {
        sched_yield();
      } else {
        absl::SleepFor(absl::Microseconds(50));
      }
    }
  }

  void OnHandshake(int peer, const CollectiveDesc& desc) {
    theirs_[peer] = desc;
    arrived_[peer] = true;
    if (theirs_[peer].SameCollective(*mine_)) return;
    mismatch_ = true;
    if (theirs_[peer].seq != mine_->seq) seq_mismatch_ = true;
  }

  absl::Status MismatchError() const {
    // Ranks not heard from count as agreeing with me, so the majority vote
    // names whoever is known to differ.
    absl::Status s = CheckSameCollective(theirs_);
    if (s.ok()) s = absl::InternalError("handshake mismatch not found again");
    return absl::Status(s.code(), absl::StrCat(ErrorPrefix(*mine_, comm_.rank(), comm_.size()),
                                               s.message()));
  }

  absl::Status Timeout() {
    std::vector<std::string> missing;
    for (int p = 0; p < comm_.size(); ++p) {
      if (!arrived_[p]) missing.push_back(absl::StrCat("rank ", p, " (has not arrived)"));
    }
    if (missing.empty()) {  // every rank arrived, but data is stuck
      for (size_t i = 0; i < reqs_.size(); ++i) {
        if (reqs_[i] != MPI_REQUEST_NULL && !meta_[i].is_send) {
          missing.push_back(absl::StrCat("rank ", meta_[i].peer, " (data not received)"));
          break;
        }
      }
    }
    if (missing.empty()) {
      // Everything due to this rank came in, but a peer has not taken what was
      // sent to it (a rank stopped after its own sends: large messages need the
      // receiver). Name each such peer once.
      std::vector<int> named;
      for (size_t i = 0; i < reqs_.size(); ++i) {
        const int peer = meta_[i].peer;
        if (reqs_[i] == MPI_REQUEST_NULL || !meta_[i].is_send ||
            std::find(named.begin(), named.end(), peer) != named.end()) {
          continue;
        }
        named.push_back(peer);
        missing.push_back(absl::StrCat("rank ", peer, " (has not taken the data sent to it)"));
      }
    }
    if (missing.empty()) missing.push_back("a peer (no request of this rank is pending; the collective's next step never came)");
    return absl::DeadlineExceededError(absl::StrCat(
        ErrorPrefix(*mine_, comm_.rank(), comm_.size()), "timed out after ",
        absl::FormatDuration(comm_.options().timeout), " waiting for ",
        absl::StrJoin(missing, ", "), "; the communicator is aborted"));
  }

 public:
  bool seq_mismatch() const { return seq_mismatch_; }

 private:
  MpiCommunicator& comm_;
  std::shared_ptr<CollectiveDesc> mine_;
  std::shared_ptr<CollectiveDesc[]> incoming_;
  const absl::Time deadline_;
  std::vector<CollectiveDesc> theirs_;  // per rank; mine until their handshake arrives
  std::vector<bool> arrived_;
  std::vector<MPI_Request> reqs_;
  std::vector<Meta> meta_;
  std::vector<int> pending_by_group_;
  int pending_ = 0;
  bool data_posted_ = false;
  bool mismatch_ = false;
  bool seq_mismatch_ = false;
  bool clean_ = false;
};

// ================================================================ MpiCommunicator

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(
    MPI_Comm comm, const MpiOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    return absl::FailedPreconditionError(
        "MpiCommunicator::Create: MPI is not initialised (call MPI_Init_thread with "
        "MPI_THREAD_MULTIPLE first)");
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MpiCommunicator::Create: MPI provides thread level ", provided,
        ", the MPI backend needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
        "): its communication thread calls MPI while the caller may too"));
  }
  if (options.chunk_bytes < 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("MpiOptions::chunk_bytes must be at least 64, got ", options.chunk_bytes));
  }
  MPI_Comm dup;
  ZS_MPI_RETURN_IF_ERROR(MPI_Comm_dup(comm, &dup));
  int rank = 0, size = 0;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  return std::make_unique<MpiCommunicator>(dup, rank, size, options);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int rank, int size, const MpiOptions& options)
    : Communicator(rank, size, Device::Cpu(), options.comm),
      comm_(comm),
      mpi_options_(options),
      comm_thread_(absl::StrCat("mpi rank ", rank)) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  void* value = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &value, &flag);
  const int64_t tag_ub = flag ? *static_cast<int*>(value) : 32767;
  data_tag_modulus_ = static_cast<int>(std::min<int64_t>((tag_ub - 2) / 2, int64_t{1} << 20));
}

MpiCommunicator::~MpiCommunicator() {
  StopWatchdog();
  comm_thread_.Drain();  // queued collectives still use comm_
  if (health().ok()) MPI_Comm_free(&comm_);
}

char* MpiCommunicator::Scratch(int slot, int peer, int64_t bytes) {
  if (bytes > scratch_slot_bytes_) {
    scratch_slot_bytes_ = (bytes + 63) / 64 * 64;
    scratch_.reset(new char[2 * size() * scratch_slot_bytes_]);
  }
  return scratch_.get() + (static_cast<int64_t>(slot) * size() + peer) * scratch_slot_bytes_;
}

absl::StatusOr<std::shared_ptr<Work>> MpiCommunicator::Launch(CollectiveCall call) {
  return comm_thread_.Enqueue([this, call = std::move(call)] { return Execute(call); });
}

absl::Status MpiCommunicator::RunBlocking(CollectiveCall call) {
  return comm_thread_.Run([this, &call] { return Execute(call); });
}

absl::Status MpiCommunicator::Execute(const CollectiveCall& call) {
  MarkRunning(call.desc);
  if (absl::Status h = health(); !h.ok()) {
    return MarkDone(call.desc, absl::AbortedError(absl::StrCat(
                                   ErrorPrefix(call.desc, rank(), size()), h.message())));
  }
  return MarkDone(call.desc, RunCollective(call));
}

absl::Status MpiCommunicator::RunCollective(const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const absl::Duration timeout = options().timeout;
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  Exchange ex(*this, d, deadline);
  const int64_t payload = d.count * static_cast<int64_t>(DTypeSize(d.dtype));
  if (!options().check_mode && !d.invalid_args && size() > 1 && payload <= kPiggybackBytes &&
      (d.op == CollectiveOp::kAllGather || d.op == CollectiveOp::kAllReduce)) {
    absl::Status s = SmallData(ex, call);
    if (s.ok()) s = ex.WaitAll();
    if (s.ok()) s = FinishSmall(call);
    if (!s.ok()) {
      orphans_.push_back(std::move(stage_));  // a send may still read it
      Abort(s);
    }
    return s;
  }
  absl::Status s = ex.StartHandshake();
  // Check mode, invalid arguments (no data of ours will move) and barriers
  // complete the handshake before any data.
  if (s.ok() && (options().check_mode || d.invalid_args || d.op == CollectiveOp::kBarrier)) {
    s = ex.WaitHandshakes();
  }
  if (s.ok() && !d.invalid_args) {
    switch (d.op) {
      case CollectiveOp::kAllGather: s = AllGatherData(ex, call); break;
      case CollectiveOp::kReduceScatter: s = ReduceScatterData(ex, call); break;
      case CollectiveOp::kAllReduce: s = AllReduceData(ex, call); break;
      case CollectiveOp::kBroadcast: s = BroadcastData(ex, call); break;
      case CollectiveOp::kAllToAll: s = AllToAllData(ex, call); break;
      case CollectiveOp::kBarrier:
      case CollectiveOp::kSplit: break;
    }
  }
  if (s.ok()) s = ex.WaitAll();
  if (s.ok() && d.invalid_args) {
    s = absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(d, rank(), size()),
                                                "this rank failed the argument check"));
  }
  // A timeout, a failure with data in flight or ranks out of step leave
  // messages that could match later collectives: stop using the communicator.
  if (!s.ok() && (s.code() == absl::StatusCode::kDeadlineExceeded || ex.data_posted() ||
                  ex.seq_mismatch() || s.code() == absl::StatusCode::kInternal)) {
    Abort(s);
  }
  return s;
}

// ---------------------------------------------------------------- data movement

absl::Status MpiCommunicator::AllGatherData(Exchange& ex, const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int n = size(), me = rank();
  const int64_t bytes = d.count * static_cast<int64_t>(DTypeSize(d.dtype));
  if (bytes == 0) return absl::OkStatus();
  const int tag = 2 + static_cast<int>(d.seq % data_tag_modulus_) * 2;
  char* out = static_cast<char*>(call.output.raw_data());
  const void* in = call.input.raw_data();
  for (int k = 1; k < n; ++k) {
    const int p = (me + k) % n;
    ZS_RETURN_IF_ERROR(ex.Recv(out + p * bytes, bytes, p, tag, Exchange::kFirstRecvGroup));
  }
  for (int k = 1; k < n; ++k) {
    ZS_RETURN_IF_ERROR(ex.Send(in, bytes, (me + n - k) % n, tag));
  }
  if (!d.in_place) std::memcpy(out + me * bytes, in, bytes);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllToAllData(Exchange& ex, const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int n = size(), me = rank();
  const int64_t block = d.count / n * static_cast<int64_t>(DTypeSize(d.dtype));
  if (block == 0) return absl::OkStatus();
  const int tag = 2 + static_cast<int>(d.seq % data_tag_modulus_) * 2;
  char* out = static_cast<char*>(call.output.raw_data());
  const char* in = static_cast<const char*>(call.input.raw_data());
  // Peer p's block of my output comes from its input's block `me`; my input's
  // block p goes to p. Input and output never overlap (the base class checks),
  // so receives land in place while the sends read.
  for (int k = 1; k < n; ++k) {
    const int p = (me + k) % n;
    ZS_RETURN_IF_ERROR(ex.Recv(out + p * block, block, p, tag, Exchange::kFirstRecvGroup));
  }
  for (int k = 1; k < n; ++k) {
    const int p = (me + n - k) % n;
    ZS_RETURN_IF_ERROR(ex.Send(in + p * block, block, p, tag));
  }
  std::memcpy(out + me * block, in + me * block, block);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ReduceScatterData(Exchange& ex, const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int n = size(), me = rank();
  const int64_t esize = static_cast<int64_t>(DTypeSize(d.dtype));
  const int64_t m = d.count / n;
  if (m == 0) return absl::OkStatus();
  const int tag = 2 + static_cast<int>(d.seq % data_tag_modulus_) * 2;
  const char* in = static_cast<const char*>(call.input.raw_data());
  char* out = static_cast<char*>(call.output.raw_data());
  const int64_t chunk = std::max<int64_t>(1, mpi_options_.chunk_bytes / esize);
  const int64_t chunks = (m + chunk - 1) / chunk;
  auto len_of = [&](int64_t c) { return std::min(chunk, m - c * chunk); };
  Scratch(0, 0, chunk * esize);  // size it once
  auto post_recvs = [&](int64_t c) -> absl::Status {
    for (int k = 1; k < n; ++k) {
      const int p = (me + k) % n;
      ZS_RETURN_IF_ERROR(
          ex.Recv(Scratch(c % 2, p, chunk * esize), len_of(c) * esize, p, tag,
                  Exchange::kFirstRecvGroup + static_cast<int>(c)));
    }
    return absl::OkStatus();
  };
  ZS_RETURN_IF_ERROR(post_recvs(0));
  if (chunks > 1) ZS_RETURN_IF_ERROR(post_recvs(1));
  // Every send at once: peer p gets its block p, chunk by chunk.
  for (int64_t c = 0; c < chunks; ++c) {
    for (int k = 1; k < n; ++k) {
      const int p = (me + n - k) % n;
      ZS_RETURN_IF_ERROR(ex.Send(in + (p * m + c * chunk) * esize, len_of(c) * esize, p, tag));
    }
  }
  absl::InlinedVector<const void*, 16> ins(n);
  for (int64_t c = 0; c < chunks; ++c) {
    ZS_RETURN_IF_ERROR(ex.WaitGroup(Exchange::kFirstRecvGroup + static_cast<int>(c)));
    for (int s = 0; s < n; ++s) {
      ins[s] = s == me ? in + (me * m + c * chunk) * esize : Scratch(c % 2, s, chunk * esize);
    }
    void* outs[] = {out + c * chunk * esize};
    ReduceBuffers(d.dtype, d.reduce_op, ins, outs, len_of(c));
    if (c + 2 < chunks) ZS_RETURN_IF_ERROR(post_recvs(c + 2));
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllReduceData(Exchange& ex, const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int n = size(), me = rank();
  const int64_t esize = static_cast<int64_t>(DTypeSize(d.dtype));
  if (d.count == 0) return absl::OkStatus();
  const char* in = static_cast<const char*>(call.input.raw_data());
  char* out = static_cast<char*>(call.output.raw_data());
  if (n == 1) {
    if (in != out) std::memcpy(out, in, d.count * esize);
    return absl::OkStatus();
  }
  const int rs_tag = 2 + static_cast<int>(d.seq % data_tag_modulus_) * 2;
  const int ag_tag = rs_tag + 1;
  if (d.count * esize <= kDirectAllReduceBytes) {
    // Latency-bound: one exchange of whole inputs, then every rank reduces
    // all of them in rank order (the same bits everywhere) - one message
    // round instead of two.
    const int64_t bytes = d.count * esize;
    for (int k = 1; k < n; ++k) {
      const int p = (me + k) % n;
      ZS_RETURN_IF_ERROR(ex.Recv(Scratch(0, p, bytes), bytes, p, rs_tag, Exchange::kFirstRecvGroup));
    }
    for (int k = 1; k < n; ++k) ZS_RETURN_IF_ERROR(ex.Send(in, bytes, (me + n - k) % n, rs_tag));
    ZS_RETURN_IF_ERROR(ex.WaitGroup(Exchange::kFirstRecvGroup));
    // In place, the output is the input our sends read.
    if (in == out) ZS_RETURN_IF_ERROR(ex.WaitGroup(Exchange::kSendGroup));
    absl::InlinedVector<const void*, 16> all(n);
    for (int s = 0; s < n; ++s) all[s] = s == me ? static_cast<const void*>(in) : Scratch(0, s, bytes);
    void* outs[] = {out};
    ReduceBuffers(d.dtype, d.reduce_op, all, outs, d.count);
    return absl::OkStatus();
  }
  const int64_t chunk = std::max<int64_t>(1, mpi_options_.chunk_bytes / esize);
  // Chunks of rank p's block: [lo + c * chunk, min(hi, lo + (c + 1) * chunk)).
  auto chunks_of = [&](int p) {
    const auto [lo, hi] = Block(d.count, esize, p, n);
    return (hi - lo + chunk - 1) / chunk;
  };
  auto piece = [&](int p, int64_t c) {
    const auto [lo, hi] = Block(d.count, esize, p, n);
    const int64_t begin = lo + c * chunk;
    return std::pair<int64_t, int64_t>{begin, std::min(hi, begin + chunk)};
  };
  const int64_t my_chunks = chunks_of(me);
  Scratch(0, 0, chunk * esize);
  auto post_recvs = [&](int64_t c) -> absl::Status {
    const auto [b, e] = piece(me, c);
    for (int k = 1; k < n; ++k) {
      const int p = (me + k) % n;
      ZS_RETURN_IF_ERROR(ex.Recv(Scratch(c % 2, p, chunk * esize), (e - b) * esize, p, rs_tag,
                                 Exchange::kFirstRecvGroup + static_cast<int>(c)));
    }
    return absl::OkStatus();
  };
  // Reduce-scatter half: each peer's block, chunk by chunk, to that peer.
  if (my_chunks > 0) ZS_RETURN_IF_ERROR(post_recvs(0));
  if (my_chunks > 1) ZS_RETURN_IF_ERROR(post_recvs(1));
  for (int k = 1; k < n; ++k) {
    const int p = (me + n - k) % n;
    for (int64_t c = 0; c < chunks_of(p); ++c) {
      const auto [b, e] = piece(p, c);
      ZS_RETURN_IF_ERROR(ex.Send(in + b * esize, (e - b) * esize, p, rs_tag));
    }
  }
  absl::InlinedVector<const void*, 16> ins(n);
  for (int64_t c = 0; c < my_chunks; ++c) {
    ZS_RETURN_IF_ERROR(ex.WaitGroup(Exchange::kFirstRecvGroup + static_cast<int>(c)));
    const auto [b, e] = piece(me, c);
    for (int s = 0; s < n; ++s) ins[s] = s == me ? in + b * esize : Scratch(c % 2, s, chunk * esize);
    void* outs[] = {out + b * esize};
    ReduceBuffers(d.dtype, d.reduce_op, ins, outs, e - b);
    if (c + 2 < my_chunks) ZS_RETURN_IF_ERROR(post_recvs(c + 2));
    // All-gather half: the reduced chunk goes to every peer at once.
    for (int k = 1; k < n; ++k) {
      ZS_RETURN_IF_ERROR(ex.Send(out + b * esize, (e - b) * esize, (me + k) % n, ag_tag,
                                 Exchange::kLateSendGroup));
    }
  }
  // Receive the peers' reduced blocks into place - only once the
  // reduce-scatter sends are done, because in place those bytes are what
  // they read. (Not the all-gather sends: a peer receives those only after
  // its own reduce-scatter sends are done, so waiting for them would deadlock.)
  ZS_RETURN_IF_ERROR(ex.WaitGroup(Exchange::kSendGroup));
  const int ag_group = Exchange::kFirstRecvGroup + static_cast<int>(my_chunks);
  for (int k = 1; k < n; ++k) {
    const int p = (me + n - k) % n;
    for (int64_t c = 0; c < chunks_of(p); ++c) {
      const auto [b, e] = piece(p, c);
      ZS_RETURN_IF_ERROR(ex.Recv(out + b * esize, (e - b) * esize, p, ag_tag, ag_group));
    }
  }
  return absl::OkStatus();
}

// Small AllGather / AllReduce: one message per peer, [my CollectiveDesc |
// my input], which is also the handshake. Receives land in per-peer slots
// of the scratch; FinishSmall moves them into place once all have arrived.
absl::Status MpiCommunicator::SmallData(Exchange& ex, const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int n = size(), me = rank();
  const int64_t payload = d.count * static_cast<int64_t>(DTypeSize(d.dtype));
  const int64_t message = static_cast<int64_t>(sizeof(CollectiveDesc)) + payload;
  const int tag = 2 + static_cast<int>(d.seq % data_tag_modulus_) * 2;
  if (stage_ == nullptr || static_cast<int64_t>(stage_->size()) < message) {
    stage_ = std::make_shared<std::vector<char>>(message);
  }
  std::memcpy(stage_->data(), &d, sizeof(d));
  if (payload > 0) std::memcpy(stage_->data() + sizeof(d), call.input.raw_data(), payload);
  Scratch(0, 0, message);  // size it once
  for (int k = 1; k < n; ++k) {
    const int p = (me + k) % n;
    ZS_RETURN_IF_ERROR(
        ex.RecvWithHeader(Scratch(0, p, message), message, p, tag, Exchange::kFirstRecvGroup));
  }
  for (int k = 1; k < n; ++k) {
    ZS_RETURN_IF_ERROR(ex.Send(stage_->data(), message, (me + n - k) % n, tag));
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::FinishSmall(const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int n = size(), me = rank();
  const int64_t payload = d.count * static_cast<int64_t>(DTypeSize(d.dtype));
  const int64_t message = static_cast<int64_t>(sizeof(CollectiveDesc)) + payload;
  if (payload == 0) return absl::OkStatus();
  auto data_of = [&](int p) { return Scratch(0, p, message) + sizeof(CollectiveDesc); };
  char* out = static_cast<char*>(call.output.raw_data());
  if (d.op == CollectiveOp::kAllGather) {
    for (int p = 0; p < n; ++p) {
      if (p != me) std::memcpy(out + p * payload, data_of(p), payload);
    }
    if (!d.in_place) std::memcpy(out + me * payload, call.input.raw_data(), payload);
    return absl::OkStatus();
  }
  absl::InlinedVector<const void*, 16> all(n);
  for (int p = 0; p < n; ++p) all[p] = p == me ? call.input.raw_data() : data_of(p);
  void* outs[] = {out};
  ReduceBuffers(d.dtype, d.reduce_op, all, outs, d.count);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::BroadcastData(Exchange& ex, const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const int64_t bytes = d.count * static_cast<int64_t>(DTypeSize(d.dtype));
  if (bytes == 0 || size() == 1) return absl::OkStatus();
  const int tag = 2 + static_cast<int>(d.seq % data_tag_modulus_) * 2;
  char* data = static_cast<char*>(call.input.raw_data());
  const int n = size(), me = rank();
  if (n < 3 || bytes < kScatterBroadcastBytes) {
    // The root sends the whole tensor to every peer.
    if (me != d.root) return ex.Recv(data, bytes, d.root, tag, Exchange::kFirstRecvGroup);
    for (int k = 1; k < n; ++k) ZS_RETURN_IF_ERROR(ex.Send(data, bytes, (d.root + k) % n, tag));
    return absl::OkStatus();
  }
  // Large, 3+ ranks: scatter, then all-gather among the non-roots, so the
  // root sends 2(n-1)/n of the tensor instead of n-1 copies of it.
  const int64_t esize = static_cast<int64_t>(DTypeSize(d.dtype));
  auto piece = [&](int p) {
    const auto [lo, hi] = Block(d.count, esize, p, n);
    return std::pair<char*, int64_t>{data + lo * esize, (hi - lo) * esize};
  };
  if (me == d.root) {
    for (int k = 1; k < n; ++k) {
      const int p = (d.root + k) % n;
      ZS_RETURN_IF_ERROR(ex.Send(piece(p).first, piece(p).second, p, tag));      // its piece
      ZS_RETURN_IF_ERROR(ex.Send(piece(me).first, piece(me).second, p, tag + 1));  // mine
    }
    return absl::OkStatus();
  }
  for (int p = 0; p < n; ++p) {  // every piece but mine arrives in the second phase
    if (p == me) continue;
    ZS_RETURN_IF_ERROR(
        ex.Recv(piece(p).first, piece(p).second, p, tag + 1, Exchange::kFirstRecvGroup + 1));
  }
  ZS_RETURN_IF_ERROR(ex.Recv(piece(me).first, piece(me).second, d.root, tag,
                             Exchange::kFirstRecvGroup));
  ZS_RETURN_IF_ERROR(ex.WaitGroup(Exchange::kFirstRecvGroup));
  for (int p = 0; p < n; ++p) {
    if (p != me && p != d.root) {
      ZS_RETURN_IF_ERROR(ex.Send(piece(me).first, piece(me).second, p, tag + 1));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- Split

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::DoSplit(
    const CollectiveDesc& desc) {
  absl::StatusOr<std::unique_ptr<Communicator>> result;
  absl::Status run = comm_thread_.Run([&]() -> absl::Status {
    MarkRunning(desc);
    if (absl::Status h = health(); !h.ok()) {
      result = MarkDone(desc, absl::AbortedError(
                                  absl::StrCat(ErrorPrefix(desc, rank(), size()), h.message())));
      return result.status();
    }
    // The handshake first: it has a deadline and names a missing rank, which
    // MPI_Comm_split cannot.
    absl::Status s = RunCollective(CollectiveCall{.desc = desc});
    if (!s.ok()) {
      result = MarkDone(desc, s);
      return s;
    }
    MPI_Comm sub;
    s = MpiError(MPI_Comm_split(comm_, desc.color < 0 ? MPI_UNDEFINED : desc.color, desc.key,
                                &sub),
                 "MPI_Comm_split");
    if (!s.ok()) {
      result = MarkDone(desc, s);
      return s;
    }
    (void)MarkDone(desc, absl::OkStatus());
    if (sub == MPI_COMM_NULL) {
      result = std::unique_ptr<Communicator>();
      return absl::OkStatus();
    }
    int sub_rank = 0, sub_size = 0;
    MPI_Comm_rank(sub, &sub_rank);
    MPI_Comm_size(sub, &sub_size);
    result = std::unique_ptr<Communicator>(
        std::make_unique<MpiCommunicator>(sub, sub_rank, sub_size, mpi_options_));
    return absl::OkStatus();
  });
  (void)run;
  return result;
}

}  // namespace zeroshard
