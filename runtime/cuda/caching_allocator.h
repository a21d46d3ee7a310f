// CachingAllocator: device memory kept in a cache of blocks, so that a training
// step allocates and frees thousands of buffers with no cudaMalloc/cudaFree
// (each synchronises the whole device). The bookkeeping is plain C++ over an
// injected CachingBacking (malloc/free/events), so tests run it on the CPU with
// a fake backing whose events complete when the test says so.
//
//   CudaBacking backing(/*device=*/0);
//   CachingAllocator cache(&backing, {.device = Device::Cuda(0)});
//   ZS_ASSIGN_OR_RETURN(void* p, cache.Allocate(4 << 20, compute.native_handle()));
//   ... kernels on `compute` use p ...
//   ZS_RETURN_IF_ERROR(cache.Free(p));   // back to the cache, guarded by an event
//   cache.stats().ToString();            // "allocated 0 B (peak 4.00 MiB), reserved 20.00 MiB..."
//
//   // Tensors: an Allocator bound to one stream of the cache.
//   CachingStreamAllocator gpu(&cache, compute.native_handle(), "compute");
//   ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({1024, 1024}, DType::kBF16, &gpu));
//
// Note [Caching allocator]
// - Sizes. A request is rounded up to a multiple of `round_bytes` (512). Requests
//   up to `small_request_bytes` (1 MiB) come from the small pool, whose segments
//   (one backing Malloc each) are `small_segment_bytes` (2 MiB); larger ones from
//   the large pool: below `large_segment_bytes / 2` they share segments of
//   `large_segment_bytes` (20 MiB), above they get a segment of their own rounded
//   to `large_round_bytes` (2 MiB). The two pools never mix, so small buffers do
//   not fragment large segments.
// - Bins and best fit. Each pool keeps its free blocks in size-class bins (one
//   per power of two), each ordered by (size, address). A request searches its
//   own bin from its size upward, then the larger bins: the first usable block
//   is the smallest that fits (best fit), ties going to the lowest address.
// - Splitting and coalescing. A block larger than the request is split; the
//   rest stays free (small pool: if at least `round_bytes` remain; large pool:
//   if more than `small_request_bytes` remain, else the request keeps the slack).
//   A freed block merges with free neighbours of its segment when they wait on
//   the same stream (see below); a segment that is one free block again can be
//   given back by EmptyCache().
// - Streams and events. Every block remembers the stream it was allocated on;
//   RecordStream() adds streams that also used it. Free() records an event on
//   each of those streams. The freed block can be reused at once by a request on
//   its own stream (stream order already puts the new work after the old), but a
//   request on another stream reuses it only once every event has completed.
//   Events are polled (never waited on) at each Allocate; completed ones go back
//   to a pool of events for reuse.
// - Out of memory. When the backing refuses a segment (ResourceExhausted), or
//   the segment would take `reserved` past `capacity_bytes`, the allocator waits
//   for the events of its free blocks, gives every fully free segment back, and
//   retries once (counted in `num_alloc_retries`). If that fails too, Allocate
//   returns ResourceExhausted saying what was asked and what is held.
//
// Thread-safe: one mutex around the bookkeeping (and the backing calls it makes).
#ifndef ZEROSHARD_RUNTIME_CUDA_CACHING_ALLOCATOR_H_
#define ZEROSHARD_RUNTIME_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/device.h"

namespace zeroshard {

// ================================================================ backing

// The memory and events the cache sits on. Streams and events are opaque
// handles (cudaStream_t / cudaEvent_t on CUDA; anything in a test).
class CachingBacking {
 public:
  virtual ~CachingBacking() = default;
  // `bytes` of fresh memory. ResourceExhausted means "out of memory": the cache
  // then frees what it holds and retries. Other errors are passed on as they are.
  virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;
  virtual absl::Status Free(void* ptr) = 0;
  virtual absl::StatusOr<void*> CreateEvent() = 0;
  virtual absl::Status DestroyEvent(void* event) = 0;
  // Marks the current end of `stream`'s work.
  virtual absl::Status RecordEvent(void* event, void* stream) = 0;
  // True once the work recorded before the event has finished.
  virtual absl::StatusOr<bool> QueryEvent(void* event) = 0;
  // Blocks the host until the event has completed.
  virtual absl::Status SynchronizeEvent(void* event) = 0;
};

// CachingBacking over the CUDA runtime (runtime/cuda/device_api.h): device
// memory from cudaMalloc, or page-locked host memory from cudaHostAlloc
// (`Memory::kPinnedHost`: a cache of staging buffers for offload copies).
// In a CPU-only build every call fails with "built without CUDA".
class CudaBacking final : public CachingBacking {
 public:
  enum class Memory { kDevice, kPinnedHost };
  explicit CudaBacking(int device, Memory memory = Memory::kDevice)
      : device_(device), memory_(memory) {}

