// AioEngine: asynchronous reads and writes of file byte ranges on a few I/O
// threads, with Linux io_uring (liburing) or, where the kernel refuses
// io_uring, plain pread/pwrite on the same threads. The I/O layer of NVMe
// offload (DeepSpeed's `aio` op); the swap file (swap_file.h) sits on it.
//
//   ZS_ASSIGN_OR_RETURN(std::unique_ptr<AioEngine> aio, AioEngine::Create(AioOptions{}));
//   std::shared_ptr<IoTicket> w = aio->Submit(IoKind::kWrite, fd, buffer, bytes, offset, "unit 3");
//   ...                                  // compute goes on while the bytes move
//   ZS_RETURN_IF_ERROR(w->Wait());       // the transfer's first error, if any
//
// A transfer is split into `thread_count` contiguous parts (whole blocks each),
// one per I/O thread; each thread keeps up to `queue_depth` requests of
// `block_size` bytes in flight. With O_DIRECT files the buffer, offset and
// length must be 4096-aligned (the swap file guarantees it). Short transfers
// are resumed where they stopped; a read that meets the end of the file
// before the range is complete is a DataLoss ("truncated"), an I/O error is
// the errno's status (ENOSPC, EDQUOT, EFBIG: ResourceExhausted; EIO:
// DataLoss), all naming `what`. IoFaults (aio_options.h) injects faults.
#ifndef ZEROSHARD_RUNTIME_NVME_AIO_ENGINE_H_
#define ZEROSHARD_RUNTIME_NVME_AIO_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/nvme/aio_options.h"

namespace zeroshard {

enum class IoKind { kRead, kWrite };

// The completion of one submitted transfer. Thread-safe. (The simulator's
// swap store, virtual_swap_store.h, completes its tickets on a virtual clock.)
class IoTicket {
 public:
  virtual ~IoTicket() = default;
  // Blocks until every part of the transfer has finished; its first error.
  virtual absl::Status Wait();
  virtual bool Done();
  // A ticket that is already done with `status` (a transfer refused up front).
  static std::shared_ptr<IoTicket> Completed(absl::Status status);

 private:
  friend class AioEngine;
  void Finish(const absl::Status& part_status);

  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class AioEngine {
 public:
  enum class Backend { kIoUring, kThreads };

  // Starts the I/O threads (and their io_uring rings; when io_uring cannot be
  // set up, the pread/pwrite backend and fallback_note() says why).
  static absl::StatusOr<std::unique_ptr<AioEngine>> Create(const AioOptions& options,
                                                          std::shared_ptr<IoFaults> faults = nullptr);
  // Finishes every submitted transfer, then stops the threads.
  ~AioEngine();
  AioEngine(const AioEngine&) = delete;
  AioEngine& operator=(const AioEngine&) = delete;

  // Starts moving `bytes` between `buffer` and `fd` at `offset`. The buffer
  // must stay valid (and, for writes, unchanged) until the ticket is done.
  std::shared_ptr<IoTicket> Submit(IoKind kind, int fd, void* buffer, int64_t bytes, int64_t offset,
                                   std::string what);

  Backend backend() const { return backend_; }
  // "io_uring" or "pread/pwrite threads".
  std::string backend_name() const;
  // Empty with io_uring; otherwise why io_uring is not used.
  const std::string& fallback_note() const { return fallback_note_; }
  const AioOptions& options() const { return options_; }

 private:
  struct Part {
    IoKind kind = IoKind::kRead;
    int fd = -1;
    char* buffer = nullptr;
    int64_t bytes = 0;
    int64_t offset = 0;
    std::string what;
    std::shared_ptr<IoTicket> ticket;
  };
  class Worker;

  AioEngine(const AioOptions& options, std::shared_ptr<IoFaults> faults);
  void WorkerLoop(Worker* worker);

  const AioOptions options_;
  const std::shared_ptr<IoFaults> faults_;
  Backend backend_ = Backend::kIoUring;
  std::string fallback_note_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  std::deque<Part> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_NVME_AIO_ENGINE_H_
