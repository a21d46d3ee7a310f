// The in-process backend: N ranks as threads of one process, sharing memory.
// The embedded default on one machine and the workhorse of the tests.
//
//   std::vector<absl::Status> statuses = RunRanks(4, [](Communicator& comm) -> absl::Status {
//     ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Full({10}, comm.rank(), DType::kF32));
//     ZS_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({40}, DType::kF32));
//     return comm.AllGather(x, all);       // all = [0 x10, 1 x10, 2 x10, 3 x10]
//   });
//   // statuses[r] is what rank r's function returned.
//
// How it moves data (Note [In-process collectives]): ranks meet at a
// sequence-numbered rendezvous where each posts its buffer pointers; then the
// bytes move directly between the peers' buffers, with no lock held, as one
// share per destination rank r:
//   - AllGather: every peer's input copied into rank r's output;
//   - ReduceScatter: block r of all inputs reduced into rank r's output in
//     one pass (collectives/cpu_reduce.h);
//   - AllReduce: the r-th 1/size of the elements of all inputs reduced, and
//     the result written into every rank's output;
//   - Broadcast: the root's tensor copied into rank r's;
//   - AllToAll: block r of every rank's input copied into rank r's output.
// Each rank's communication thread moves its own share first and then any
// share no other thread has claimed (Note [Transfer tasks] in the .cc), so the
// shares move in parallel when every thread has a core, and the first thread
// to run moves them all when the others wait for one. The collective ends
// when every share is written, after which no rank touches another's
// buffers. The rendezvous spins briefly (when the ranks fit on the cores),
// yields the core for up to 50 us (a peer may be waiting for this very core
// on a busy machine), then sleeps on a condition variable with the timeout
// as deadline; a rank that times out names the ranks that have not arrived
// and aborts the group. Reductions accumulate in rank order, so every rank
// gets the same bits, and the same bits as the MPI backend.
// Descriptors are always compared across ranks (check mode is free here).
#ifndef ZEROSHARD_COLLECTIVES_LOCAL_COMMUNICATOR_H_
#define ZEROSHARD_COLLECTIVES_LOCAL_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "zeroshard/collectives/communicator.h"

namespace zeroshard {

struct LocalOptions {
  CommunicatorOptions comm;
  // OpenMP threads for each rank's thread (and its communication thread), for
  // the kernels the rank runs. 0: max(1, hardware threads / world size), so
  // ranks do not oversubscribe the cores.
  int threads_per_rank = 0;
  // RunRanks: how long after a rank returned an error the others may take to
  // return before the ones still running are named hung and the process ends
  // through the watchdog (Note [A hung rank]). Negative: comm.timeout (the
  // patience a collective has); InfiniteDuration: wait forever.
  absl::Duration hung_rank_grace = absl::Seconds(-1);

  std::string ToString() const;
};

class LocalGroup;  // the shared state of one group (local_communicator.cc)

class LocalCommunicator final : public Communicator {
 public:
  // The communicators of a new group, one per rank, for callers that run
  // their own threads (RunRanks does this for you). Rank r's communicator
  // must be used by one thread at a time; each may be destroyed on its own.
  static absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateGroup(
      int size, const LocalOptions& options = {});

  ~LocalCommunicator() override;
  absl::string_view backend() const override { return "local"; }

  // Tells the peers that this rank's thread is done (RunRanks calls it), so a
  // peer that times out waiting for it can say so.
  void MarkExited(const absl::Status& status);

  // Used by the group; public for make_unique.
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, const LocalOptions& options);

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override;
  absl::Status RunBlocking(CollectiveCall call) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override;
  // The watchdog: wakes every rank waiting in the group with Aborted.
  void AbortBackend(const absl::Status& why) override;
  // Every rank's progress through the group's collectives.
  std::string DescribeArrivals() const override;

 private:
  absl::Status Execute(const CollectiveCall& call);
  // Moves destination rank `dest`'s share of collective d (Note [Transfer tasks]).
  void RunTransferTask(const CollectiveDesc& d, bool in_place, int dest);
  absl::StatusOr<std::unique_ptr<Communicator>> ExecuteSplit(const CollectiveDesc& desc);

  std::shared_ptr<LocalGroup> group_;
  const LocalOptions local_options_;
  CommThread comm_thread_;  // last: destroyed (drained) first
};

// Runs `fn` on `world_size` threads, rank r with the group's rank-r
// communicator, and returns each rank's status (index = rank). A rank whose
// function returns an error aborts the group: its peers fail at their next
// collective (or the one they wait in) naming it. A rank that returns OK early
// leaves its peers to time out in their next collective (the error names it
// and says that it has exited).
//
// Note [A hung rank]
//   A rank stuck outside the group's collectives (an endless loop, a wait on
//   something else) cannot be woken by an abort. Once some rank has returned
//   an error, RunRanks waits LocalOptions::hung_rank_grace for the others;
//   the ones still running are then named hung, and the process watchdog
//   expires (runtime/watchdog.h): flight records of every rank, then the
//   process ends with kWatchdogExitCode. A thread cannot be cancelled, so
//   there is nothing better to do than PyTorch's watchdog does.
std::vector<absl::Status> RunRanks(int world_size,
                                   const std::function<absl::Status(Communicator&)>& fn,
                                   const LocalOptions& options = {});

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_LOCAL_COMMUNICATOR_H_
