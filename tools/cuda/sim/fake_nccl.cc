// The NCCL calls of collectives/nccl_communicator.cc answered on the CPU, for
// the simulated device (--define=cuda_sim=1; see fake_cudart.cc): linked
// instead of libnccl there, so the NCCL collectives suite, the sharded GPT on
// "GPUs" and `mpirun -np 2 train_gpt --backend=nccl` run where there is none.
//
// Ranks may be threads of one process or separate processes on one host (as
// NCCL's ranks are, one per GPU): a communicator is a shared-memory segment
// (POSIX shm) that every rank maps. The unique id names it
// ("/zs-nccl-<pid>-<random>"); rank 0's ncclCommInitRank creates it (mode
// 0600, O_EXCL: an id used twice is an error, not a reunion), the others open
// it and wait for every rank to arrive, then rank 0 unlinks the name (the
// mappings stay; nothing is left in /dev/shm once the group has formed).
// ncclCommInitAll makes one in this process for its ranks at once.
//
// Collectives: device memory is each process's own host memory, so data moves
// through the segment: each rank has a staging slot. A collective runs in
// rounds of at most a slot: every rank copies its part of the input into its
// slot, all meet (a barrier), each computes its own result from the slots into
// its output, all meet again. So in-place calls are safe, and the numerics
// are those of one process: reductions add in rank order in fp32 (f32, bf16,
// f16) or in the integer type; MAX is fmaxf-like (NaN loses), as NCCL's. The
// first round also compares every rank's call (op, count, type, reduce op,
// root): ranks that disagree all get ncclInvalidArgument instead of reading
// each other's buffers wrongly. Collectives inside ncclGroupStart/End run at
// once (every rank issues the same sequence, which is what NCCL requires).
//
// Point-to-point (ncclSend / ncclRecv, what an all-to-all is made of): inside
// ncclGroupStart/End they are kept (per thread, as NCCL keeps its group) and
// run at the outermost ncclGroupEnd; outside a group each is a group of its
// own. Each ordered pair (sender, receiver) has a channel in the segment that
// holds one chunk; a group's end makes progress on all its calls at once
// (a send puts its next chunk when the channel is empty, a receive takes one
// when it is full), sends and receives to one peer matched in the order
// posted, as NCCL matches them. So every rank may send before it receives
// (the deadlock NCCL's groups exist to avoid cannot happen), a rank may send
// to itself, and a send buffer is free again when ncclGroupEnd returns. A
// receive whose count differs from its send's takes the whole message and
// fails with ncclInvalidArgument.
//
// Failures never hang (issue 20): every wait has a deadline
// (ZEROSHARD_SIM_NCCL_TIMEOUT_S, default 600 s, past which the waiting rank
// gets ncclSystemError naming the ranks it waited for); while it waits, a
// rank checks that the processes of the ranks it waits for are alive. A rank
// whose process is gone, or that destroyed its communicator while the others
// wait for it, and ncclCommAbort on any rank, abort the whole group: every
// waiting or later call on it returns ncclRemoteError (ncclSystemError on the
// rank that aborted). ncclGetLastError(comm) says what happened, naming the
// rank (its rank in the communicator, its rank in the group it was split
// from first, and its pid). The liveness check is by pid, so the ranks must
// share a pid namespace (one host, one container), as they share /dev/shm.
#include <fcntl.h>
#include <linux/futex.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "zeroshard/runtime/half.h"

