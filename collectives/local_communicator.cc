#include "zeroshard/collectives/local_communicator.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/collectives/cpu_reduce.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::string LocalOptions::ToString() const {
  return absl::StrCat(comm.ToString(), " threads_per_rank=", threads_per_rank);
}

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

int ThreadsPerRank(const LocalOptions& options, int world_size) {
  if (options.threads_per_rank > 0) return options.threads_per_rank;
  return std::max(1, HardwareThreads() / std::max(1, world_size));
}

// Whether a collective moves bytes after the ranks meet (Note [Transfer tasks]).
bool HasTransfer(CollectiveOp op) {
  return op != CollectiveOp::kBarrier && op != CollectiveOp::kSplit;
}

}  // namespace

// ================================================================ LocalGroup

// Note [Transfer tasks]
// ~~~~~~~~~~~~~~~~~~~~~
// Once every rank has arrived at collective `seq`, its bytes move as `size`
// tasks, task t being destination rank t's share (the list in the header).
// Before, rank t's communication thread always moved share t itself and the
// ranks met a second time at the end, so a collective took as long as the
// slowest thread to be scheduled, twice: with more rank threads than cores
// (4 ranks on 2 cores, as this project's CI machines run the main job), a
// thread woken by the last arrival waits for a core behind the compute
// threads, and each such wait, up to milliseconds, showed as exposed
// communication of every rank. Now any rank's thread may run any task: each
// claims its own first (one compare-and-swap of the task's `claimed` seq)
// and then the others, runs what it claims and publishes it (`finished` =
// seq); a rank is done with `seq` once every task is finished, whichever
// threads ran them. The first thread to run after the last arrival usually
// moves every share; the others, when they get a core, find nothing to claim
// and return.
// - The bits do not depend on which thread runs a task: a task reads and
//   writes the same bytes in the same order as before (reductions still in
//   rank order).
// - Safety: a task reads the posts of `seq` and the peers' buffers. A rank
//   leaves `seq` only when every task has finished (release / acquire on
//   `finished`), so no buffer is reused while a task reads or writes it; task
//   slots and posts are double-buffered by seq's parity, and nobody can post or
//   claim for seq + 2 before every rank has passed seq + 1's arrival, so by
//   then every task of `seq` has finished and been observed.
// - A barrier moves nothing and ends at the arrival. Refused descriptors
//   (CheckSameCollective) run no task: every rank sees the same posts and
//   returns the same error.

// The state the ranks of one group share. Each rank publishes its progress as
// one monotonic counter, seq * 4 + phase; a rendezvous for (seq, phase) waits
// until every counter has reached that value. Posts (the buffer pointers of
// a collective) are double-buffered by the parity of seq: a rank can only
// post for seq + 2 after every rank has passed seq + 1's arrival, by which
// time nobody reads seq's posts any more. The transfer itself is one task per
// destination rank, which any rank's communication thread may run (Note
// [Transfer tasks]); its task slots are double-buffered the same way.
class LocalGroup {
 public:
  enum Phase : int64_t { kArrived = 1, kSplitMade = 2, kDone = 3 };

  struct Post {
    CollectiveDesc desc;
    const void* input = nullptr;
    void* output = nullptr;
  };

  LocalGroup(int size, LocalOptions options)
      : size_(size),
        options_(std::move(options)),
        progress_(size),
        exited_(size),
        spin_iterations_(size <= HardwareThreads() ? 200 : 0) {
    for (auto& p : posts_) p.resize(size);
    for (auto& s : splits_) s.resize(size);
    for (auto& t : tasks_) t = std::vector<TaskSlot>(size);
  }

  int size() const { return size_; }
  const LocalOptions& options() const { return options_; }
  Post& post(int64_t seq, int rank) { return posts_[seq & 1][rank]; }
  std::shared_ptr<LocalGroup>& split_slot(int64_t seq, int rank) { return splits_[seq & 1][rank]; }

  // Publishes that `rank` reached (seq, phase) and waits until every rank
  // has. Fails with DeadlineExceeded after the timeout (naming the ranks that
  // have not arrived, and aborting the group) or when another rank aborted it.
  absl::Status Rendezvous(int rank, const CollectiveDesc& desc, Phase phase);

