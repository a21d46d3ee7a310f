#include "zeroshard/runtime/cuda/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

// ================================================================ CudaBacking

absl::StatusOr<void*> CudaBacking::Malloc(size_t bytes) {
  return memory_ == Memory::kDevice ? cuda::CudaMalloc(device_, bytes)
                                    : cuda::CudaHostAllocPinned(bytes);
}

absl::Status CudaBacking::Free(void* ptr) {
  return memory_ == Memory::kDevice ? cuda::CudaFree(device_, ptr) : cuda::CudaHostFree(ptr);
}

absl::StatusOr<void*> CudaBacking::CreateEvent() {
  return cuda::CudaEventCreate(device_, /*enable_timing=*/false);
}
absl::Status CudaBacking::DestroyEvent(void* event) { return cuda::CudaEventDestroy(event); }
absl::Status CudaBacking::RecordEvent(void* event, void* stream) {
  return cuda::CudaEventRecord(event, stream);
}
absl::StatusOr<bool> CudaBacking::QueryEvent(void* event) { return cuda::CudaEventQuery(event); }
absl::Status CudaBacking::SynchronizeEvent(void* event) {
  return cuda::CudaEventSynchronize(event);
}

// ================================================================ stats

std::string CachingAllocatorStats::ToString() const {
  return absl::StrCat(
      "allocated ", FormatBytes(allocated_bytes), " (peak ", FormatBytes(peak_allocated_bytes),
      ", requested ", FormatBytes(requested_bytes), "), reserved ", FormatBytes(reserved_bytes),
      " (peak ", FormatBytes(peak_reserved_bytes), ") in ", num_segments, " segments, cached ",
      FormatBytes(cached_bytes()), " in ", num_free_blocks, " free blocks, ", num_allocs,
      " allocs / ", num_frees, " frees, backing mallocs ", num_backing_mallocs, " / frees ",
      num_backing_frees, ", retries ", num_alloc_retries, ", OOMs ", num_ooms, ", capacity ",
      capacity_bytes == 0 ? std::string("unlimited") : FormatBytes(capacity_bytes));
}

// ================================================================ blocks

// An event recorded on `stream` when a block was freed. Shared (refs) by the
// blocks a split or merge made of that block.
struct CachingAllocator::PendingEvent {
  void* event;
  void* stream;
  int refs;
};

// A piece of a segment: allocated, or free (in one bin of its pool).
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  size_t requested = 0;     // as asked, while allocated
  void* stream = nullptr;   // allocation stream, while allocated
  bool allocated = false;
  PoolId pool = kSmallPool;
  Block* prev = nullptr;    // neighbours in the segment, by address
  Block* next = nullptr;
  std::vector<PendingEvent*> events;  // free blocks: uses not yet seen finished
  std::vector<void*> extra_streams;   // allocated blocks: RecordStream()
};

bool CachingAllocator::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

namespace {

constexpr int kNumBins = 48;

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

size_t RoundUp(size_t v, size_t multiple) { return (v + multiple - 1) / multiple * multiple; }

std::string StreamName(void* stream) {
  return stream == nullptr ? std::string("default") : absl::StrFormat("%p", stream);
}

// Which stream a free block's reuse waits on: none (ready for any stream), one
// stream (ready at once on it, elsewhere after its events), or several.
struct WaitSet {
  enum Kind { kNone, kOne, kMixed } kind = kNone;
  void* stream = nullptr;
  bool operator==(const WaitSet& o) const {
    return kind == o.kind && (kind != kOne || stream == o.stream);
  }
};

template <typename Events>
WaitSet WaitSetOf(const Events& events) {
  WaitSet w;
  for (const auto* e : events) {
    if (w.kind == WaitSet::kNone) {
      w = {WaitSet::kOne, e->stream};
    } else if (e->stream != w.stream) {
      return {WaitSet::kMixed, nullptr};
    }
  }
  return w;
}

}  // namespace

// ================================================================ CachingAllocator