namespace {

using ::zeroshard::BFloat16;
using ::zeroshard::Float16;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x7a736e63636c3230ull;  // "zsnccl20"
constexpr char kIdPrefix[] = "cuda_sim-shm:";

// ------------------------------------------------------------ the segment

// The group's state every rank sees. Fixed-size fields first; the per-rank
// records, the staging slots and the point-to-point channels follow at the
// offsets Layout computes.
struct Header {
  std::atomic<uint64_t> magic;  // kMagic once the creator has filled the header
  int32_t nranks;
  int32_t pad0;
  uint64_t slot_bytes;  // one rank's staging slot
  uint64_t chan_bytes;  // one channel's chunk
  uint64_t total_bytes;
  // 0 while healthy; else (kind << 32) | (rank + 1): who ended the group.
  std::atomic<uint64_t> abort_word;
  // Bumped by every barrier arrival and every abort: what barrier waiters
  // sleep on (a futex word).
  std::atomic<uint32_t> wake_seq;
};

enum AbortKind : uint64_t {
  kAbortCalled = 1,  // ncclCommAbort on that rank
  kAbortDied = 2,    // its process is gone
  kAbortLeft = 3,    // it destroyed its communicator while others waited for it
  kAbortTimeout = 4, // a wait past the deadline on that rank
};

// What one rank brought to the collective in progress (compared by all).
struct CallDesc {
  int32_t kind, type, op, root;
  uint64_t count;
  bool operator==(const CallDesc& o) const {
    return kind == o.kind && type == o.type && op == o.op && root == o.root && count == o.count;
  }
};

struct RankRecord {
  std::atomic<uint64_t> epoch;     // barriers this rank has entered
  std::atomic<uint32_t> doorbell;  // bumped when a channel to or from it changes (futex word)
  std::atomic<int32_t> left;       // ncclCommDestroy'ed
  int32_t pid;
  int32_t root_rank;  // its rank in the group it was first split from (InitRank's rank)
  CallDesc call;
  int32_t color, key;  // ncclCommSplit
};

struct Channel {
  std::atomic<uint32_t> full;  // 1 while it holds a chunk
  uint32_t pad;
  uint64_t msg_bytes;    // the whole message's size
  uint64_t chunk_bytes;  // this chunk's
  // data follows (chan_bytes)
};

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct Layout {
  size_t records, slots, channels, channel_stride, total;
  Layout(int n, size_t slot_bytes, size_t chan_bytes) {
    records = AlignUp(sizeof(Header), 64);
    slots = AlignUp(records + n * AlignUp(sizeof(RankRecord), 64), 4096);
    channels = slots + n * slot_bytes;
    channel_stride = AlignUp(sizeof(Channel), 64) + chan_bytes;
    total = AlignUp(channels + static_cast<size_t>(n) * n * channel_stride, 4096);
  }
};

// Slots of 32 MiB in all, 64 KiB - 4 MiB each; channels of 16 MiB in all, 16 KiB
// - 1 MiB each (tmpfs pages are only taken when touched; a container's
// default 64 MiB /dev/shm holds 8 ranks).
size_t SlotBytesFor(int n) { return AlignUp(std::clamp<size_t>((32u << 20) / n, 64u << 10, 4u << 20), 4096); }
size_t ChanBytesFor(int n) {
  return AlignUp(std::clamp<size_t>((16u << 20) / (static_cast<size_t>(n) * n), 16u << 10, 1u << 20), 4096);
}

// One mapping of a segment in this process.
struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (base != nullptr) munmap(base, bytes);
  }
  Header& header() const { return *static_cast<Header*>(base); }
};

// Read at each wait (a test process sets it before it forks its ranks).
int TimeoutSeconds() {
  const char* env = std::getenv("ZEROSHARD_SIM_NCCL_TIMEOUT_S");
  const int v = env == nullptr ? 600 : std::atoi(env);
  return v > 0 ? v : 600;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000), static_cast<long>(slice.count() % 1000) * 1000000};
  Futex(word, FUTEX_WAIT, seen, &ts);  // shared (not _PRIVATE): other processes wake it
}
void FutexWakeAll(std::atomic<uint32_t>* word) { Futex(word, FUTEX_WAKE, INT32_MAX, nullptr); }