  // Note [Transfer tasks]. Collective `seq`'s transfer is `size()` tasks, task
  // t being the share destination rank t used to move itself. TryClaim(seq, t)
  // is true for exactly one caller; Finish(seq, t) publishes that the task's
  // bytes are all written; WaitTransfer(rank, desc) returns once every task of
  // desc.seq is finished (or fails as Rendezvous does), and records the rank
  // as done with that collective.
  bool TryClaim(int64_t seq, int task) {
    std::atomic<int64_t>& c = tasks_[seq & 1][task].claimed;
    int64_t seen = c.load(std::memory_order_relaxed);
    return seen < seq && c.compare_exchange_strong(seen, seq, std::memory_order_acq_rel);
  }
  void Finish(int64_t seq, int task) {
    tasks_[seq & 1][task].finished.store(seq, std::memory_order_seq_cst);
    // Only the last task can end a WaitTransfer; whoever sees every task
    // finished wakes the sleepers. The loads are seq_cst, as the store: of two
    // tasks finishing together, at least one sees the other's store, so the
    // last finisher always does.
    bool all = true;
    for (const TaskSlot& t : tasks_[seq & 1]) all = all && t.finished.load(std::memory_order_seq_cst) >= seq;
    if (all && sleepers_.load(std::memory_order_seq_cst) > 0) {
      absl::MutexLock lock(&mu_);
      cv_.SignalAll();
    }
  }
  absl::Status WaitTransfer(int rank, const CollectiveDesc& desc);
  // How long ago the last rank arrived at collective `seq` (zero when that
  // is not published yet): when a rank's thread wakes after the arrival, the
  // wait from then on is its own thread's, not its peers' (Note [Communication
  // spans]).
  absl::Duration SinceLastArrival(int64_t seq) const {
    const ArrivalStamp& a = arrivals_[seq & 1];
    if (a.seq.load(std::memory_order_acquire) != seq) return absl::ZeroDuration();
    const int64_t ns = SteadyNanos() - a.steady_ns.load(std::memory_order_relaxed);
    return absl::Nanoseconds(std::max<int64_t>(0, ns));
  }
  // Records that `rank` is done with desc.seq, which had nothing to move (a
  // barrier) or was refused (descriptors that differ).
  void Depart(int rank, const CollectiveDesc& desc) {
    progress_[rank].value.store(Target(desc.seq, kDone), std::memory_order_seq_cst);
  }

  // A rank's function has returned. With an error, the group is aborted at once
  // (issue 26): its peers, waiting in a collective or at their next one, fail
  // within microseconds naming the rank and its error, instead of waiting out
  // the timeout for a rank that will never arrive. (A rank that returns OK while
  // its peers still call collectives is a program error the timeout names.)
  // Groups split from this one (HYBRID_SHARD's) are aborted with it.
  void MarkExited(int rank, const absl::Status& status) {
    std::vector<std::weak_ptr<LocalGroup>> children;
    absl::Status reason;
    {
      absl::MutexLock lock(&mu_);
      exited_[rank] = std::string(status.ok() ? "OK" : status.ToString());
      exited_any_.store(true);
      if (!status.ok() && !aborted_.load(std::memory_order_acquire)) {
        abort_reason_ = absl::AbortedError(absl::StrCat("rank ", rank, " returned ", status.ToString()));
        aborted_.store(true, std::memory_order_release);
        reason = abort_reason_;
        children = children_;
      }
      cv_.SignalAll();
    }
    // The groups split from this one (HYBRID_SHARD's shard and replica
    // groups) go too: the rank is a member of some, and the others' ranks
    // fail at their next collective of this group anyway.
    for (const std::weak_ptr<LocalGroup>& c : children) {
      if (std::shared_ptr<LocalGroup> child = c.lock()) child->Abort(reason);
    }
  }

  // A group split from this one: aborted with it.
  void AddChild(std::weak_ptr<LocalGroup> child) {
    absl::MutexLock lock(&mu_);
    children_.push_back(std::move(child));
  }