CachingAllocator::CachingAllocator(CachingBacking* backing, Options options)
    : backing_(backing), options_(std::move(options)) {
  ZS_CHECK(backing_ != nullptr, "CachingAllocator needs a backing");
  ZS_CHECK(IsPowerOfTwo(options_.round_bytes) && IsPowerOfTwo(options_.large_round_bytes),
           "round_bytes (", options_.round_bytes, ") and large_round_bytes (",
           options_.large_round_bytes, ") must be powers of two");
  ZS_CHECK(options_.small_request_bytes % options_.round_bytes == 0 &&
               options_.small_segment_bytes >= options_.small_request_bytes &&
               options_.small_segment_bytes % options_.round_bytes == 0 &&
               options_.large_segment_bytes % options_.large_round_bytes == 0 &&
               options_.large_round_bytes % options_.round_bytes == 0,
           "inconsistent caching allocator sizes");
  for (Pool& pool : pools_) pool.bins.resize(kNumBins);
  stats_.capacity_bytes = options_.capacity_bytes;
}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ProcessEvents(/*wait=*/true); !s.ok()) {
    std::fprintf(stderr, "zeroshard: caching allocator '%s': %s\n", options_.name.c_str(),
                 s.ToString().c_str());
  }
  if (!live_.empty()) {
    std::fprintf(stderr,
                 "zeroshard: caching allocator '%s' destroyed with %zu blocks (%s) still "
                 "allocated; their segments are not freed\n",
                 options_.name.c_str(), live_.size(),
                 FormatBytes(stats_.allocated_bytes).c_str());
  }
  for (Block* head : segments_) {
    const bool whole_free = !head->allocated && head->next == nullptr;
    if (whole_free) {
      if (absl::Status s = backing_->Free(head->ptr); !s.ok()) {
        std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
      }
    }
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      for (PendingEvent* e : b->events) Unref(e);
      delete b;
      b = next;
    }
  }
  for (void* event : idle_events_) {
    if (absl::Status s = backing_->DestroyEvent(event); !s.ok()) {
      std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
    }
  }
}

size_t CachingRoundSize(const CachingAllocatorOptions& o, size_t bytes) {
  return RoundUp(std::max<size_t>(bytes, 1), o.round_bytes);
}

bool CachingIsSmall(const CachingAllocatorOptions& o, size_t rounded) { return rounded <= o.small_request_bytes; }

size_t CachingSegmentSize(const CachingAllocatorOptions& o, size_t rounded) {
  if (CachingIsSmall(o, rounded)) return o.small_segment_bytes;
  if (rounded < o.large_segment_bytes / 2) return o.large_segment_bytes;
  return RoundUp(rounded, o.large_round_bytes);
}

bool CachingShouldSplit(const CachingAllocatorOptions& o, bool small_pool, size_t block, size_t rounded) {
  const size_t rest = block - rounded;
  return small_pool ? rest >= o.round_bytes : rest > o.small_request_bytes;
}

size_t CachingAllocator::RoundSize(size_t bytes) const { return CachingRoundSize(options_, bytes); }

size_t CachingAllocator::SegmentSize(size_t rounded) const { return CachingSegmentSize(options_, rounded); }

int CachingAllocator::BinIndex(size_t size) const {
  const size_t units = size / options_.round_bytes;  // >= 1
  const int bin = static_cast<int>(std::bit_width(units)) - 1;
  return std::clamp(bin, 0, kNumBins - 1);
}

bool CachingAllocator::ShouldSplit(const Block& block, size_t rounded) const {
  return CachingShouldSplit(options_, block.pool == kSmallPool, block.size, rounded);
}

void CachingAllocator::InsertFree(Block* block) {
  pools_[block->pool].bins[BinIndex(block->size)].insert(block);
  ++stats_.num_free_blocks;
  if (!block->events.empty()) pending_.insert(block);
}

