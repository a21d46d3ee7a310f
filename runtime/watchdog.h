// Watchdog: the process's last line of defence against a hang (issue 26), in
// the role of PyTorch's NCCL watchdog. One thread per process watches
//   - every communicator (collectives/communicator.h registers each one at its
//     first collective): a collective in progress for longer than the
//     communicator's own timeout plus `grace`. The backend's own timeout
//     should have fired first (DeadlineExceeded naming the missing rank); the
//     watchdog catches what cannot time out by itself: a GPU kernel that never
//     ends, a wait with no deadline, a backend bug;
//   - every WatchdogWait in scope: a device wait (cudaEventSynchronize,
//     cudaStreamSynchronize) or a communicator's init (ncclCommInitRank), each
//     with its own deadline.
// Past a deadline it expires (Expire): it writes the flight recorder of every
// client it can reach (each communicator's ring of recent collectives with
// their sequence numbers, ops, dtypes, counts and which ranks arrived, and the
// waits in progress) to `<dump_dir>/flight_recorder.rank<r>.txt`, one file per
// rank (with in-process ranks, every rank of the process), and to the log
// (runtime/log.h: one kFatal event of source "watchdog", the records as its
// detail; stderr unless the embedder replaced the handler);
// aborts every watched communicator (later and pending collectives fail with
// Aborted; ncclCommAbort on GPUs); and ends the process through `terminate`
// (default: std::_Exit(kWatchdogExitCode); the MPI job installs MPI_Abort so
// the whole job ends).
//
//   // Once, at the start of the job:
//   ZS_RETURN_IF_ERROR(Watchdog::Process().Start({.dump_dir = run_dir}));
//   // Around a wait that has no deadline of its own:
//   { WatchdogWait wait("cudaEventSynchronize (step end)"); ... }
//
// Nothing happens until Start: registering a communicator or entering a
// WatchdogWait costs one uncontended mutex and a map update. Tests start the
// watchdog with a `terminate` hook and a short poll, or use CheckNow.
//
// One thread for the process, not one per communicator as in PyTorch: every
// client is polled once per `poll` (1 s), so an expiry is noticed within a
// second of its deadline, and the flight records of all in-process ranks come
// from one place.
#ifndef ZEROSHARD_RUNTIME_WATCHDOG_H_
#define ZEROSHARD_RUNTIME_WATCHDOG_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zeroshard {

// The status a process ended by the watchdog exits with (std::_Exit), so a
// launcher or a test can tell it from an ordinary failure (1).
inline constexpr int kWatchdogExitCode = 3;

// What the watchdog watches besides waits: a communicator. Implementations must
// be thread-safe: the watchdog thread calls these while the owner runs.
class WatchdogClient {
 public:
  virtual ~WatchdogClient() = default;

  struct Pending {
    std::string what;        // "AllGather #12 (f32, 10 elements per rank) running"
    absl::Time since;        // when it started (or was issued, if still queued)
    absl::Duration allowed;  // its own deadline; InfiniteDuration: none
  };
  // The oldest operation in progress, if any.
  virtual std::optional<Pending> OldestPending() const = 0;
  // The rank whose flight-recorder file this client's record goes to (its
  // world rank: a split group's communicator reports under its parent's rank).
  virtual int WatchdogRank() const = 0;
  // The flight record: recent operations, their states, who arrived.
  virtual std::string FlightRecord() const = 0;
  // Fails the operations in progress and later ones (ncclCommAbort on GPUs).
  // Called once, on expiry; must not call Watchdog::Remove.
  virtual void AbortForWatchdog(const absl::Status& why) = 0;
};

struct WatchdogOptions {
  // How long past a client's own deadline the watchdog waits before it
  // expires (the client's timeout reports first, with a better message).
  absl::Duration grace = absl::Seconds(30);
  // The deadline of a WatchdogWait constructed without one (device waits,
  // communicator inits). The job sets it to distributed.timeout_s.
  absl::Duration wait_timeout = absl::Minutes(10);
  // How often the thread checks.
  absl::Duration poll = absl::Seconds(1);
  // Where flight_recorder.rank<r>.txt files go; empty: the log only.
  std::string dump_dir;
  // The rank that waits (which are per process, not per communicator) are
  // reported under; -1: every rank the process's communicators have.
  int process_rank = -1;
  // Ends the process after an expiry (after the flight records and aborts).
  // Default: flush stdout/stderr and std::_Exit(kWatchdogExitCode). The MPI job
  // installs MPI_Abort. A test hook may return: the watchdog then keeps
  // running but never expires twice.
  std::function<void(int exit_code)> terminate;
};

class Watchdog {
 public:
  // The process's watchdog (never destroyed).
  static Watchdog& Process();

  Watchdog() = default;
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the thread, armed (an earlier expiry under a test hook is
  // forgotten). FailedPrecondition when it is already running;
  // InvalidArgument for a non-positive poll or wait_timeout, or a negative grace.
  absl::Status Start(WatchdogOptions options);
  // Stops the thread (idempotent); clients stay registered.
  void Stop();
  bool running() const;
  // The options Start was given (defaults before).
  WatchdogOptions options() const;
  absl::Duration wait_timeout() const;

  void Add(WatchdogClient* client);
  // After it returns, the watchdog no longer touches `client`.
  void Remove(WatchdogClient* client);

  // One check at `now`, as the thread does each poll; true if it expired.
  // Works whether or not the thread runs (tests).
  bool CheckNow(absl::Time now = absl::Now());
  // Expires now for `why` (RunRanks calls it for a hung rank): flight
  // records, aborts, terminate. Returns only if `terminate` returns, or if the
  // watchdog already expired.
  void Expire(const std::string& why);
  // How many times it expired (0 or 1).
  int expirations() const { return expirations_.load(); }

  // Waits in progress (WatchdogWait uses these).
  int64_t BeginWait(std::string what, absl::Duration deadline);
  void EndWait(int64_t id);
  // "cudaEventSynchronize (step end), 12.3 s of 600 s", one per line.
  std::string DescribeWaits(absl::Time now = absl::Now()) const;

 private:
  struct Wait {
    std::string what;
    absl::Time since;
    absl::Duration deadline;
  };
  void Loop();
  // The reason to expire at `now`, or empty. mu_ held.
  std::string Overdue(absl::Time now) const;
  std::string DescribeWaitsLocked(absl::Time now) const;

  mutable std::mutex mu_;  // guards everything below but expirations_
  std::condition_variable cv_;
  WatchdogOptions options_;
  std::vector<WatchdogClient*> clients_;
  std::map<int64_t, Wait> waits_;
  int64_t next_wait_ = 0;
  bool stop_ = false;
  std::thread thread_;
  std::mutex expire_mu_;  // one expiry at a time
  std::atomic<int> expirations_{0};
};

// A wait the process watchdog bounds (scope): a device wait, a communicator's
// init. Registers with Watchdog::Process() whether or not it runs.
class WatchdogWait {
 public:
  // Deadline: the watchdog's wait_timeout.
  explicit WatchdogWait(std::string what);
  WatchdogWait(std::string what, absl::Duration deadline);
  ~WatchdogWait();
  WatchdogWait(const WatchdogWait&) = delete;
  WatchdogWait& operator=(const WatchdogWait&) = delete;

 private:
  int64_t id_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_WATCHDOG_H_