  // The watchdog gave up on the group, or a rank failed in the group it was
  // split from: ranks waiting in a collective, and every later one, fail with
  // Aborted naming `why`; so do the groups split from this one.
  void Abort(const absl::Status& why) {
    std::vector<std::weak_ptr<LocalGroup>> children;
    {
      absl::MutexLock lock(&mu_);
      if (!aborted_.load(std::memory_order_acquire)) {
        abort_reason_ = absl::AbortedError(why.message());
        aborted_.store(true, std::memory_order_release);
        children = children_;
      }
      cv_.SignalAll();
    }
    for (const std::weak_ptr<LocalGroup>& c : children) {
      if (std::shared_ptr<LocalGroup> child = c.lock()) child->Abort(why);
    }
  }

  // Where every rank is, for the flight record: "rank 0 arrived at #5, rank 1
  // finished #4 (its thread returned OK), ...".
  std::string DescribeProgress() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> parts;
    for (int r = 0; r < size_; ++r) {
      const int64_t p = progress_[r].value.load(std::memory_order_acquire);
      std::string where;
      if (p == 0) {
        where = "has entered no collective";
      } else if (p % 4 == kDone) {
        where = absl::StrCat("finished #", p / 4);
      } else if (p % 4 == kArrived) {
        where = absl::StrCat("arrived at #", p / 4);
      } else {
        where = absl::StrCat("made its split in #", p / 4);
      }
      if (!exited_[r].empty()) absl::StrAppend(&where, " (its thread returned ", exited_[r], ")");
      parts.push_back(absl::StrCat("rank ", r, " ", where));
    }
    return absl::StrJoin(parts, ", ");
  }

  // OK, or the reason the group was aborted.
  absl::Status health() const {
    if (!aborted_.load(std::memory_order_acquire)) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    return abort_reason_;
  }

 private:
  struct alignas(64) Counter {
    std::atomic<int64_t> value{0};
  };
  // When the last rank arrived at a collective: written by every rank that
  // sees all arrived right after its own arrival (the last one always does),
  // time first, then seq.
  struct alignas(64) ArrivalStamp {
    std::atomic<int64_t> seq{-1};
    std::atomic<int64_t> steady_ns{0};
  };
  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // The last seq that claimed, and that finished, one transfer task.
  struct alignas(64) TaskSlot {
    std::atomic<int64_t> claimed{-1};
    std::atomic<int64_t> finished{-1};
  };

  static int64_t Target(int64_t seq, Phase phase) { return seq * 4 + phase; }
  bool AllFinished(int64_t seq) const {
    for (const TaskSlot& t : tasks_[seq & 1]) {
      if (t.finished.load(std::memory_order_acquire) < seq) return false;
    }
    return true;
  }
  // Spins, yields, then sleeps until done() holds, the deadline passes or the
  // group is aborted. True when done() holds.
  template <typename Done>
  bool WaitUntil(const Done& done, bool* timed_out);
  bool AllReached(int64_t target) const {
    for (const Counter& c : progress_) {
      if (c.value.load(std::memory_order_acquire) < target) return false;
    }
    return true;
  }
  // "rank 1 (last finished #4; its thread returned OK), rank 3 (in #5, waiting at its end)".
  std::string DescribeMissing(int64_t target) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> Missing(int64_t target) const {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (progress_[r].value.load(std::memory_order_acquire) < target) missing.push_back(r);
    }
    return missing;
  }

  const int size_;
  const LocalOptions options_;
  std::vector<Counter> progress_;
  std::vector<std::string> exited_ ABSL_GUARDED_BY(mu_);  // "" while the rank's function runs
  // Spin before sleeping only when every rank can have a core.
  const int spin_iterations_;
  std::vector<Post> posts_[2];
  std::vector<std::shared_ptr<LocalGroup>> splits_[2];
  std::vector<TaskSlot> tasks_[2];
  ArrivalStamp arrivals_[2];

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> exited_any_{false};
  absl::Status abort_reason_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<LocalGroup>> children_ ABSL_GUARDED_BY(mu_);  // split from this one
};