void CachingAllocator::EraseFree(Block* block) {
  const size_t n = pools_[block->pool].bins[BinIndex(block->size)].erase(block);
  ZS_CHECK(n == 1, "free block missing from its bin");
  --stats_.num_free_blocks;
  pending_.erase(block);
}

CachingAllocator::Block* CachingAllocator::FindFree(PoolId pool, size_t rounded, void* stream) {
  std::vector<Bin>& bins = pools_[pool].bins;
  Block key;
  key.size = rounded;
  for (int b = BinIndex(rounded); b < kNumBins; ++b) {
    for (auto it = bins[b].lower_bound(&key); it != bins[b].end(); ++it) {
      Block* block = *it;
      // Usable on `stream` when every use not yet seen finished was on `stream`.
      const bool usable = std::all_of(block->events.begin(), block->events.end(),
                                      [&](const PendingEvent* e) { return e->stream == stream; });
      if (usable) return block;
    }
  }
  return nullptr;
}

void CachingAllocator::Take(Block* block, size_t rounded, size_t requested, void* stream) {
  if (ShouldSplit(*block, rounded)) {
    Block* rest = new Block;
    rest->ptr = block->ptr + rounded;
    rest->size = block->size - rounded;
    rest->pool = block->pool;
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = rounded;
    // The rest was part of the freed block: other streams still wait on its events.
    rest->events = block->events;
    for (PendingEvent* e : rest->events) ++e->refs;
    InsertFree(rest);
    ++stats_.num_splits;
  }
  // The new work is on `stream`, ordered after every use this block waits for.
  for (PendingEvent* e : block->events) Unref(e);
  block->events.clear();
  block->allocated = true;
  block->stream = stream;
  block->requested = requested;
  block->extra_streams.clear();
  live_[block->ptr] = block;

  stats_.allocated_bytes += static_cast<int64_t>(block->size);
  stats_.requested_bytes += static_cast<int64_t>(requested);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.num_allocs;
}

CachingAllocator::Block* CachingAllocator::Coalesce(Block* block,
                                                    absl::flat_hash_set<Block*>* gone) {
  auto mergeable = [&](Block* a, Block* b) {
    return b != nullptr && !b->allocated && WaitSetOf(a->events) == WaitSetOf(b->events);
  };
  // `lo` absorbs its next neighbour `hi` (adjacent, both free, out of any bin).
  auto absorb = [&](Block* lo, Block* hi) {
    lo->size += hi->size;
    lo->next = hi->next;
    if (hi->next != nullptr) hi->next->prev = lo;
    for (PendingEvent* e : hi->events) {
      if (std::find(lo->events.begin(), lo->events.end(), e) == lo->events.end()) {
        lo->events.push_back(e);
      } else {
        Unref(e);
      }
    }
    if (gone != nullptr) gone->insert(hi);
    delete hi;
    ++stats_.num_merges;
  };
  // Loops: when several neighbours become ready together (ProcessEvents), a
  // run of them merges in one call.
  while (mergeable(block, block->next)) {
    Block* next = block->next;
    EraseFree(next);
    absorb(block, next);
  }
  while (mergeable(block, block->prev)) {
    Block* prev = block->prev;
    EraseFree(prev);
    absorb(prev, block);
    block = prev;
  }
  return block;
}