// Whether process `pid` still runs (a zombie does not).
bool ProcessAlive(int pid) {
  if (pid <= 0) return true;  // not yet known
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return true;
  const char state = text[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

struct ncclComm {
  std::shared_ptr<Mapping> map;
  std::string name;  // the segment's name (splits derive theirs from it)
  int rank = 0;
  int nranks = 0;
  int splits = 0;  // ncclCommSplit calls so far (the same count on every rank)
  size_t records_at = 0, slots_at = 0, channels_at = 0, channel_stride = 0;  // Layout's
  std::atomic<int> users{0};  // calls in progress (ncclCommAbort waits for them)
  std::mutex error_mu;
  std::string last_error;

  Header& h() const { return map->header(); }
  char* base() const { return static_cast<char*>(map->base); }
  RankRecord& rec(int r) const {
    return *reinterpret_cast<RankRecord*>(base() + records_at + static_cast<size_t>(r) * AlignUp(sizeof(RankRecord), 64));
  }
  char* slot(int r) const { return base() + slots_at + static_cast<size_t>(r) * h().slot_bytes; }
  Channel& chan(int from, int to) const {
    return *reinterpret_cast<Channel*>(base() + channels_at + (static_cast<size_t>(from) * nranks + to) * channel_stride);
  }
  char* chan_data(int from, int to) const {
    return reinterpret_cast<char*>(&chan(from, to)) + AlignUp(sizeof(Channel), 64);
  }
  void SetError(std::string e) {
    std::lock_guard<std::mutex> lock(error_mu);
    last_error = std::move(e);
  }
};

namespace {

// Keeps a communicator from being freed by ncclCommAbort while a call uses it.
class InUse {
 public:
  explicit InUse(ncclComm_t c) : c_(c) {
    if (c_ != nullptr) c_->users.fetch_add(1);
  }
  ~InUse() {
    if (c_ != nullptr) c_->users.fetch_sub(1);
  }

 private:
  ncclComm_t c_;
};

std::mutex global_error_mu;
std::string global_error;  // ncclGetLastError(nullptr)

ncclResult_t Fail(ncclComm_t comm, ncclResult_t r, const std::string& what) {
  const std::string text = "cuda_sim NCCL: " + what;
  if (comm != nullptr) comm->SetError(text);
  std::lock_guard<std::mutex> lock(global_error_mu);
  global_error = text;
  return r;
}

std::string Who(ncclComm_t comm, int r) {
  const RankRecord& rec = comm->rec(r);
  std::string s = "rank " + std::to_string(r) + " of " + std::to_string(comm->nranks);
  if (rec.pid > 0 && rec.root_rank != r) s += " (rank " + std::to_string(rec.root_rank) + " of the group it was split from)";
  if (rec.pid > 0) s += ", pid " + std::to_string(rec.pid);
  return s;
}

// Ends the group for every rank (the first reason wins) and wakes them.
void AbortGroup(ncclComm_t comm, AbortKind kind, int rank) {
  uint64_t expected = 0;
  comm->h().abort_word.compare_exchange_strong(expected, (static_cast<uint64_t>(kind) << 32) | (rank + 1));
  comm->h().wake_seq.fetch_add(1);
  FutexWakeAll(&comm->h().wake_seq);
  for (int r = 0; r < comm->nranks; ++r) {
    comm->rec(r).doorbell.fetch_add(1);
    FutexWakeAll(&comm->rec(r).doorbell);
  }
}

// The error a call on an aborted group returns, with its text.
ncclResult_t AbortedResult(ncclComm_t comm, const char* call) {
  const uint64_t w = comm->h().abort_word.load();
  const int who = static_cast<int>(w & 0xffffffffu) - 1;
  const auto kind = static_cast<AbortKind>(w >> 32);
  std::string why;
  switch (kind) {
    case kAbortCalled:
      why = Who(comm, who) + " called ncclCommAbort";
      break;
    case kAbortDied:
      why = Who(comm, who) + " is gone: its process exited or was killed";
      break;
    case kAbortLeft:
      why = Who(comm, who) + " destroyed its communicator while the others waited for it";
      break;
    case kAbortTimeout:
      why = Who(comm, who) + " waited past the deadline (ZEROSHARD_SIM_NCCL_TIMEOUT_S = " +
            std::to_string(TimeoutSeconds()) + " s)";
      break;
  }
  const bool mine = who == comm->rank && kind != kAbortDied;
  return Fail(comm, mine ? ncclSystemError : ncclRemoteError,
              std::string(call) + " on rank " + std::to_string(comm->rank) + ": the communicator is aborted: " + why);
}

// Fails (and aborts the group) when a rank of `peers` is gone or has left.
ncclResult_t CheckPeers(ncclComm_t comm, const char* call, const std::vector<int>& peers) {
  for (int r : peers) {
    if (comm->rec(r).left.load() != 0) {
      AbortGroup(comm, kAbortLeft, r);
      return AbortedResult(comm, call);
    }
    if (!ProcessAlive(comm->rec(r).pid)) {
      AbortGroup(comm, kAbortDied, r);
      return AbortedResult(comm, call);
    }
  }
  return ncclSuccess;
}

ncclResult_t PastDeadline(ncclComm_t comm, const char* call, const std::vector<int>& peers) {
  std::string names;
  for (int r : peers) names += (names.empty() ? "" : ", ") + Who(comm, r);
  AbortGroup(comm, kAbortTimeout, comm->rank);
  return Fail(comm, ncclSystemError,
              std::string(call) + " on rank " + std::to_string(comm->rank) + ": waited " +
                  std::to_string(TimeoutSeconds()) + " s (ZEROSHARD_SIM_NCCL_TIMEOUT_S) for " +
                  (names.empty() ? std::string("the other ranks") : names) + "; the communicator is aborted");
}

constexpr auto kLivenessEvery = std::chrono::milliseconds(50);

// Waits until `done()`, sleeping on `word` between checks. Fails (and aborts
// the group) when a rank of `waiting_for()` is gone or left, at the deadline,
// or when the group is aborted.
template <typename Done, typename WaitingFor>
ncclResult_t WaitFor(ncclComm_t comm, const char* call, std::atomic<uint32_t>* word, const Done& done,
                     const WaitingFor& waiting_for) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(TimeoutSeconds());
  auto next_check = start + kLivenessEvery;
  int spins = 0;
  while (true) {
    const uint32_t seen = word->load(std::memory_order_acquire);
    if (done()) return ncclSuccess;
    if (comm->h().abort_word.load() != 0) return AbortedResult(comm, call);
    if (++spins < 64) {  // a peer on another core is often just behind
      std::this_thread::yield();
      continue;
    }
    FutexWait(word, seen, kLivenessEvery);
    const auto now = Clock::now();
    if (now < next_check) continue;
    next_check = now + kLivenessEvery;
    if (done()) return ncclSuccess;
    const std::vector<int> missing = waiting_for();
    if (ncclResult_t r = CheckPeers(comm, call, missing); r != ncclSuccess) return r;
    if (now >= deadline) return PastDeadline(comm, call, missing);
  }
}

// Every rank meets here: returns once all ranks have entered the barrier.
ncclResult_t Barrier(ncclComm_t comm, const char* call) {
  RankRecord& me = comm->rec(comm->rank);
  const uint64_t e = me.epoch.load(std::memory_order_relaxed) + 1;
  me.epoch.store(e, std::memory_order_release);
  comm->h().wake_seq.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&comm->h().wake_seq);
  auto missing = [&] {
    std::vector<int> m;
    for (int r = 0; r < comm->nranks; ++r) {
      if (comm->rec(r).epoch.load(std::memory_order_acquire) < e) m.push_back(r);
    }
    return m;
  };
  return WaitFor(comm, call, &comm->h().wake_seq, [&] { return missing().empty(); }, missing);
}

// ------------------------------------------------------------ creation

std::string RandomName() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                     static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/zs-nccl-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(r));
  return buf;
}