std::string LocalGroup::DescribeMissing(int64_t target) const {
  std::vector<std::string> parts;
  for (int r : Missing(target)) {
    const int64_t p = progress_[r].value.load(std::memory_order_acquire);
    const int64_t seq = p / 4;
    std::string where;
    if (p == 0) {
      where = "has not entered any collective of this group";
    } else if (p % 4 == kDone) {
      where = absl::StrCat("last finished #", seq);
    } else {
      where = absl::StrCat("still in #", seq);
    }
    if (!exited_[r].empty()) absl::StrAppend(&where, "; its thread has returned ", exited_[r]);
    parts.push_back(absl::StrCat("rank ", r, " (", where, ")"));
  }
  return absl::StrJoin(parts, ", ");
}

template <typename Done>
bool LocalGroup::WaitUntil(const Done& done, bool* timed_out) {
  *timed_out = false;
  // Fast path: peers usually arrive within microseconds. Spin only briefly:
  // when the scheduler has put a peer on this very core (the machine is
  // busy), spinning only delays it; yielding lets it run.
  for (int i = 0; i < spin_iterations_; ++i) {
    if (done()) return true;
    CpuRelax();
  }
  const absl::Time yield_until = absl::Now() + absl::Microseconds(50);
  do {
    if (done()) return true;
    std::this_thread::yield();
  } while (absl::Now() < yield_until);
  // Slow path: sleep until done, the deadline, or an abort.
  const absl::Duration timeout = options_.comm.timeout;
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  absl::MutexLock lock(&mu_);
  while (!done() && !aborted_.load(std::memory_order_acquire)) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) {
      *timed_out = !done();
      break;
    }
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  // Done: even when the group was aborted just after (a rank that returned an
  // error once this collective was complete).
  return done();
}

absl::Status LocalGroup::Rendezvous(int rank, const CollectiveDesc& desc, Phase phase) {
  const int64_t target = Target(desc.seq, phase);
  progress_[rank].value.store(target, std::memory_order_seq_cst);
  if (phase == kArrived && AllReached(target)) {
    ArrivalStamp& a = arrivals_[desc.seq & 1];
    a.steady_ns.store(SteadyNanos(), std::memory_order_relaxed);
    a.seq.store(desc.seq, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    absl::MutexLock lock(&mu_);
    cv_.SignalAll();
  }
  bool timed_out = false;
  if (WaitUntil([&] { return AllReached(target); }, &timed_out)) return absl::OkStatus();
  if (!timed_out && !aborted_.load(std::memory_order_acquire)) return absl::OkStatus();

  absl::MutexLock lock(&mu_);
  const std::string prefix = ErrorPrefix(desc, rank, size_);
  const std::string phase_name = phase == kArrived ? "" : " to finish";
  if (timed_out) {
    // Time since this rank arrived, including the spin.
    absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        prefix, "timed out after ", absl::FormatDuration(options_.comm.timeout),
        " waiting for ", DescribeMissing(target), phase_name,
        "; the group is aborted"));
    if (!aborted_.exchange(true)) abort_reason_ = status;
    cv_.SignalAll();
    return status;
  }
  // Another rank aborted the group (its timeout, normally).
  const std::vector<int> missing = Missing(target);
  if (abort_reason_.code() == absl::StatusCode::kDeadlineExceeded && !missing.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat(prefix, "waiting for ", DescribeMissing(target), phase_name,
                     " when a peer timed out: ", abort_reason_.message()));
  }
  return absl::AbortedError(
      absl::StrCat(prefix, "the group was aborted: ", abort_reason_.message()));
}

absl::Status LocalGroup::WaitTransfer(int rank, const CollectiveDesc& desc) {
  bool timed_out = false;
  const bool done = WaitUntil([&] { return AllFinished(desc.seq); }, &timed_out);
  // Where the rank is, for DescribeProgress and the peers' timeouts; no
  // rendezvous waits on this phase (Note [Transfer tasks]).
  Depart(rank, desc);
  if (done) return absl::OkStatus();
  // Every rank had arrived, so a task can only be late if the thread running
  // it stopped: name the destinations whose bytes are not all written.
  absl::MutexLock lock(&mu_);
  std::vector<int> unfinished;
  for (int t = 0; t < size_; ++t) {
    if (tasks_[desc.seq & 1][t].finished.load(std::memory_order_acquire) < desc.seq) {
      unfinished.push_back(t);
    }
  }
  const std::string prefix = ErrorPrefix(desc, rank, size_);
  if (timed_out) {
    absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        prefix, "timed out after ", absl::FormatDuration(options_.comm.timeout),
        " waiting for the transfer to rank(s) ", absl::StrJoin(unfinished, ", "),
        " to finish; the group is aborted"));
    if (!aborted_.exchange(true)) abort_reason_ = status;
    cv_.SignalAll();
    return status;
  }
  return absl::AbortedError(
      absl::StrCat(prefix, "the group was aborted: ", abort_reason_.message()));
}

