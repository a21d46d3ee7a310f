// Work: the handle of an asynchronous collective; CommThread: the per-
// communicator thread that runs CPU collectives in issue order so that the
// caller's compute overlaps them.
//
//   ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> gather, comm.AllGatherAsync(shard, full));
//   ... compute that does not touch `shard` or `full` ...
//   ZS_RETURN_IF_ERROR(gather->Wait());          // the collective's Status, same on every rank
//
//   // CUDA (NCCL): make the compute stream wait on the device, not the host.
//   ZS_RETURN_IF_ERROR(gather->Block(compute_stream));
//
// Buffers belong to the collective until Wait() returns (or, on CUDA, until
// the stream that Block() was given reaches that point).
#ifndef ZEROSHARD_COLLECTIVES_WORK_H_
#define ZEROSHARD_COLLECTIVES_WORK_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "zeroshard/runtime/stream.h"

namespace zeroshard {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks the calling thread until the collective has finished and returns
  // its status. May be called more than once, from any thread.
  virtual absl::Status Wait() = 0;
  // True once Wait() would return without blocking.
  virtual bool IsCompleted() const = 0;
  // Makes `stream` wait for the collective. CUDA backends enqueue the wait on
  // the device and return at once; host backends wait (there is nothing to
  // enqueue on a CPU stream) and return the collective's status.
  virtual absl::Status Block(const Stream& stream) {
    (void)stream;
    return Wait();
  }
};

// Note [std::mutex on the collective path]: Debian's Abseil is built with
// absl::Mutex deadlock detection on (~95 ns per lock/unlock here, against
// ~22 ns for std::mutex), and every collective takes several of these locks.

// Work finished on the host: completed exactly once with a status.
class HostWork final : public Work {
 public:
  HostWork() = default;
  // An already completed handle.
  static std::shared_ptr<HostWork> Done(absl::Status status);

  void Complete(absl::Status status);
  absl::Status Wait() override;
  bool IsCompleted() const override { return done_flag_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;     // guarded by mu_
  absl::Status status_;   // guarded by mu_
  std::atomic<bool> done_flag_{false};
};

// A Work that runs `then` once, after `first` has completed OK, on the thread
// that first waits for it (Wait) or blocks a stream on it (Block: on CUDA the
// continuation's kernels are enqueued after the wait, on the op stream). Its
// status is first's error, else then's. The continuation of a communication
// hook: dequantize a gathered buffer on arrival (sharding/comm_hook.h).
std::shared_ptr<Work> ThenWork(std::shared_ptr<Work> first, std::function<absl::Status()> then);

// Runs tasks one at a time in the order they were given: queued ones on its
// own thread (started on first use), or - for a blocking call that finds
// nothing queued or running - directly on the caller's thread, which saves
// a thread hand-off on the latency-bound path. Either way at most one task
// runs at a time and issue order is kept.
class CommThread {
 public:
  // `name` appears in debug output; `on_start` runs first on the thread (e.g.
  // to set its OpenMP thread count).
  explicit CommThread(std::string name, std::function<void()> on_start = {});
  // Finishes every queued task, then joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task`; the Work completes with its status.
  std::shared_ptr<Work> Enqueue(std::function<absl::Status()> task);
  // Runs `task` after every earlier one and returns its status.
  absl::Status Run(std::function<absl::Status()> task);
  // Returns once every task given so far has finished.
  void Drain();

 private:
  struct Item {
    std::function<absl::Status()> task;
    std::shared_ptr<HostWork> work;
  };
  void Loop();

  const std::string name_;
  const std::function<void()> on_start_;
  std::mutex mu_;  // guards the four below
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;  // a task is running (here or inline)
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_WORK_H_