absl::Status CachingAllocator::ProcessEvents(bool wait) {
  if (pending_.empty()) return absl::OkStatus();
  // Phase 1: settle every event once; no block changes shape.
  absl::flat_hash_map<PendingEvent*, bool> done;
  for (Block* block : pending_) {
    for (PendingEvent* e : block->events) {
      if (done.contains(e)) continue;
      if (wait) {
        ZS_RETURN_IF_ERROR(backing_->SynchronizeEvent(e->event));
        done[e] = true;
      } else {
        ZS_ASSIGN_OR_RETURN(done[e], backing_->QueryEvent(e->event));
      }
    }
  }
  // Phase 2: drop completed events; blocks left waiting on nothing may merge.
  std::vector<Block*> ready;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Block* block = *it;
    auto& ev = block->events;
    for (auto e = ev.begin(); e != ev.end();) {
      if (done[*e]) {
        Unref(*e);
        e = ev.erase(e);
      } else {
        ++e;
      }
    }
    if (ev.empty()) {
      ready.push_back(block);
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  absl::flat_hash_set<Block*> gone;
  for (Block* block : ready) {
    if (gone.contains(block)) continue;
    EraseFree(block);
    InsertFree(Coalesce(block, &gone));
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::ReleaseFreeSegments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* head = *it;
    if (head->allocated || head->next != nullptr || !head->events.empty()) {
      ++it;
      continue;
    }
    ZS_RETURN_IF_ERROR(backing_->Free(head->ptr));
    EraseFree(head);
    stats_.reserved_bytes -= static_cast<int64_t>(head->size);
    ++stats_.num_backing_frees;
    --stats_.num_segments;
    delete head;
    it = segments_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<CachingAllocator::Block*> CachingAllocator::NewSegment(PoolId pool,
                                                                      size_t rounded) {
  const size_t size = SegmentSize(rounded);
  const int64_t cap = stats_.capacity_bytes;
  if (cap > 0 && stats_.reserved_bytes + static_cast<int64_t>(size) > cap) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a new ", FormatBytes(static_cast<int64_t>(size)),
                     " segment would pass the capacity of ", FormatBytes(cap)));
  }
  ZS_ASSIGN_OR_RETURN(void* ptr, backing_->Malloc(size));
  Block* head = new Block;
  head->ptr = static_cast<char*>(ptr);
  head->size = size;
  head->pool = pool;
  segments_.push_back(head);
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  ++stats_.num_backing_mallocs;
  ++stats_.num_segments;
  return head;
}

std::string CachingAllocator::OutOfMemoryMessage(size_t bytes, size_t segment, void* stream,
                                                 const absl::Status& cause) const {
  return absl::StrCat(
      options_.device.ToString(), " caching allocator '", options_.name,
      "': out of memory: requested ", FormatBytes(static_cast<int64_t>(bytes)), " (a ",
      FormatBytes(static_cast<int64_t>(segment)), " segment) on stream ", StreamName(stream),
      " after freeing the cache and retrying; allocated ", FormatBytes(stats_.allocated_bytes),
      ", reserved ", FormatBytes(stats_.reserved_bytes), " (",
      FormatBytes(stats_.cached_bytes()), " cached in ", stats_.num_free_blocks,
      " free blocks), capacity ",
      stats_.capacity_bytes == 0 ? std::string("unlimited") : FormatBytes(stats_.capacity_bytes),
      ": ", cause.message());
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes, void* stream) {
  if (bytes == 0) return nullptr;
  absl::MutexLock lock(&mu_);
  ZS_RETURN_IF_ERROR(ProcessEvents(/*wait=*/false));
  const size_t rounded = RoundSize(bytes);
  const PoolId pool = CachingIsSmall(options_, rounded) ? kSmallPool : kLargePool;
  Block* block = FindFree(pool, rounded, stream);
  if (block != nullptr) {
    EraseFree(block);
  } else {
    absl::StatusOr<Block*> segment = NewSegment(pool, rounded);
    if (!segment.ok() && absl::IsResourceExhausted(segment.status())) {
      // Out of memory: wait for the cache's events, give back whole free
      // segments, then try the cache and the backing once more.
      ++stats_.num_alloc_retries;
      ZS_RETURN_IF_ERROR(ProcessEvents(/*wait=*/true));
      ZS_RETURN_IF_ERROR(ReleaseFreeSegments());
      block = FindFree(pool, rounded, stream);
      if (block != nullptr) {
        EraseFree(block);
      } else {
        segment = NewSegment(pool, rounded);
      }
    }
    if (block == nullptr) {
      if (!segment.ok()) {
        if (!absl::IsResourceExhausted(segment.status())) return segment.status();
        ++stats_.num_ooms;
        return absl::ResourceExhaustedError(
            OutOfMemoryMessage(bytes, SegmentSize(rounded), stream, segment.status()));
      }
      block = *segment;
    }
  }
  Take(block, rounded, bytes, stream);
  return static_cast<void*>(block->ptr);
}