// Maps `bytes` of the segment open at `fd`.
std::shared_ptr<Mapping> MapFd(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  auto m = std::make_shared<Mapping>();
  m->base = p;
  m->bytes = bytes;
  return m;
}

void FillHeader(Mapping& m, int n, const Layout& l) {
  Header& h = m.header();
  h.nranks = n;
  h.slot_bytes = SlotBytesFor(n);
  h.chan_bytes = ChanBytesFor(n);
  h.total_bytes = l.total;
  h.magic.store(kMagic, std::memory_order_release);
}

// Creates segment `name` for `n` ranks (O_EXCL). Null (and the error set) on failure.
std::shared_ptr<Mapping> CreateSegment(const std::string& name, int n, std::string* error) {
  const Layout l(n, SlotBytesFor(n), ChanBytesFor(n));
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    *error = "creating shared memory " + name + ": " + std::strerror(errno) +
             (errno == EEXIST ? " (the unique id was used before: make a new one per communicator)" : "");
    return nullptr;
  }
  std::shared_ptr<Mapping> m;
  if (ftruncate(fd, static_cast<off_t>(l.total)) == 0) m = MapFd(fd, l.total);
  if (m == nullptr) {
    *error = "sizing shared memory " + name + " to " + std::to_string(l.total) + " bytes: " + std::strerror(errno) +
             " (is /dev/shm full?)";
    shm_unlink(name.c_str());
  } else {
    FillHeader(*m, n, l);
  }
  close(fd);
  return m;
}

// Opens segment `name` made by another rank for `n` ranks, waiting for it.
std::shared_ptr<Mapping> OpenSegment(const std::string& name, int n, int rank, std::string* error) {
  const auto deadline = Clock::now() + std::chrono::seconds(TimeoutSeconds());
  auto sleep = std::chrono::microseconds(100);
  while (true) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st;
      std::shared_ptr<Mapping> m;
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Header)) {
        m = MapFd(fd, static_cast<size_t>(st.st_size));
      }
      close(fd);
      if (m != nullptr && m->header().magic.load(std::memory_order_acquire) == kMagic) {
        if (m->header().nranks != n) {
          *error = "rank " + std::to_string(rank) + " joined with nranks " + std::to_string(n) +
                   " a communicator rank 0 created for " + std::to_string(m->header().nranks);
          return nullptr;
        }
        return m;
      }
    } else if (errno != ENOENT) {
      *error = "opening shared memory " + name + ": " + std::strerror(errno);
      return nullptr;
    }
    if (Clock::now() >= deadline) {
      *error = "rank " + std::to_string(rank) + " waited " + std::to_string(TimeoutSeconds()) +
               " s (ZEROSHARD_SIM_NCCL_TIMEOUT_S) for rank 0 to create the communicator " + name;
      return nullptr;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
}

ncclComm_t NewComm(std::shared_ptr<Mapping> m, std::string name, int rank, int root_rank) {
  auto* c = new ncclComm();
  c->map = std::move(m);
  c->name = std::move(name);
  c->rank = rank;
  c->nranks = c->h().nranks;
  const Layout l(c->nranks, c->h().slot_bytes, c->h().chan_bytes);
  c->records_at = l.records;
  c->slots_at = l.slots;
  c->channels_at = l.channels;
  c->channel_stride = l.channel_stride;
  RankRecord& me = c->rec(rank);
  me.pid = static_cast<int32_t>(getpid());
  me.root_rank = root_rank;
  return c;
}