// ================================================================ LocalCommunicator

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> LocalCommunicator::CreateGroup(
    int size, const LocalOptions& options) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a local group needs at least one rank, got ", size));
  }
  auto group = std::make_shared<LocalGroup>(size, options);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) {
    comms.push_back(std::make_unique<LocalCommunicator>(group, r, options));
  }
  return comms;
}

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank,
                                     const LocalOptions& options)
    : Communicator(rank, group->size(), Device::Cpu(), options.comm),
      group_(std::move(group)),
      local_options_(options),
      comm_thread_(absl::StrCat("local rank ", rank),
                   [threads = ThreadsPerRank(options, group_->size())] {
                     omp_set_num_threads(threads);
                   }) {}

LocalCommunicator::~LocalCommunicator() { StopWatchdog(); }

void LocalCommunicator::AbortBackend(const absl::Status& why) { group_->Abort(why); }

std::string LocalCommunicator::DescribeArrivals() const {
  return absl::StrCat("where the group's ranks are: ", group_->DescribeProgress());
}

void LocalCommunicator::MarkExited(const absl::Status& status) {
  group_->MarkExited(rank(), status);
}

absl::StatusOr<std::shared_ptr<Work>> LocalCommunicator::Launch(CollectiveCall call) {
  return comm_thread_.Enqueue([this, call = std::move(call)] { return Execute(call); });
}

absl::Status LocalCommunicator::RunBlocking(CollectiveCall call) {
  return comm_thread_.Run([this, &call] { return Execute(call); });
}

absl::Status LocalCommunicator::Execute(const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  MarkRunning(d);
  LocalGroup& g = *group_;
  if (absl::Status h = g.health(); !h.ok()) {
    const absl::Status s = absl::AbortedError(absl::StrCat(
        ErrorPrefix(d, rank(), size()), "the group was aborted earlier: ", h.message()));
    Abort(s);
    return MarkDone(d, s);
  }
  LocalGroup::Post& mine = g.post(d.seq, rank());
  mine.desc = d;
  mine.input = call.input.defined() ? call.input.raw_data() : nullptr;
  mine.output = call.output.defined() ? call.output.raw_data() : nullptr;
  if (absl::Status s = g.Rendezvous(rank(), d, LocalGroup::kArrived); !s.ok()) {
    Abort(s);
    return MarkDone(d, s);
  }
  // The transfer starts when the last rank arrived (Note [Communication
  // spans]), even if this rank's thread only ran later.
  MarkPeersArrived(d, g.SinceLastArrival(d.seq));

  // Every post of this collective is visible now.
  const int n = size();
  absl::InlinedVector<CollectiveDesc, 16> descs(n);
  for (int r = 0; r < n; ++r) descs[r] = g.post(d.seq, r).desc;
  absl::Status check = CheckSameCollective(descs);
  if (!check.ok()) {
    check = absl::Status(check.code(),
                         absl::StrCat(ErrorPrefix(d, rank(), n), check.message()));
  } else {
    // ------------------------------------------------------------ data
    // My own share first, then any other that no thread has claimed yet
    // (Note [Transfer tasks]).
    const int n_tasks = HasTransfer(d.op) ? n : 0;
    for (int k = 0; k < n_tasks; ++k) {
      const int task = (rank() + k) % n;
      if (!g.TryClaim(d.seq, task)) continue;
      RunTransferTask(d, descs[task].in_place, task);
      g.Finish(d.seq, task);
    }
  }
  if (HasTransfer(d.op) && check.ok()) {
    if (absl::Status s = g.WaitTransfer(rank(), d); !s.ok()) {
      Abort(s);
      return MarkDone(d, s);
    }
  } else {
    g.Depart(rank(), d);
  }
  return MarkDone(d, check);
}