absl::StatusOr<void*> CachingAllocator::GetEvent() {
  if (!idle_events_.empty()) {
    void* e = idle_events_.back();
    idle_events_.pop_back();
    return e;
  }
  return backing_->CreateEvent();
}

void CachingAllocator::Unref(PendingEvent* event) {
  if (--event->refs > 0) return;
  idle_events_.push_back(event->event);
  delete event;
}

absl::Status CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("caching allocator '%s': Free(%p): not a block it handed out (or freed "
                        "twice)",
                        options_.name, ptr));
  }
  Block* block = it->second;
  std::vector<void*> streams = {block->stream};
  for (void* s : block->extra_streams) {
    if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
  }
  // Record first: if that fails the block stays allocated (leaked, never unsafe).
  std::vector<PendingEvent*> events;
  for (void* s : streams) {
    absl::StatusOr<void*> event = GetEvent();
    absl::Status recorded = event.ok() ? backing_->RecordEvent(*event, s) : event.status();
    if (!recorded.ok()) {
      if (event.ok()) idle_events_.push_back(*event);
      for (PendingEvent* e : events) Unref(e);
      return recorded;
    }
    events.push_back(new PendingEvent{*event, s, 1});
  }
  live_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block->size);
  stats_.requested_bytes -= static_cast<int64_t>(block->requested);
  ++stats_.num_frees;
  block->allocated = false;
  block->stream = nullptr;
  block->requested = 0;
  block->extra_streams.clear();
  block->events = std::move(events);
  InsertFree(Coalesce(block));
  return absl::OkStatus();
}