// Rank `rank` of `n` joins segment `name` (rank 0 creates it): every rank
// has arrived when it returns; rank 0 then unlinks the name.
ncclResult_t Join(const std::string& name, int n, int rank, int root_rank, ncclComm_t* out) {
  std::string error;
  std::shared_ptr<Mapping> m = rank == 0 ? CreateSegment(name, n, &error) : OpenSegment(name, n, rank, &error);
  if (m == nullptr) return Fail(nullptr, ncclSystemError, error);
  ncclComm_t c = NewComm(std::move(m), name, rank, root_rank);
  const ncclResult_t r = Barrier(c, "ncclCommInitRank");
  if (rank == 0) shm_unlink(name.c_str());
  if (r != ncclSuccess) {
    {
      std::lock_guard<std::mutex> lock(c->error_mu);
      error = c->last_error;
    }
    delete c;
    return Fail(nullptr, r, error);
  }
  *out = c;
  return ncclSuccess;
}

// ------------------------------------------------------------ reductions

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

template <typename T>
T Combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclMax:
      return b > a ? b : a;  // a NaN (in floats) loses, as fmaxf
    case ncclMin:
      return b < a ? b : a;
    case ncclProd:
      return a * b;
    default:
      return a + b;  // ncclSum, ncclAvg (divided at the end)
  }
}

