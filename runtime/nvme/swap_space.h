// SwapSpace: a rank's regions (one per unit) kept in an NVMe swap file and
// brought into memory through a pool of `buffer_count` aligned (optionally
// pinned) host buffers: the next unit's region is read while the current one
// is in use and the previous one is written back (double or triple buffering,
// DeepSpeed's ZeRO-Infinity swapper).
//
//   SwapSpaceOptions o{.name = "optimizer state", .file = {.dir = nvme_path, .tag = "optimizer"},
//                      .buffer_count = 4};
//   ZS_ASSIGN_OR_RETURN(auto space, SwapSpace::Create(o, region_bytes, region_names, &host));
//   for (int r = 0; r < n; ++r) {
//     space->Prefetch(r + 1);                          // reads ahead if a buffer is free
//     ZS_ASSIGN_OR_RETURN(char* bytes, space->Acquire(r));   // waits for r's read
//     ... use region r in place ...
//     ZS_RETURN_IF_ERROR(space->Release(r, /*dirty=*/true));  // written back in the background
//   }
//   ZS_RETURN_IF_ERROR(space->Flush());                // every write on disk
//
// Note [Swap buffers]: a buffer holds at most one region and is, in turn,
// free; reading (a prefetch, or an Acquire); resident (acquired, maybe more
// than once); writing (released dirty); or clean (its region's bytes equal
// the file's, kept as a cache). Acquire takes a region's own buffer when it
// has one (waiting for a read or write in flight on it), else the first free
// buffer, else the least recently used clean one, else waits for the oldest
// write. Prefetch never waits: it only takes a free or clean buffer (or one
// whose write has finished). So with buffer_count >= the number of regions
// nothing is read twice; with 3, one region steps while the next is read and
// the previous written. An I/O error is sticky: every later call returns it
// (the state on disk can no longer be trusted), naming the file and region.
//
// Not thread-safe: one rank's compute thread drives it; the I/O runs on the
// engine's threads.
#ifndef ZEROSHARD_RUNTIME_NVME_SWAP_SPACE_H_
#define ZEROSHARD_RUNTIME_NVME_SWAP_SPACE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/nvme/aio_engine.h"
#include "zeroshard/runtime/nvme/swap_file.h"

namespace zeroshard {

struct SwapSpaceOptions {
  std::string name;  // "optimizer state", "parameters": in messages
  SwapFileOptions file;
  AioOptions aio;
  int buffer_count = 4;    // at least 1
  bool pin_memory = false; // mlock the buffers (page-locked host memory)
  // Overlap (DeepSpeed's pipeline_read / pipeline_write): false turns
  // Prefetch into a no-op / makes a dirty Release wait for its write, so
  // every transfer is exposed (the benchmark's "no overlap" baseline).
  bool read_ahead = true;
  bool write_behind = true;
};

// What the space did (for logs, tests and the benchmark).
struct SwapStats {
  int64_t reads = 0, writes = 0;        // region transfers issued
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t hits = 0;                     // Acquires served from a buffer without a read
  int64_t prefetches = 0;               // reads started by Prefetch
  double wait_seconds = 0;              // time Acquire/Flush spent waiting for I/O
  std::string ToString() const;
};

class SwapSpace {
 public:
  // The file (under options.file.dir) and the buffers, each max(region_bytes)
  // rounded up to 4096, allocated from `host` (nullptr: the default CPU
  // allocator). Every region must be written (Acquire with overwrite) before
  // it is read. When `host` is a virtual device's host side (the simulator),
  // the regions go to that device's simulated NVMe instead of a file (Note
  // [Virtual NVMe] in virtual_swap_store.h): no file, no byte touched.
  static absl::StatusOr<std::unique_ptr<SwapSpace>> Create(const SwapSpaceOptions& options,
                                                           const std::vector<int64_t>& region_bytes,
                                                           std::vector<std::string> region_names,
                                                           Allocator* host = nullptr);
  // Waits for outstanding I/O, frees the buffers, removes the file.
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // Region r's bytes (4096-aligned, region_bytes(r) long), resident until the
  // matching Release. With `overwrite` nothing is read: the bytes start zeroed
  // and the caller fills them (initial values, a checkpoint load).
  absl::StatusOr<char*> Acquire(int r, bool overwrite = false);
  // Ends one Acquire. `dirty`: the bytes changed and are written back once the
  // last Acquire of r is released.
  absl::Status Release(int r, bool dirty);
  // Starts reading r if a buffer is available without waiting; true when r
  // is (or is becoming) resident. Errors surface at the Acquire.
  bool Prefetch(int r);
  // Waits for every write in flight; the first I/O error, if any.
  absl::Status Flush();
  // Flush, then forget every cached (clean or read-ahead) region, so the next
  // Acquire of each reads the file; acquired regions stay. For benchmarks.
  absl::Status DropCache();

  int num_regions() const { return file_->num_regions(); }
  int64_t region_bytes(int r) const { return file_->region_bytes(r); }
  int buffer_count() const { return static_cast<int>(buffers_.size()); }
  int64_t buffer_bytes() const { return buffer_bytes_; }
  // The host memory the buffers take: each buffer_bytes() plus 4096 of
  // alignment slack.
  int64_t host_bytes() const { return buffer_count() * raw_bytes_; }
  // Where the regions rest: the swap file, or the simulator's store.
  const SwapStore& file() const { return *file_; }
  // The device of the buffers' memory (the host allocator's): the device of
  // a tensor over Acquire's bytes (Tensor::Wrap).
  Device device() const { return host_->device(); }
  const SwapStats& stats() const { return stats_; }
  void ResetStats() { stats_ = SwapStats{}; }
  // Notes worth a log line (io_uring or O_DIRECT unavailable, stale files
  // removed, pinning refused); "" if none.
  const std::string& note() const { return note_; }
  // "optimizer state: 12 regions, 48.00 MiB in '<path>' (O_DIRECT, io_uring), 3 x 4.00 MiB buffers"
  std::string ToString() const;

 private:
  enum class BufferState { kFree, kReading, kResident, kWriting, kClean };
  struct Buffer {
    char* data = nullptr;  // aligned
    void* raw = nullptr;   // from the allocator
    BufferState state = BufferState::kFree;
    int region = -1;
    int pins = 0;
    bool dirty = false;
    uint64_t last_use = 0;
    std::shared_ptr<IoTicket> ticket;
  };

  SwapSpace() = default;
  // A buffer for a new region, evicting as Note [Swap buffers] says; -1 when
  // `may_wait` is false and none is available now.
  absl::StatusOr<int> TakeBuffer(bool may_wait);
  // Waits for buffer b's transfer; the buffer becomes resident (read) or clean (write).
  absl::Status Settle(int b);
  absl::Status Fail(absl::Status s);

  SwapSpaceOptions options_;
  Allocator* host_ = nullptr;
  std::unique_ptr<AioEngine> engine_;  // none for a virtual store
  std::unique_ptr<SwapStore> file_;
  std::vector<Buffer> buffers_;
  std::vector<int> region_buffer_;  // region -> buffer, or -1
  int64_t buffer_bytes_ = 0;
  int64_t raw_bytes_ = 0;
  bool pinned_ = false;
  uint64_t clock_ = 0;
  absl::Status error_;  // sticky
  SwapStats stats_;
  std::string note_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_NVME_SWAP_SPACE_H_