absl::Status CachingAllocator::RecordStream(void* ptr, void* stream) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "caching allocator '%s': RecordStream(%p): not a live block", options_.name, ptr));
  }
  Block* block = it->second;
  if (stream != block->stream && std::find(block->extra_streams.begin(),
                                           block->extra_streams.end(),
                                           stream) == block->extra_streams.end()) {
    block->extra_streams.push_back(stream);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::EmptyCache() {
  absl::MutexLock lock(&mu_);
  ZS_RETURN_IF_ERROR(ProcessEvents(/*wait=*/true));
  return ReleaseFreeSegments();
}

size_t CachingAllocator::BlockSize(const void* ptr) const {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

CachingAllocatorStats CachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  CachingAllocatorStats s = stats_;
  absl::flat_hash_set<const PendingEvent*> events;
  for (const Block* block : pending_) events.insert(block->events.begin(), block->events.end());
  s.num_pending_events = static_cast<int64_t>(events.size());
  return s;
}

void CachingAllocator::ResetPeakStats() {
  absl::MutexLock lock(&mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CachingAllocator::SetCapacity(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  stats_.capacity_bytes = bytes < 0 ? 0 : bytes;
}

std::string CachingAllocator::DebugString() const {
  absl::MutexLock lock(&mu_);
  std::string out = absl::StrCat("caching allocator '", options_.name, "' on ",
                                 options_.device.ToString(), ": ", stats_.ToString(), "\n");
  for (const Block* head : segments_) {
    absl::StrAppend(&out, "  segment ", absl::StrFormat("%p", head->ptr), " (",
                    head->pool == kSmallPool ? "small" : "large", "):");
    for (const Block* b = head; b != nullptr; b = b->next) {
      absl::StrAppend(&out, " [+", b->ptr - head->ptr, ", ", FormatBytes(b->size), " ");
      if (b->allocated) {
        absl::StrAppend(&out, "allocated on ", StreamName(b->stream));
      } else if (b->events.empty()) {
        absl::StrAppend(&out, "free");
      } else {
        absl::StrAppend(&out, "free, waits on");
        for (const PendingEvent* e : b->events) absl::StrAppend(&out, " ", StreamName(e->stream));
      }
      absl::StrAppend(&out, "]");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

// ================================================================ CachingStreamAllocator

CachingStreamAllocator::CachingStreamAllocator(CachingAllocator* cache, void* stream,
                                               std::string name)
    : Allocator(cache->options().device,
                name.empty() ? absl::StrCat(cache->options().name, "@", StreamName(stream))
                             : std::move(name),
                /*capacity_bytes=*/0),
      cache_(cache),
      stream_(stream) {}

CachingStreamAllocator::~CachingStreamAllocator() = default;

absl::Status CachingStreamAllocator::last_failure() const {
  absl::MutexLock lock(&mu_);
  return last_failure_;
}

void* CachingStreamAllocator::RawAllocate(size_t bytes) {
  absl::StatusOr<void*> p = cache_->Allocate(bytes, stream_);
  if (!p.ok()) {
    absl::MutexLock lock(&mu_);
    last_failure_ = p.status();
    return nullptr;
  }
  return *p;
}

void CachingStreamAllocator::RawDeallocate(void* ptr, size_t /*bytes*/) {
  if (absl::Status s = cache_->Free(ptr); !s.ok()) {
    std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
  }
}

namespace {

// Note [A view's copies wait for the op stream]
// The op entries launch on the legacy default stream (kernels/cuda/op_util.h,
// kOpStream), and a view's stream is non-blocking: it does not wait for the
// default stream by itself. A copy on the view's stream (Tensor::ToVector, Item,
// FromVector through this allocator) must see what the ops before it wrote, and
// must not overwrite memory an op before it still reads, so the view's stream
// first waits for an event recorded on the default stream. Seen on an H200: a
// tensor filled by an op and read back at once through its view read zeros
// (caching_allocator_test, StressTwoStreamsOnAGpu); the simulator, where every
// launch completes before it returns, cannot show it. One event per thread and
// device, reused (an event's record replaces the last).
absl::Status WaitForOpStream(int device, void* stream) {
  thread_local std::map<int, void*> events;
  void*& event = events[device];
  if (event == nullptr) {
    ZS_ASSIGN_OR_RETURN(event, cuda::CudaEventCreate(device, /*enable_timing=*/false));
  }
  ZS_RETURN_IF_ERROR(cuda::CudaEventRecord(event, nullptr));  // the legacy default stream
  return cuda::CudaStreamWaitEvent(stream, event);
}

absl::Status CopyOnStream(Device device, void* stream, void* dst, const void* src, size_t bytes,
                          cuda::CopyKind kind) {
  if (bytes == 0) return absl::OkStatus();
  if (device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  if (stream != nullptr) ZS_RETURN_IF_ERROR(WaitForOpStream(device.index, stream));
  ZS_RETURN_IF_ERROR(cuda::CudaMemcpy(dst, src, bytes, kind, stream));
  if (stream != nullptr) ZS_RETURN_IF_ERROR(cuda::CudaStreamSynchronize(stream));
  return absl::OkStatus();
}

}  // namespace

absl::Status CachingStreamAllocator::CopyToHost(void* host_dst, const void* src,
                                                size_t bytes) const {
  return CopyOnStream(device(), stream_, host_dst, src, bytes, cuda::CopyKind::kDeviceToHost);
}

absl::Status CachingStreamAllocator::CopyFromHost(void* dst, const void* host_src,
                                                  size_t bytes) const {
  return CopyOnStream(device(), stream_, dst, host_src, bytes, cuda::CopyKind::kHostToDevice);
}

absl::Status CachingStreamAllocator::CopyWithinDevice(void* dst, const void* src,
                                                      size_t bytes) const {
  return CopyOnStream(device(), stream_, dst, src, bytes, cuda::CopyKind::kDeviceToDevice);
}

}  // namespace zeroshard