float ToF(const void* p, ncclDataType_t t, size_t i) {
  switch (t) {
    case ncclFloat16:
      return static_cast<float>(static_cast<const Float16*>(p)[i]);
    case ncclBfloat16:
      return static_cast<float>(static_cast<const BFloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

void FromF(void* p, ncclDataType_t t, size_t i, float v) {
  switch (t) {
    case ncclFloat16:
      static_cast<Float16*>(p)[i] = Float16(v);
      break;
    case ncclBfloat16:
      static_cast<BFloat16*>(p)[i] = BFloat16(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

template <typename T>
void ReduceInts(const std::vector<const char*>& in, size_t offset, size_t count, ncclRedOp_t op, void* out) {
  T* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T*>(in[0])[offset + i];
    for (size_t r = 1; r < in.size(); ++r) acc = Combine(acc, reinterpret_cast<const T*>(in[r])[offset + i], op);
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(in.size()));
    o[i] = acc;
  }
}

// out[0, count) = reduce over ranks, in rank order, of in[r][offset, offset + count).
void Reduce(const std::vector<const char*>& in, size_t offset, size_t count, ncclDataType_t t, ncclRedOp_t op,
            void* out) {
  switch (t) {
    case ncclInt32:
      return ReduceInts<int32_t>(in, offset, count, op, out);
    case ncclUint32:
      return ReduceInts<uint32_t>(in, offset, count, op, out);
    case ncclInt64:
      return ReduceInts<int64_t>(in, offset, count, op, out);
    case ncclUint64:
      return ReduceInts<uint64_t>(in, offset, count, op, out);
    case ncclInt8:
      return ReduceInts<int8_t>(in, offset, count, op, out);
    case ncclUint8:
      return ReduceInts<uint8_t>(in, offset, count, op, out);
    case ncclFloat64:
      return ReduceInts<double>(in, offset, count, op, out);
    default:  // ncclFloat32, ncclFloat16, ncclBfloat16: fp32 accumulation
      for (size_t i = 0; i < count; ++i) {
        float acc = ToF(in[0], t, offset + i);
        for (size_t r = 1; r < in.size(); ++r) acc = Combine(acc, ToF(in[r], t, offset + i), op);
        if (op == ncclAvg) acc /= static_cast<float>(in.size());
        FromF(out, t, i, acc);
      }
  }
}

// ------------------------------------------------------------ collectives

enum Kind : int32_t { kAllGather = 1, kReduceScatter, kAllReduce, kBroadcast };

const char* KindName(int32_t k) {
  switch (k) {
    case kAllGather: return "ncclAllGather";
    case kReduceScatter: return "ncclReduceScatter";
    case kAllReduce: return "ncclAllReduce";
    case kBroadcast: return "ncclBroadcast";
  }
  return "a collective";
}

std::string DescText(const CallDesc& d) {
  return std::string(KindName(d.kind)) + "(count " + std::to_string(d.count) + ", type " + std::to_string(d.type) +
         ", op " + std::to_string(d.op) + ", root " + std::to_string(d.root) + ")";
}

// Runs one collective in rounds through the staging slots (see the top).
ncclResult_t RunCollective(ncclComm_t comm, Kind kind, const void* send, void* recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op, int root) {
  const char* call = KindName(kind);
  const size_t es = TypeSize(type);
  const int n = comm->nranks, me = comm->rank;
  if (comm->h().abort_word.load() != 0) return AbortedResult(comm, call);
  // The input read in rounds: AllGather, AllReduce, Broadcast: `count`;
  // ReduceScatter: every rank's `count` block.
  const size_t in_elems = kind == kReduceScatter ? count * n : count;
  const size_t per_round = comm->h().slot_bytes / es;
  const size_t rounds = std::max<size_t>(1, (in_elems + per_round - 1) / per_round);
  comm->rec(me).call = CallDesc{kind, static_cast<int32_t>(type), static_cast<int32_t>(op), root, count};
  std::vector<const char*> slots(n);
  for (int r = 0; r < n; ++r) slots[r] = comm->slot(r);
  for (size_t round = 0; round < rounds; ++round) {
    const size_t o = round * per_round;
    const size_t k = std::min(per_round, in_elems - std::min(in_elems, o));
    const bool sends = kind != kBroadcast || me == root;
    if (sends && k > 0) std::memcpy(comm->slot(me), static_cast<const char*>(send) + o * es, k * es);
    if (ncclResult_t r = Barrier(comm, call); r != ncclSuccess) return r;
    if (round == 0) {
      for (int r = 1; r < n; ++r) {
        if (!(comm->rec(r).call == comm->rec(0).call)) {
          const std::string what = "rank " + std::to_string(r) + " called " + DescText(comm->rec(r).call) +
                                   " where rank 0 called " + DescText(comm->rec(0).call);
          (void)Barrier(comm, call);  // nobody reads the records after this
          return Fail(comm, ncclInvalidArgument, what);
        }
      }
    }
    switch (kind) {
      case kAllGather:
        for (int r = 0; r < n; ++r) std::memcpy(static_cast<char*>(recv) + (r * count + o) * es, slots[r], k * es);
        break;
      case kAllReduce:
        Reduce(slots, 0, k, type, op, static_cast<char*>(recv) + o * es);
        break;
      case kReduceScatter: {
        const size_t lo = std::max(o, me * count), hi = std::min(o + k, (me + 1) * count);
        if (lo < hi) Reduce(slots, lo - o, hi - lo, type, op, static_cast<char*>(recv) + (lo - me * count) * es);
        break;
      }
      case kBroadcast:
        if (k > 0 && !(me == root && recv == send)) std::memcpy(static_cast<char*>(recv) + o * es, slots[root], k * es);
        break;
    }
    if (ncclResult_t r = Barrier(comm, call); r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

// ------------------------------------------------------------ point-to-point

// One ncclSend or ncclRecv kept for its group's end.
struct P2p {
  bool send = false;
  ncclComm_t comm = nullptr;
  void* buf = nullptr;  // const for a send
  size_t bytes = 0;
  int peer = 0;
  // Progress.
  size_t done = 0;
  bool started = false, finished = false, mismatch = false;
};

// This thread's ncclGroupStart depth and the point-to-point calls of its group.
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_p2p;

ncclResult_t P2pCall(P2p op) {
  if (op.comm == nullptr) return ncclInvalidArgument;
  if (op.peer < 0 || op.peer >= op.comm->nranks) {
    return Fail(op.comm, ncclInvalidArgument,
                "peer " + std::to_string(op.peer) + " of a communicator of " + std::to_string(op.comm->nranks));
  }
  if (op.bytes > 0 && op.buf == nullptr) return ncclInvalidArgument;
  group_p2p.push_back(op);
  return ncclSuccess;
}

void Ring(ncclComm_t comm, int rank) {
  comm->rec(rank).doorbell.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&comm->rec(rank).doorbell);
}

// One step of `op` if its channel lets it; true when it moved.
bool Progress(P2p& op) {
  ncclComm_t c = op.comm;
  const int me = c->rank;
  if (op.send) {
    Channel& ch = c->chan(me, op.peer);
    if (ch.full.load(std::memory_order_acquire) != 0) return false;
    const size_t k = std::min<size_t>(c->h().chan_bytes, op.bytes - op.done);
    if (k > 0) std::memcpy(c->chan_data(me, op.peer), static_cast<const char*>(op.buf) + op.done, k);
    ch.msg_bytes = op.bytes;
    ch.chunk_bytes = k;
    ch.full.store(1, std::memory_order_release);
    op.done += k;
    op.finished = op.done >= op.bytes;  // a message of 0 bytes is one empty chunk
    Ring(c, op.peer);
    return true;
  }
  Channel& ch = c->chan(op.peer, me);
  if (ch.full.load(std::memory_order_acquire) == 0) return false;
  const size_t msg = ch.msg_bytes, k = ch.chunk_bytes;
  if (!op.started && msg != op.bytes) op.mismatch = true;
  op.started = true;
  const size_t fits = op.done < op.bytes ? std::min(k, op.bytes - op.done) : 0;
  if (fits > 0) std::memcpy(static_cast<char*>(op.buf) + op.done, c->chan_data(op.peer, me), fits);
  op.done += k;  // counted in the sender's bytes
  op.finished = op.done >= msg;
  ch.full.store(0, std::memory_order_release);
  Ring(c, op.peer);
  return true;
}

// Runs the point-to-point calls of a group to completion (see the top).
ncclResult_t RunP2p(std::vector<P2p> ops) {
  if (ops.empty()) return ncclSuccess;
  std::vector<std::unique_ptr<InUse>> users;
  for (const P2p& op : ops) users.push_back(std::make_unique<InUse>(op.comm));
  const auto deadline = Clock::now() + std::chrono::seconds(TimeoutSeconds());
  auto next_check = Clock::now() + kLivenessEvery;
  int idle = 0;
  while (true) {
    bool moved = false, all_done = true;
    // Only the first unfinished send (receive) to each (comm, peer) may
    // move: messages to one peer go in the order posted.
    std::vector<std::pair<const ncclComm*, int>> busy_send, busy_recv;
    // The doorbell to sleep on: this rank's in the first waiting call's
    // communicator (a short sleep when the group spans several).
    std::atomic<uint32_t>* bell = nullptr;
    uint32_t seen = 0;
    bool several = false;
    for (P2p& op : ops) {
      if (op.finished) continue;
      all_done = false;
      if (bell == nullptr) {
        bell = &op.comm->rec(op.comm->rank).doorbell;
        seen = bell->load(std::memory_order_acquire);
      }
      several = several || bell != &op.comm->rec(op.comm->rank).doorbell;
      auto& busy = op.send ? busy_send : busy_recv;
      const std::pair<const ncclComm*, int> key{op.comm, op.peer};
      if (std::find(busy.begin(), busy.end(), key) != busy.end()) continue;
      busy.push_back(key);
      if (op.comm->h().abort_word.load() != 0) return AbortedResult(op.comm, op.send ? "ncclSend" : "ncclRecv");
      while (!op.finished && Progress(op)) moved = true;
    }
    if (all_done) break;
    if (moved) {
      idle = 0;
      continue;
    }
    if (++idle < 64) {
      std::this_thread::yield();
      continue;
    }
    FutexWait(bell, seen, several ? std::chrono::milliseconds(1) : kLivenessEvery);
    const auto now = Clock::now();
    if (now < next_check) continue;
    next_check = now + kLivenessEvery;
    for (const P2p& op : ops) {
      if (op.finished) continue;
      const char* call = op.send ? "ncclSend" : "ncclRecv";
      if (ncclResult_t r = CheckPeers(op.comm, call, {op.peer}); r != ncclSuccess) return r;
      if (now >= deadline) return PastDeadline(op.comm, call, {op.peer});
    }
  }
  for (const P2p& op : ops) {
    if (op.mismatch && !op.send) {
      return Fail(op.comm, ncclInvalidArgument,
                  "ncclRecv of " + std::to_string(op.bytes) + " bytes from rank " + std::to_string(op.peer) +
                      " matched a send of " + std::to_string(op.done) + " bytes");
    }
  }
  return ncclSuccess;
}

ncclResult_t Collective(ncclComm_t comm, Kind kind, const void* send, void* recv, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, int root) {
  if (comm == nullptr || TypeSize(type) == 0) return ncclInvalidArgument;
  if (count > 0 && (recv == nullptr || (send == nullptr && (kind != kBroadcast || comm->rank == root)))) {
    return ncclInvalidArgument;
  }
  if (kind == kBroadcast && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  InUse in_use(comm);
  return RunCollective(comm, kind, send, recv, count, type, op, root);
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (cuda_sim)";
    case ncclInvalidUsage:
      return "invalid usage (cuda_sim)";
    case ncclSystemError:
      return "unhandled system error: the communicator is aborted or a wait timed out (cuda_sim)";
    case ncclRemoteError:
      return "remote process exited or there was a network error: a peer is gone or aborted (cuda_sim)";
    default:
      return "NCCL error (cuda_sim)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  // The text lives as long as the communicator (or the process) and until the
  // next error, as NCCL's does.
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->error_mu);
    return comm->last_error.c_str();
  }
  std::lock_guard<std::mutex> lock(global_error_mu);
  return global_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof(*id));
  const std::string text = kIdPrefix + RandomName();
  static_assert(sizeof(id->internal) >= 64);
  std::memcpy(id->internal, text.data(), std::min(text.size(), sizeof(id->internal) - 1));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const std::string text(id.internal, strnlen(id.internal, sizeof(id.internal)));
  if (text.rfind(kIdPrefix, 0) != 0) {
    return Fail(nullptr, ncclInvalidArgument, "the unique id is not one ncclGetUniqueId made (\"" + text + "\")");
  }
  return Join(text.substr(sizeof(kIdPrefix) - 1), nranks, rank, rank, comm);
}

// One thread creates every rank's communicator at once (no rank meets
// another, so nothing waits). The simulated devices are one host memory, so
// devlist only has to be well formed (ndev distinct non-negative ids; NULL
// means 0 .. ndev - 1): the ranks are its positions. The collectives on these
// communicators still block until every rank has called them, so with ndev > 1
// each rank needs a thread of its own: one thread issuing a group of calls
// for all of them (as real NCCL allows) would wait for itself forever.
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return ncclInvalidArgument;
  if (devlist != nullptr) {
    std::vector<int> devs(devlist, devlist + ndev);
    std::sort(devs.begin(), devs.end());
    if (devs.front() < 0 || std::adjacent_find(devs.begin(), devs.end()) != devs.end()) {
      return ncclInvalidArgument;
    }
  }
  const std::string name = RandomName();
  std::string error;
  std::shared_ptr<Mapping> m = CreateSegment(name, ndev, &error);
  if (m == nullptr) return Fail(nullptr, ncclSystemError, error);
  shm_unlink(name.c_str());  // every rank maps it already
  for (int r = 0; r < ndev; ++r) comms[r] = NewComm(m, name, r, r);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->rec(comm->rank).left.store(1, std::memory_order_release);
  comm->h().wake_seq.fetch_add(1);
  FutexWakeAll(&comm->h().wake_seq);
  delete comm;
  return ncclSuccess;
}

// Ends the group for every rank: their waiting and later calls fail. A call
// of this communicator in progress on another thread (the watchdog aborts
// while the issuing thread waits in a collective) returns first.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  AbortGroup(comm, kAbortCalled, comm->rank);
  while (comm->users.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  // Calls run to completion before they return; what is left to report is a
  // group ended by another rank.
  *error = comm->h().abort_word.load() != 0 ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

// Every rank posts (color, key); the members of each color, ordered by
// (key, parent rank), form a new group whose first member creates its
// segment ("<parent>.<split>.<color>"), which the others open.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (comm == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  InUse in_use(comm);
  RankRecord& me = comm->rec(comm->rank);
  me.color = color;
  me.key = key;
  const int split = ++comm->splits;
  if (ncclResult_t r = Barrier(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int r = 0; r < comm->nranks; ++r) {
    if (comm->rec(r).color == color) members.push_back({comm->rec(r).key, r});
  }
  const int my_root = me.root_rank;
  // Nobody reads the colors after this.
  if (ncclResult_t r = Barrier(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  std::sort(members.begin(), members.end());
  int sub_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == comm->rank) sub_rank = static_cast<int>(i);
  }
  const std::string name = comm->name + "." + std::to_string(split) + "." + std::to_string(color);
  const ncclResult_t r = Join(name, static_cast<int>(members.size()), sub_rank, my_root, newcomm);
  if (r != ncclSuccess) return Fail(comm, r, std::string("ncclCommSplit: ") + ncclGetLastError(nullptr));
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(group_p2p);
  return RunP2p(std::move(ops));
}

// Kept for the group's end; outside a group, a group of one.
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (TypeSize(type) == 0) return ncclInvalidArgument;
  ncclGroupStart();
  const ncclResult_t posted = P2pCall(
      P2p{.send = true, .comm = comm, .buf = const_cast<void*>(send), .bytes = count * TypeSize(type), .peer = peer});
  const ncclResult_t ended = ncclGroupEnd();
  return posted != ncclSuccess ? posted : ended;
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (TypeSize(type) == 0) return ncclInvalidArgument;
  ncclGroupStart();
  const ncclResult_t posted =
      P2pCall(P2p{.send = false, .comm = comm, .buf = recv, .bytes = count * TypeSize(type), .peer = peer});
  const ncclResult_t ended = ncclGroupEnd();
  return posted != ncclSuccess ? posted : ended;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  return Collective(comm, kAllGather, send, recv, count, type, ncclSum, 0);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t) {
  return Collective(comm, kReduceScatter, send, recv, count, type, op, 0);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  return Collective(comm, kAllReduce, send, recv, count, type, op, 0);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t) {
  return Collective(comm, kBroadcast, send, recv, count, type, ncclSum, root);
}

}  // extern "C"