  absl::StatusOr<void*> Malloc(size_t bytes) override;
  absl::Status Free(void* ptr) override;
  absl::StatusOr<void*> CreateEvent() override;
  absl::Status DestroyEvent(void* event) override;
  absl::Status RecordEvent(void* event, void* stream) override;
  absl::StatusOr<bool> QueryEvent(void* event) override;
  absl::Status SynchronizeEvent(void* event) override;

 private:
  const int device_;
  const Memory memory_;
};

// ================================================================ allocator

struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  int64_t peak_allocated_bytes = 0;  // high-water mark since construction or ResetPeakStats()
  int64_t requested_bytes = 0;       // as asked by callers (before rounding)
  int64_t reserved_bytes = 0;        // held from the backing (allocated + cached)
  int64_t peak_reserved_bytes = 0;
  int64_t num_allocs = 0;            // successful Allocate() calls (non-zero sizes)
  int64_t num_frees = 0;
  int64_t num_backing_mallocs = 0;   // segments taken from the backing (cudaMalloc calls)
  int64_t num_backing_frees = 0;     // segments given back
  int64_t num_alloc_retries = 0;     // allocations that freed the cache and retried
  int64_t num_ooms = 0;              // allocations that failed after the retry
  int64_t num_splits = 0;            // blocks split to serve a smaller request
  int64_t num_merges = 0;            // free neighbours coalesced
  int64_t num_segments = 0;          // segments held now
  int64_t num_free_blocks = 0;       // cached blocks now
  int64_t num_pending_events = 0;    // recorded events not yet seen complete
  int64_t capacity_bytes = 0;        // limit on reserved_bytes; 0 = unlimited

  int64_t cached_bytes() const { return reserved_bytes - allocated_bytes; }
  std::string ToString() const;
};

struct CachingAllocatorOptions {
  std::string name = "caching";
  // The device whose memory the backing hands out (messages and the Allocator view).
  Device device = Device::Cuda(0);
  // Limit on the reserved bytes (what the backing holds for us); 0 = unlimited.
  int64_t capacity_bytes = 0;
  // Sizes (see Note [Caching allocator]); the defaults are PyTorch's.
  size_t round_bytes = 512;
  size_t small_request_bytes = size_t{1} << 20;
  size_t small_segment_bytes = size_t{2} << 20;
  size_t large_segment_bytes = size_t{20} << 20;
  size_t large_round_bytes = size_t{2} << 20;
};

// The size rules of Note [Caching allocator], for code that models the cache
// without running it (sim/cost_model.h): a request's rounded size (at least
// round_bytes, also for 0), whether it is served by the small pool, the
// segment a request that finds no cached block allocates, and whether a free
// block of `block` bytes serving it is split.
size_t CachingRoundSize(const CachingAllocatorOptions& o, size_t bytes);
bool CachingIsSmall(const CachingAllocatorOptions& o, size_t rounded);
size_t CachingSegmentSize(const CachingAllocatorOptions& o, size_t rounded);
bool CachingShouldSplit(const CachingAllocatorOptions& o, bool small_pool, size_t block, size_t rounded);

class CachingAllocator {
 public:
  using Options = CachingAllocatorOptions;

  // `backing` must outlive the allocator. Invalid options (sizes not powers of
  // two, a small segment that cannot hold a small request) abort: they are
  // constants of the caller's program, not input.
  CachingAllocator(CachingBacking* backing, Options options);
  // Waits for pending events and gives every segment back. Blocks still
  // allocated are reported on stderr, and their segments are kept (leaked)
  // rather than freed under a live user.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // `bytes` for work on `stream`; nullptr for zero bytes. Aligned to
  // `round_bytes` within a segment (and the backing's alignment, 256 on CUDA).
  absl::StatusOr<void*> Allocate(size_t bytes, void* stream);
  // Returns a block from Allocate to the cache, recording an event on every
  // stream that used it. Freeing an unknown pointer is InvalidArgument.
  absl::Status Free(void* ptr);
  // Notes that `stream` also uses the block at `ptr`, so that its reuse waits for it.
  absl::Status RecordStream(void* ptr, void* stream);
  // Waits for the events of free blocks and gives every fully free segment back.
  absl::Status EmptyCache();