// One task of a transfer: the share of destination rank `me` (Note [Transfer
// tasks]); any rank's communication thread may run it.
void LocalCommunicator::RunTransferTask(const CollectiveDesc& d, bool in_place, int me) {
  LocalGroup& g = *group_;
  const int n = size();
  const int64_t esize = static_cast<int64_t>(DTypeSize(d.dtype));
  auto in_of = [&](int r) { return static_cast<const char*>(g.post(d.seq, r).input); };
  auto out_of = [&](int r) { return static_cast<char*>(g.post(d.seq, r).output); };
  switch (d.op) {
    case CollectiveOp::kAllGather: {
      // Pull every peer's input into my output, starting with my right
      // neighbour so that ranks spread their reads over different sources.
      const int64_t bytes = d.count * esize;
      char* out = out_of(me);
      for (int k = 1; k <= n; ++k) {
        const int src = (me + k) % n;
        if (src == me && in_place) continue;
        if (bytes > 0) std::memcpy(out + src * bytes, in_of(src), bytes);
      }
      break;
    }
    case CollectiveOp::kReduceScatter: {
      const int64_t m = d.count / n;
      absl::InlinedVector<const void*, 16> ins(n);
      for (int r = 0; r < n; ++r) ins[r] = in_of(r) + me * m * esize;
      void* outs[] = {out_of(me)};
      ReduceBuffers(d.dtype, d.reduce_op, ins, outs, m);
      break;
    }
    case CollectiveOp::kAllReduce: {
      // My slice of the elements, in whole cache lines so that no two ranks
      // write the same line of an output.
      const int64_t per_line = std::max<int64_t>(1, 64 / esize);
      const int64_t lines = (d.count + per_line - 1) / per_line;
      const int64_t lo = std::min(d.count, lines * me / n * per_line);
      const int64_t hi = std::min(d.count, lines * (me + 1) / n * per_line);
      absl::InlinedVector<const void*, 16> ins(n);
      absl::InlinedVector<void*, 16> outs(n);
      for (int r = 0; r < n; ++r) {
        ins[r] = in_of(r) + lo * esize;
        outs[r] = out_of(r) + lo * esize;
      }
      ReduceBuffers(d.dtype, d.reduce_op, ins, outs, hi - lo);
      break;
    }
    case CollectiveOp::kBroadcast:
      if (me != d.root && d.count > 0) {
        std::memcpy(out_of(me), in_of(d.root), d.count * esize);
      }
      break;
    case CollectiveOp::kAllToAll: {
      // Pull block `me` of every rank's input into my output's block of
      // that rank, right neighbour first as in AllGather. Inputs and
      // outputs never overlap (the base class refuses it).
      const int64_t block = d.count / n * esize;
      char* out = out_of(me);
      for (int k = 1; k <= n && block > 0; ++k) {
        const int src = (me + k) % n;
        std::memcpy(out + src * block, in_of(src) + me * block, block);
      }
      break;
    }
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      break;
  }
}

absl::StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::DoSplit(
    const CollectiveDesc& desc) {
  absl::StatusOr<std::unique_ptr<Communicator>> result;
  absl::Status s = comm_thread_.Run([&] {
    result = ExecuteSplit(desc);
    return result.status();
  });
  (void)s;
  return result;
}

