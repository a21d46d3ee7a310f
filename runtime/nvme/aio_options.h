// AioOptions: how NVMe offload moves bytes, in DeepSpeed's `aio` terms; and
// IoFaults, the fault-injection hook of the I/O layer (tests only).
//
//   AioOptions aio;                 // DeepSpeed's defaults
//   aio.block_size = 1 << 20;       // bytes per I/O request
//   aio.queue_depth = 8;            // requests in flight per I/O thread
//   aio.thread_count = 1;           // I/O threads; one transfer is split among them
//   aio.single_submit = false;      // submit requests one by one (true) or in batches
//   aio.overlap_events = true;      // refill the queue as completions arrive (true)
//                                   // or only once the whole batch has completed
//   ZS_RETURN_IF_ERROR(aio.Validate());
//
// Note [Swap faults]: IoFaults lets a test make the I/O layer meet the faults
// a real deployment meets, without a real full disk or a read-only mount:
// a write budget (a write that crosses it is cut short at the budget and the
// rest fails with ENOSPC, as a full disk does), a filesystem that refuses
// O_DIRECT (EINVAL at open: tmpfs before Linux 6.6, some overlayfs), a kernel
// without io_uring (ENOSYS: io_uring_disabled, seccomp in containers), and an
// errno for creating the swap file (EROFS: a read-only mount, which root
// cannot simulate with chmod), and an errno for reads (EIO: a device that can
// no longer return what it stored; the file is untouched). Truncated or
// altered files need no hook: the tests truncate and overwrite the real swap
// files. A test that gives IoFaults to one rank's swap files only
// (OffloadPolicy::nvme_faults of that rank) makes the fault that rank's.
#ifndef ZEROSHARD_RUNTIME_NVME_AIO_OPTIONS_H_
#define ZEROSHARD_RUNTIME_NVME_AIO_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zeroshard {

// The alignment of O_DIRECT file offsets, lengths and buffers: the page size,
// a multiple of every logical block size in use (512 B and 4 KiB).
inline constexpr int64_t kDirectIoAlignment = 4096;

struct AioOptions {
  int64_t block_size = 1 << 20;  // bytes per request: a multiple of 4096, at least 4096
  int queue_depth = 8;           // requests in flight per I/O thread: 1..4096
  int thread_count = 1;          // I/O threads: 1..64
  bool single_submit = false;
  bool overlap_events = true;

  absl::Status Validate() const;
  std::string ToString() const;
};

// Shared (by pointer) between a swap file and its engine; safe to change
// while I/O runs. Defaults inject nothing.
struct IoFaults {
  // Bytes writes may still store; -1: unlimited. Decremented as writes are issued.
  std::atomic<int64_t> write_budget{-1};
  std::atomic<bool> refuse_o_direct{false};
  std::atomic<bool> refuse_io_uring{false};
  std::atomic<int> create_errno{0};
  // Nonzero: every read issued from now on fails with this errno (EIO).
  std::atomic<int> read_errno{0};
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_NVME_AIO_OPTIONS_H_