  // The rounded size of the live block at `ptr` (0 if `ptr` is not one).
  size_t BlockSize(const void* ptr) const;
  CachingAllocatorStats stats() const;
  void ResetPeakStats();
  // Limit on the reserved bytes (0 = none). Lowering it below what is reserved
  // refuses later segments only; EmptyCache() gives back what it can.
  void SetCapacity(int64_t bytes);
  const Options& options() const { return options_; }
  // One line per segment: its blocks with offsets, sizes, state and streams.
  std::string DebugString() const;

 private:
  struct PendingEvent;
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Bin = std::set<Block*, BySizeThenAddress>;
  enum PoolId { kSmallPool = 0, kLargePool = 1 };
  struct Pool {
    std::vector<Bin> bins;
  };

  size_t RoundSize(size_t bytes) const;
  size_t SegmentSize(size_t rounded) const;
  int BinIndex(size_t size) const;
  bool ShouldSplit(const Block& block, size_t rounded) const;

  void InsertFree(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseFree(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* FindFree(PoolId pool, size_t rounded, void* stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands `block` (free, out of its bin) to a request of `rounded` bytes on `stream`.
  void Take(Block* block, size_t rounded, size_t requested, void* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges the free `block` (in no bin) with free neighbours that wait on the
  // same stream; returns the block that now holds it. Blocks merged away are
  // deleted and, when `gone` is given, added to it.
  Block* Coalesce(Block* block, absl::flat_hash_set<Block*>* gone = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the completed events of free blocks (polled, or with `wait` waited
  // for) and coalesces the blocks left with none.
  absl::Status ProcessEvents(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives every fully free segment back to the backing.
  absl::Status ReleaseFreeSegments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Block*> NewSegment(PoolId pool, size_t rounded) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unref(PendingEvent* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<void*> GetEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string OutOfMemoryMessage(size_t bytes, size_t segment, void* stream,
                                 const absl::Status& cause) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CachingBacking* const backing_;
  const Options options_;
  mutable absl::Mutex mu_;
  Pool pools_[2] ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const void*, Block*> live_ ABSL_GUARDED_BY(mu_);
  // Free blocks with events not yet seen complete.
  absl::flat_hash_set<Block*> pending_ ABSL_GUARDED_BY(mu_);
  // Segment heads: the first block of each segment (a merge keeps the lower
  // block, so a head lives as long as its segment).
  std::vector<Block*> segments_ ABSL_GUARDED_BY(mu_);
  std::vector<void*> idle_events_ ABSL_GUARDED_BY(mu_);
  CachingAllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

// ================================================================ Allocator view

// An Allocator (for Storage and Tensor) whose memory comes from a
// CachingAllocator for work on one stream: Deallocate returns the block to the
// cache, guarded by an event on that stream. Several views of one cache (one
// per stream: compute, all-gather, reduce-scatter) share its memory. The
// base-class figures (bytes_in_use, peak) count this view's allocations; the
// cache's stats() count all of them.
//
// Copies are synchronous: enqueued on the view's stream, then waited for. On a
// CPU device (a test's host-memory backing) they are plain memcpy.
//
// The op entries of kernels/ launch on the legacy default stream, which does
// not order itself with non-blocking streams: tensors handed to them should
// come from a view bound to the null stream (or a CudaAllocator), so that a
// freed block is not reused before their kernels are done with it.
class CachingStreamAllocator final : public Allocator {
 public:
  CachingStreamAllocator(CachingAllocator* cache, void* stream, std::string name = "");
  ~CachingStreamAllocator() override;

  CachingAllocator* cache() const { return cache_; }
  void* stream() const { return stream_; }
  // The cache's message for the last refused allocation (the base class only
  // knows that the backing refused).
  absl::Status last_failure() const;

  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const override;
  absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes) const override;
  absl::Status CopyWithinDevice(void* dst, const void* src, size_t bytes) const override;

 protected:
  void* RawAllocate(size_t bytes) override;
  void RawDeallocate(void* ptr, size_t bytes) override;

 private:
  CachingAllocator* const cache_;
  void* const stream_;
  mutable absl::Mutex mu_;
  absl::Status last_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_CUDA_CACHING_ALLOCATOR_H_