absl::StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::ExecuteSplit(
    const CollectiveDesc& d) {
  MarkRunning(d);
  LocalGroup& g = *group_;
  if (absl::Status h = g.health(); !h.ok()) {
    const absl::Status s = absl::AbortedError(absl::StrCat(
        ErrorPrefix(d, rank(), size()), "the group was aborted earlier: ", h.message()));
    return MarkDone(d, s);
  }
  g.post(d.seq, rank()).desc = d;
  if (absl::Status s = g.Rendezvous(rank(), d, LocalGroup::kArrived); !s.ok()) {
    Abort(s);
    return MarkDone(d, s);
  }
  const int n = size();
  std::vector<CollectiveDesc> descs(n);
  for (int r = 0; r < n; ++r) descs[r] = g.post(d.seq, r).desc;
  absl::Status check = CheckSameCollective(descs);
  // Members of my color in (key, rank) order; the first creates the group.
  std::vector<int> members;
  if (check.ok() && d.color >= 0) {
    for (int r = 0; r < n; ++r) {
      if (descs[r].color == d.color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return descs[a].key < descs[b].key; });
    if (members[0] == rank()) {
      g.split_slot(d.seq, rank()) =
          std::make_shared<LocalGroup>(static_cast<int>(members.size()), g.options());
      g.AddChild(g.split_slot(d.seq, rank()));
    }
  }
  if (absl::Status s = g.Rendezvous(rank(), d, LocalGroup::kSplitMade); !s.ok()) {
    Abort(s);
    return MarkDone(d, s);
  }
  std::shared_ptr<LocalGroup> sub;
  int sub_rank = -1;
  if (!members.empty()) {
    sub = g.split_slot(d.seq, members[0]);
    sub_rank = static_cast<int>(std::find(members.begin(), members.end(), rank()) -
                                members.begin());
  }
  if (absl::Status s = g.Rendezvous(rank(), d, LocalGroup::kDone); !s.ok()) {
    Abort(s);
    return MarkDone(d, s);
  }
  if (!members.empty() && members[0] == rank()) g.split_slot(d.seq, rank()).reset();
  if (!check.ok()) {
    return MarkDone(d, absl::Status(check.code(), absl::StrCat(ErrorPrefix(d, rank(), n),
                                                               check.message())));
  }
  (void)MarkDone(d, absl::OkStatus());
  if (sub == nullptr) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(
      std::make_unique<LocalCommunicator>(std::move(sub), sub_rank, local_options_));
}

// ================================================================ RunRanks

std::vector<absl::Status> RunRanks(int world_size,
                                   const std::function<absl::Status(Communicator&)>& fn,
                                   const LocalOptions& options) {
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms =
      LocalCommunicator::CreateGroup(world_size, options);
  if (!comms.ok()) return {comms.status()};
  const int threads = ThreadsPerRank(options, world_size);
  std::vector<absl::Status> statuses(world_size);
  // Which ranks have returned, and the first error (Note [A hung rank]).
  std::mutex mu;
  std::condition_variable returned_cv;
  std::vector<bool> returned(world_size, false);
  int n_returned = 0;
  int first_error = -1;
  absl::Time first_error_at;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.emplace_back([&, r] {
      omp_set_num_threads(threads);
      std::unique_ptr<Communicator>& comm = (*comms)[r];
      const absl::Status status = fn(*comm);
      static_cast<LocalCommunicator&>(*comm).MarkExited(status);
      comm.reset();  // drains its communication thread
      {
        std::lock_guard<std::mutex> lock(mu);
        statuses[r] = status;
        returned[r] = true;
        ++n_returned;
        if (!status.ok() && first_error < 0) {
          first_error = r;
          first_error_at = absl::Now();
        }
      }
      returned_cv.notify_all();
    });
  }
  {
    const absl::Duration grace = options.hung_rank_grace < absl::ZeroDuration()
                                     ? options.comm.timeout
                                     : options.hung_rank_grace;
    std::unique_lock<std::mutex> lock(mu);
    bool reported = false;
    while (n_returned < world_size) {
      if (first_error < 0 || reported || grace == absl::InfiniteDuration()) {
        returned_cv.wait(lock);
        continue;
      }
      const absl::Time deadline = first_error_at + grace;
      if (absl::Now() < deadline) {
        returned_cv.wait_for(lock, absl::ToChronoNanoseconds(deadline - absl::Now()));
        continue;
      }
      std::vector<int> hung;
      for (int r = 0; r < world_size; ++r) {
        if (!returned[r]) hung.push_back(r);
      }
      const std::string why = absl::StrCat(
          hung.size() == 1 ? "rank " : "ranks ", absl::StrJoin(hung, ", "), " of ", world_size,
          hung.size() == 1 ? " has" : " have", " not returned ", absl::FormatDuration(grace),
          " after rank ", first_error, " failed (", statuses[first_error].ToString(),
          "): hung outside the group's collectives");
      reported = true;
      lock.unlock();
      // Ends the process (flight records first); returns only under a test's
      // terminate hook, after which the ranks are joined as usual.
      Watchdog::Process().Expire(why);
      lock.lock();
    }
  }
  for (std::thread& t : ranks) t.join();
  return statuses;
}

}  // namespace zeroshard
