// The caching allocator's bookkeeping on CPU, over a fake backing: host memory
// with an optional device size, and events that complete only when the test
// finishes their stream (or the allocator waits on them).
// Kept in one file (issue 19): one library's cases, most of them over the FakeBacking below.
#include "zeroshard/runtime/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasCudaDevice;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

void* const kStreamA = reinterpret_cast<void*>(0xA0);
void* const kStreamB = reinterpret_cast<void*>(0xB0);
void* const kStreamC = reinterpret_cast<void*>(0xC0);

// Host memory standing in for a device of `device_bytes` (0 = unlimited), and
// events whose completion the test controls.
class FakeBacking final : public CachingBacking {
 public:
  explicit FakeBacking(size_t device_bytes = 0) : device_bytes_(device_bytes) {}
  ~FakeBacking() override {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(memory_.empty()) << memory_.size() << " segments never freed";
    for (auto& [p, n] : memory_) std::free(p);
  }

  absl::StatusOr<void*> Malloc(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    ++mallocs;
    if (device_bytes_ != 0 && in_use_ + bytes > device_bytes_) {
      return absl::ResourceExhaustedError("fake device is full");
    }
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    memory_[p] = bytes;
    in_use_ += bytes;
    return p;
  }
  absl::Status Free(void* ptr) override {
    absl::MutexLock lock(&mu_);
    auto it = memory_.find(ptr);
    if (it == memory_.end()) return absl::InternalError("fake: free of unknown memory");
    in_use_ -= it->second;
    memory_.erase(it);
    std::free(ptr);
    ++frees;
    return absl::OkStatus();
  }
  absl::StatusOr<void*> CreateEvent() override {
    absl::MutexLock lock(&mu_);
    events_.push_back(Ev{});
    ++events_created;
    return reinterpret_cast<void*>(events_.size());  // 1-based ids
  }
  absl::Status DestroyEvent(void* event) override {
    absl::MutexLock lock(&mu_);
    Get(event).destroyed = true;
    ++events_destroyed;
    return absl::OkStatus();
  }
  absl::Status RecordEvent(void* event, void* stream) override {
    absl::MutexLock lock(&mu_);
    Ev& e = Get(event);
    EXPECT_FALSE(e.destroyed);
    e.stream = stream;
    e.done = false;
    ++records;
    return absl::OkStatus();
  }
  absl::StatusOr<bool> QueryEvent(void* event) override {
    absl::MutexLock lock(&mu_);
    return Get(event).done;
  }
  absl::Status SynchronizeEvent(void* event) override {
    absl::MutexLock lock(&mu_);
    Get(event).done = true;  // the host waited for it
    ++syncs;
    return absl::OkStatus();
  }

  // The device finishes all work enqueued so far on `stream` (or on every stream).
  void FinishStream(void* stream) {
    absl::MutexLock lock(&mu_);
    for (Ev& e : events_) {
      if (e.stream == stream) e.done = true;
    }
  }
  void FinishAll() {
    absl::MutexLock lock(&mu_);
    for (Ev& e : events_) e.done = true;
  }
  size_t in_use() const {
    absl::MutexLock lock(&mu_);
    return in_use_;
  }

  int mallocs = 0, frees = 0, records = 0, syncs = 0, events_created = 0, events_destroyed = 0;

 private:
  struct Ev {
    void* stream = nullptr;
    bool done = true;
    bool destroyed = false;
  };
  Ev& Get(void* event) { return events_.at(reinterpret_cast<uintptr_t>(event) - 1); }

  const size_t device_bytes_;
  mutable absl::Mutex mu_;
  std::map<void*, size_t> memory_;
  size_t in_use_ = 0;
  std::vector<Ev> events_;
};

CachingAllocatorOptions TestOptions() {
  return CachingAllocatorOptions{.name = "test", .device = Device::Cpu()};
}

char* Bytes(void* p) { return static_cast<char*>(p); }

// ---------------------------------------------------------------- sizes, split, merge

TEST(CachingAllocator, RoundsRequestsAndSplitsOneSmallSegment) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(1, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(1000, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* c, cache.Allocate(512, kStreamA));
  EXPECT_EQ(cache.BlockSize(a), 512u);
  EXPECT_EQ(cache.BlockSize(b), 1024u);
  EXPECT_EQ(cache.BlockSize(c), 512u);
  // One 2 MiB segment, carved front to back.
  EXPECT_EQ(Bytes(b), Bytes(a) + 512);
  EXPECT_EQ(Bytes(c), Bytes(a) + 1536);
  std::memset(a, 1, 512);  // the memory is real
  const CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.num_backing_mallocs, 1);
  EXPECT_EQ(backing.mallocs, 1);
  EXPECT_EQ(s.reserved_bytes, int64_t{2} << 20);
  EXPECT_EQ(s.allocated_bytes, 2048);
  EXPECT_EQ(s.requested_bytes, 1 + 1000 + 512);
  EXPECT_EQ(s.num_splits, 3);
  EXPECT_EQ(s.num_free_blocks, 1);  // the segment's tail
  EXPECT_EQ(s.num_allocs, 3);
  for (void* p : {a, b, c}) ZS_ASSERT_OK(cache.Free(p));
}

TEST(CachingAllocator, RequestSizesPickPoolsAndSegments) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* small, cache.Allocate(kMiB, kStreamA));       // small pool
  ZS_ASSERT_OK_AND_ASSIGN(void* mid, cache.Allocate(kMiB + 1, kStreamA));     // shared 20 MiB
  ZS_ASSERT_OK_AND_ASSIGN(void* mid2, cache.Allocate(3 * kMiB, kStreamA));    // same segment
  ZS_ASSERT_OK_AND_ASSIGN(void* big, cache.Allocate(17 * kMiB, kStreamA));    // own, 18 MiB
  EXPECT_EQ(cache.BlockSize(small), kMiB);
  EXPECT_EQ(cache.BlockSize(mid), kMiB + 512);
  EXPECT_EQ(Bytes(mid2), Bytes(mid) + kMiB + 512);
  // The 1 MiB left of the 18 MiB segment is too small to split off a
  // large-pool block (it would fit only small requests, which never use it).
  EXPECT_EQ(cache.BlockSize(big), 18 * kMiB);
  const CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.num_backing_mallocs, 3);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * kMiB + 20 * kMiB + 18 * kMiB));
  for (void* p : {small, mid, mid2, big}) ZS_ASSERT_OK(cache.Free(p));
}

TEST(CachingAllocator, LargePoolKeepsSmallSlackInTheBlock) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  // 11.5 MiB gets a 12 MiB segment; the 0.5 MiB rest is too small to split off
  // a large-pool block (it would only fit small requests, which never use it).
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(11 * kMiB + 512 * kKiB, kStreamA));
  EXPECT_EQ(cache.BlockSize(p), 12 * kMiB);
  EXPECT_EQ(cache.stats().num_splits, 0);
  EXPECT_EQ(cache.stats().allocated_bytes, static_cast<int64_t>(12 * kMiB));
  ZS_ASSERT_OK(cache.Free(p));
}

TEST(CachingAllocator, FreeCoalescesNeighboursBackIntoOneSegment) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(512, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(512, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* c, cache.Allocate(512, kStreamA));
  EXPECT_EQ(cache.stats().num_free_blocks, 1);
  ZS_ASSERT_OK(cache.Free(b));  // a hole between a and c
  EXPECT_EQ(cache.stats().num_free_blocks, 2);
  ZS_ASSERT_OK(cache.Free(a));  // merges with b
  EXPECT_EQ(cache.stats().num_free_blocks, 2);
  ZS_ASSERT_OK(cache.Free(c));  // merges with a+b; not yet with the never-used tail
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.num_free_blocks, 2);
  EXPECT_EQ(s.num_merges, 2);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * kMiB));
  // a+b+c waits on A's events and the tail on nothing: merged, the tail would
  // wait too. Once A has passed them, the next Allocate merges the segment
  // whole, and it serves one request again without a new backing call.
  backing.FinishStream(kStreamA);
  ZS_ASSERT_OK_AND_ASSIGN(void* whole, cache.Allocate(kMiB, kStreamB));
  EXPECT_EQ(whole, a);
  EXPECT_EQ(cache.stats().num_merges, 3);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 1);
  ZS_ASSERT_OK(cache.Free(whole));
  backing.FinishAll();
  ZS_ASSERT_OK(cache.EmptyCache());
  s = cache.stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.num_segments, 0);
  EXPECT_EQ(s.num_backing_frees, 1);
  EXPECT_EQ(backing.in_use(), 0u);
}

TEST(CachingAllocator, BestFitTakesTheSmallestHoleThatFits) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  // Holes of 4 KiB, 2 KiB and 8 KiB, kept apart by live separators.
  ZS_ASSERT_OK_AND_ASSIGN(void* h4, cache.Allocate(4 * kKiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* s1, cache.Allocate(512, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* h2, cache.Allocate(2 * kKiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* s2, cache.Allocate(512, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* h8, cache.Allocate(8 * kKiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* s3, cache.Allocate(512, kStreamA));
  for (void* p : {h4, h2, h8}) ZS_ASSERT_OK(cache.Free(p));
  EXPECT_EQ(cache.stats().num_free_blocks, 4);  // three holes and the tail

  ZS_ASSERT_OK_AND_ASSIGN(void* x, cache.Allocate(1500, kStreamA));  // 1.5 KiB: the 2 KiB hole
  EXPECT_EQ(x, h2);
  ZS_ASSERT_OK_AND_ASSIGN(void* y, cache.Allocate(3 * kKiB, kStreamA));  // the 4 KiB hole
  EXPECT_EQ(y, h4);
  ZS_ASSERT_OK_AND_ASSIGN(void* z, cache.Allocate(5 * kKiB, kStreamA));  // the 8 KiB hole
  EXPECT_EQ(z, h8);
  ZS_ASSERT_OK_AND_ASSIGN(void* w, cache.Allocate(9 * kKiB, kStreamA));  // only the tail fits
  EXPECT_EQ(Bytes(w), Bytes(s3) + 512);
  // Left over: 512 B of the 2 KiB hole, 1 KiB of the 4 KiB one, 3 KiB of the
  // 8 KiB one. A 1 KiB request fits the 1 KiB piece exactly.
  ZS_ASSERT_OK_AND_ASSIGN(void* v, cache.Allocate(kKiB, kStreamA));
  EXPECT_EQ(Bytes(v), Bytes(h4) + 3 * kKiB);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 1);
  for (void* p : {s1, s2, s3, x, y, z, w, v}) ZS_ASSERT_OK(cache.Free(p));
}

// ---------------------------------------------------------------- streams and events

TEST(CachingAllocator, SameStreamReusesAFreedBlockAtOnce) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK(cache.Free(p));
  EXPECT_EQ(backing.records, 1);  // an event on A at free time
  EXPECT_EQ(cache.stats().num_pending_events, 1);
  // Not complete, but stream order puts the new work on A after the old.
  ZS_ASSERT_OK_AND_ASSIGN(void* q, cache.Allocate(12 * kMiB, kStreamA));
  EXPECT_EQ(q, p);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 1);
  EXPECT_EQ(cache.stats().num_pending_events, 0);  // the reuse no longer needs it
  ZS_ASSERT_OK(cache.Free(q));
}

TEST(CachingAllocator, OtherStreamReusesOnlyAfterTheFreeEventCompletes) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK(cache.Free(p));

  // A's work on p may still be running: B gets fresh memory.
  ZS_ASSERT_OK_AND_ASSIGN(void* q, cache.Allocate(12 * kMiB, kStreamB));
  EXPECT_NE(q, p);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 2);
  ZS_ASSERT_OK(cache.Free(q));

  // Once A has passed the event, any stream may take p.
  backing.FinishStream(kStreamA);
  ZS_ASSERT_OK_AND_ASSIGN(void* r, cache.Allocate(12 * kMiB, kStreamC));
  EXPECT_EQ(r, p);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 2);
  ZS_ASSERT_OK(cache.Free(r));
}

TEST(CachingAllocator, SplitRemainderKeepsWaitingForTheFreeEvent) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(8 * kKiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* guard, cache.Allocate(512, kStreamA));  // keeps p's hole apart
  ZS_ASSERT_OK(cache.Free(p));
  // A takes the front half of p's hole at once; the back half still waits on A's event.
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(4 * kKiB, kStreamA));
  EXPECT_EQ(a, p);
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(4 * kKiB, kStreamB));
  EXPECT_NE(Bytes(b), Bytes(p) + 4 * kKiB);  // from the segment's tail instead
  EXPECT_EQ(Bytes(b), Bytes(guard) + 512);
  backing.FinishStream(kStreamA);
  ZS_ASSERT_OK_AND_ASSIGN(void* c, cache.Allocate(4 * kKiB, kStreamB));
  EXPECT_EQ(Bytes(c), Bytes(p) + 4 * kKiB);
  for (void* x : {a, b, c, guard}) ZS_ASSERT_OK(cache.Free(x));
}

TEST(CachingAllocator, RecordStreamMakesReuseWaitForEveryUser) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK(cache.RecordStream(p, kStreamB));  // e.g. an all-gather on B reads it
  ZS_ASSERT_OK(cache.RecordStream(p, kStreamB));  // recorded once
  ZS_ASSERT_OK(cache.Free(p));
  EXPECT_EQ(backing.records, 2);
  EXPECT_EQ(cache.stats().num_pending_events, 2);
  // Even A must wait now: B may still read p.
  ZS_ASSERT_OK_AND_ASSIGN(void* q, cache.Allocate(12 * kMiB, kStreamA));
  EXPECT_NE(q, p);
  backing.FinishStream(kStreamB);
  ZS_ASSERT_OK_AND_ASSIGN(void* r, cache.Allocate(12 * kMiB, kStreamA));
  EXPECT_EQ(r, p);  // only A's own event is left
  for (void* x : {q, r}) ZS_ASSERT_OK(cache.Free(x));
  EXPECT_THAT(cache.RecordStream(p, kStreamB),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a live block")));
}

TEST(CachingAllocator, BlocksWaitingOnDifferentStreamsMergeOnlyOnceReady) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(4 * kKiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(4 * kKiB, kStreamB));
  ZS_ASSERT_OK_AND_ASSIGN(void* guard, cache.Allocate(512, kStreamA));
  ZS_ASSERT_OK(cache.Free(a));
  ZS_ASSERT_OK(cache.Free(b));
  EXPECT_EQ(cache.stats().num_merges, 0);  // a waits on A, b on B
  backing.FinishAll();
  // The next Allocate polls the events and merges the two holes: 8 KiB fit at a.
  ZS_ASSERT_OK_AND_ASSIGN(void* c, cache.Allocate(8 * kKiB, kStreamC));
  EXPECT_EQ(c, a);
  EXPECT_EQ(cache.stats().num_merges, 1);
  EXPECT_EQ(cache.stats().num_pending_events, 0);
  for (void* x : {c, guard}) ZS_ASSERT_OK(cache.Free(x));
}

TEST(CachingAllocator, EventsAreReusedNotRecreated) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  for (int i = 0; i < 100; ++i) {
    ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(4 * kKiB, kStreamA));
    ZS_ASSERT_OK(cache.Free(p));
  }
  EXPECT_EQ(backing.records, 100);
  EXPECT_LE(backing.events_created, 2);
}

// ---------------------------------------------------------------- out of memory

TEST(CachingAllocator, OutOfMemoryFreesTheCacheAndRetries) {
  FakeBacking backing(/*device_bytes=*/40 * kMiB);
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* c, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK(cache.Free(a));
  ZS_ASSERT_OK(cache.Free(b));  // 24 MiB cached, their events not complete
  EXPECT_EQ(cache.stats().reserved_bytes, static_cast<int64_t>(36 * kMiB));

  // 26 MiB on B: the device has 4 MiB left; the cache waits for A's events,
  // gives the two free segments back and retries.
  ZS_ASSERT_OK_AND_ASSIGN(void* d, cache.Allocate(26 * kMiB, kStreamB));
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_backing_frees, 2);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(38 * kMiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(38 * kMiB));
  EXPECT_GE(backing.syncs, 2);

  // Nothing to free: a clear ResourceExhausted.
  EXPECT_THAT(cache.Allocate(64 * kMiB, kStreamB),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cpu caching allocator 'test': out of memory: requested 64.00 "
                                 "MiB (a 64.00 MiB segment) on stream 0xb0 after freeing the "
                                 "cache and retrying; allocated 38.00 MiB, reserved 38.00 MiB")));
  s = cache.stats();
  EXPECT_EQ(s.num_alloc_retries, 2);
  EXPECT_EQ(s.num_ooms, 1);
  for (void* x : {c, d}) ZS_ASSERT_OK(cache.Free(x));
}

TEST(CachingAllocator, RetryFindsABlockReleasedByWaiting) {
  // The only room is a freed block of another stream: waiting for its event
  // makes it usable without any new backing memory.
  FakeBacking backing(/*device_bytes=*/20 * kMiB);
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(6 * kMiB, kStreamA));   // in a 20 MiB segment
  ZS_ASSERT_OK_AND_ASSIGN(void* q, cache.Allocate(13 * kMiB, kStreamA));  // takes the rest
  EXPECT_EQ(cache.BlockSize(q), 14 * kMiB);
  ZS_ASSERT_OK(cache.Free(p));
  ZS_ASSERT_OK_AND_ASSIGN(void* r, cache.Allocate(6 * kMiB, kStreamB));
  EXPECT_EQ(r, p);
  EXPECT_EQ(cache.stats().num_alloc_retries, 1);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 1);
  for (void* x : {q, r}) ZS_ASSERT_OK(cache.Free(x));
}

TEST(CachingAllocator, CapacityLimitsReservedBytes) {
  FakeBacking backing;
  CachingAllocatorOptions options = TestOptions();
  options.capacity_bytes = 4 * kMiB;
  CachingAllocator cache(&backing, options);
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(kMiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(kMiB, kStreamA));  // same 2 MiB segment
  ZS_ASSERT_OK_AND_ASSIGN(void* c, cache.Allocate(kMiB, kStreamA));  // second segment
  EXPECT_EQ(cache.stats().reserved_bytes, static_cast<int64_t>(4 * kMiB));
  EXPECT_THAT(cache.Allocate(2 * kMiB, kStreamA),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("capacity 4.00 MiB: a new 20.00 MiB segment would pass the "
                                 "capacity of 4.00 MiB")));
  EXPECT_EQ(backing.mallocs, 2);  // the limit is checked before the backing is asked
  cache.SetCapacity(0);
  ZS_ASSERT_OK_AND_ASSIGN(void* d, cache.Allocate(2 * kMiB, kStreamA));
  for (void* x : {a, b, c, d}) ZS_ASSERT_OK(cache.Free(x));
}

TEST(CachingAllocator, BackingErrorsOtherThanOutOfMemoryPassThrough) {
  class Broken final : public CachingBacking {
   public:
    absl::StatusOr<void*> Malloc(size_t) override { return absl::InternalError("driver gone"); }
    absl::Status Free(void*) override { return absl::OkStatus(); }
    absl::StatusOr<void*> CreateEvent() override { return nullptr; }
    absl::Status DestroyEvent(void*) override { return absl::OkStatus(); }
    absl::Status RecordEvent(void*, void*) override { return absl::OkStatus(); }
    absl::StatusOr<bool> QueryEvent(void*) override { return true; }
    absl::Status SynchronizeEvent(void*) override { return absl::OkStatus(); }
  } broken;
  CachingAllocator cache(&broken, TestOptions());
  EXPECT_THAT(cache.Allocate(100, kStreamA),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("driver gone")));
  EXPECT_EQ(cache.stats().num_alloc_retries, 0);
}

// ---------------------------------------------------------------- stats and misuse

TEST(CachingAllocator, StatsTrackPeaksAndReset) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(100, kStreamA));
  ZS_ASSERT_OK(cache.Free(a));
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 512);
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(12 * kMiB + 512));
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(14 * kMiB));
  EXPECT_EQ(s.cached_bytes(), static_cast<int64_t>(14 * kMiB - 512));
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.num_frees, 1);
  EXPECT_THAT(s.ToString(), HasSubstr("allocated 512 B (peak 12.00 MiB"));
  cache.ResetPeakStats();
  EXPECT_EQ(cache.stats().peak_allocated_bytes, 512);
  EXPECT_EQ(cache.stats().peak_reserved_bytes, static_cast<int64_t>(14 * kMiB));
  EXPECT_THAT(cache.DebugString(), HasSubstr("allocated on 0xa0"));
  EXPECT_THAT(cache.DebugString(), HasSubstr("free, waits on 0xa0"));
  ZS_ASSERT_OK(cache.Free(b));
}

TEST(CachingAllocator, EmptyCacheKeepsSegmentsInUse) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(512, kStreamA));
  ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(12 * kMiB, kStreamA));
  ZS_ASSERT_OK(cache.Free(b));
  // EmptyCache waits for b's event itself.
  ZS_ASSERT_OK(cache.EmptyCache());
  const CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.num_segments, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(backing.in_use(), 2 * kMiB);
  ZS_ASSERT_OK(cache.Free(a));
}

TEST(CachingAllocator, ZeroBytesAndMisuse) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  ZS_ASSERT_OK_AND_ASSIGN(void* z, cache.Allocate(0, kStreamA));
  EXPECT_EQ(z, nullptr);
  ZS_EXPECT_OK(cache.Free(nullptr));
  EXPECT_EQ(cache.stats().num_allocs, 0);
  int on_stack = 0;
  EXPECT_THAT(cache.Free(&on_stack), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("not a block it handed out")));
  ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(64, kStreamA));
  ZS_ASSERT_OK(cache.Free(p));
  EXPECT_EQ(cache.Free(p).code(), absl::StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(cache.BlockSize(p), 0u);
}

TEST(CachingAllocator, DestructorGivesEverythingBack) {
  FakeBacking backing;
  {
    CachingAllocator cache(&backing, TestOptions());
    for (size_t n : {size_t{100}, 3 * kMiB, 30 * kMiB}) {
      ZS_ASSERT_OK_AND_ASSIGN(void* p, cache.Allocate(n, kStreamA));
      ZS_ASSERT_OK(cache.Free(p));
    }
  }
  EXPECT_EQ(backing.in_use(), 0u);
  EXPECT_EQ(backing.frees, backing.mallocs);
  EXPECT_EQ(backing.events_destroyed, backing.events_created);
}

// ---------------------------------------------------------------- random churn

// Random sizes, streams and event completions; checks that live blocks never
// overlap (each holds its own byte pattern), that the figures add up, and that
// everything comes back at the end.
TEST(CachingAllocator, RandomChurnKeepsBlocksDisjointAndFiguresConsistent) {
  FakeBacking backing(/*device_bytes=*/96 * kMiB);
  CachingAllocator cache(&backing, TestOptions());
  void* const streams[] = {kStreamA, kStreamB, kStreamC};
  std::mt19937 rng(7);
  struct Live {
    void* p;
    size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  auto check = [&](const Live& l) {
    const unsigned char* b = static_cast<const unsigned char*>(l.p);
    for (size_t i = 0; i < l.n; i += 97) ASSERT_EQ(b[i], l.tag);
    ASSERT_EQ(b[l.n - 1], l.tag);
  };
  for (int step = 0; step < 3000; ++step) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5 || live.empty()) {
      const size_t n = rng() % 4 == 0 ? 1 + rng() % (24 * kMiB) : 1 + rng() % (64 * kKiB);
      absl::StatusOr<void*> p = cache.Allocate(n, streams[rng() % 3]);
      if (!p.ok()) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
        continue;
      }
      const unsigned char tag = static_cast<unsigned char>(step);
      std::memset(*p, tag, n);
      live.push_back({*p, n, tag});
    } else if (action < 9) {
      const size_t i = rng() % live.size();
      check(live[i]);
      ZS_ASSERT_OK(cache.Free(live[i].p));
      live[i] = live.back();
      live.pop_back();
    } else {
      backing.FinishStream(streams[rng() % 3]);
    }
    if (step % 100 == 0) {
      int64_t sum = 0;
      for (const Live& l : live) {
        check(l);
        sum += static_cast<int64_t>(cache.BlockSize(l.p));
      }
      const CachingAllocatorStats s = cache.stats();
      ASSERT_EQ(s.allocated_bytes, sum);
      ASSERT_LE(s.allocated_bytes, s.reserved_bytes);
      ASSERT_EQ(static_cast<size_t>(s.reserved_bytes), backing.in_use());
    }
  }
  for (const Live& l : live) {
    check(l);
    ZS_ASSERT_OK(cache.Free(l.p));
  }
  ZS_ASSERT_OK(cache.EmptyCache());
  EXPECT_EQ(cache.stats().reserved_bytes, 0);
  EXPECT_EQ(cache.stats().num_free_blocks, 0);
  EXPECT_EQ(backing.in_use(), 0u);
}

TEST(CachingAllocator, ThreadsShareOneCache) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(0x100 * (t + 1)));
      for (int i = 0; i < 500; ++i) {
        const size_t n = 1 + rng() % (256 * kKiB);
        absl::StatusOr<void*> p = cache.Allocate(n, stream);
        ASSERT_TRUE(p.ok()) << p.status();
        std::memset(*p, t, n);
        const unsigned char* b = static_cast<const unsigned char*>(*p);
        ASSERT_EQ(b[n / 2], t);
        ASSERT_TRUE(cache.Free(*p).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(cache.stats().allocated_bytes, 0);
  EXPECT_EQ(cache.stats().num_allocs, 2000);
}

// ---------------------------------------------------------------- the Allocator view

TEST(CachingStreamAllocator, ServesTensorsAndReturnsBlocksToTheCache) {
  FakeBacking backing;
  CachingAllocator cache(&backing, TestOptions());
  CachingStreamAllocator compute(&cache, kStreamA, "compute");
  CachingStreamAllocator comm(&cache, kStreamB);
  EXPECT_EQ(comm.name(), "test@0xb0");
  {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::Full({1000}, 2.5, DType::kF32, &compute));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, x.Clone(&comm));
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> v, y.ToVector<float>());
    EXPECT_EQ(v[999], 2.5f);
    EXPECT_EQ(compute.stats().bytes_in_use, 4000);
    EXPECT_EQ(comm.stats().bytes_in_use, 4000);
    EXPECT_EQ(cache.stats().allocated_bytes, 2 * 4096);
  }
  EXPECT_EQ(compute.stats().bytes_in_use, 0);
  EXPECT_EQ(cache.stats().allocated_bytes, 0);
  EXPECT_EQ(cache.stats().num_frees, 2);
  EXPECT_EQ(cache.stats().num_backing_mallocs, 1);
}

TEST(CachingStreamAllocator, RefusalKeepsTheCachesMessage) {
  FakeBacking backing(/*device_bytes=*/kMiB);  // not even one small segment
  CachingAllocator cache(&backing, TestOptions());
  CachingStreamAllocator view(&cache, kStreamA);
  EXPECT_EQ(Tensor::Empty({16}, DType::kF32, &view).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(view.last_failure(), StatusIs(absl::StatusCode::kResourceExhausted,
                                            HasSubstr("fake device is full")));
  EXPECT_EQ(view.stats().num_failed_allocs, 1);
}

// ---------------------------------------------------------------- the CUDA backing

TEST(CudaBacking, WithoutADeviceAllocationFailsCleanly) {
  if (HasCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  CudaBacking backing(0);
  CachingAllocator cache(&backing, CachingAllocatorOptions{});
  absl::StatusOr<void*> p = cache.Allocate(1024, nullptr);
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
}

TEST(CudaBacking, DeviceAndPinnedCachesOnAGpu) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (CudaBacking::Memory memory :
       {CudaBacking::Memory::kDevice, CudaBacking::Memory::kPinnedHost}) {
    CudaBacking backing(0, memory);
    CachingAllocator cache(&backing, CachingAllocatorOptions{.name = "gpu-test"});
    ZS_ASSERT_OK_AND_ASSIGN(void* a, cache.Allocate(3 * kMiB, nullptr));
    ZS_ASSERT_OK(cache.Free(a));
    ZS_ASSERT_OK_AND_ASSIGN(void* b, cache.Allocate(3 * kMiB, nullptr));
    EXPECT_EQ(a, b);
    ZS_ASSERT_OK(cache.Free(b));
    ZS_ASSERT_OK(cache.EmptyCache());
    EXPECT_EQ(cache.stats().reserved_bytes, 0);
  }
}

// Allocator stress on a GPU: random sizes on two streams through two views,
// each tensor filled with its own value and checked before it is freed, then
// everything given back.
TEST(CudaBacking, StressTwoStreamsOnAGpu) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  ZS_ASSERT_OK_AND_ASSIGN(Stream s1, Stream::Create(Device::Cuda(0)));
  ZS_ASSERT_OK_AND_ASSIGN(Stream s2, Stream::Create(Device::Cuda(0)));
  CudaBacking backing(0);
  CachingAllocator cache(&backing, CachingAllocatorOptions{.name = "stress"});
  CachingStreamAllocator v1(&cache, s1.native_handle()), v2(&cache, s2.native_handle());
  std::mt19937 rng(3);
  std::vector<std::pair<Tensor, float>> live;
  for (int step = 0; step < 2000; ++step) {
    if (live.size() < 64 && (rng() % 3 != 0 || live.empty())) {
      const int64_t n = rng() % 8 == 0 ? 1 + rng() % (8 << 20) : 1 + rng() % 4096;
      const float value = static_cast<float>(step % 1000);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Full({n}, value, DType::kF32, rng() % 2 ? &v1 : &v2));
      live.push_back({t, value});
    } else {
      const size_t i = rng() % live.size();
      const Tensor& t = live[i].first;
      ZS_ASSERT_OK_AND_ASSIGN(Tensor last, t.Narrow(0, t.numel() - 1, 1));
      ZS_ASSERT_OK_AND_ASSIGN(double v, last.Item());
      ASSERT_EQ(v, live[i].second) << "step " << step;
      live[i] = live.back();
      live.pop_back();
    }
  }
  live.clear();
  ZS_ASSERT_OK(s1.Synchronize());
  ZS_ASSERT_OK(s2.Synchronize());
  ZS_ASSERT_OK(cache.EmptyCache());
  const CachingAllocatorStats stats = cache.stats();
  EXPECT_EQ(stats.allocated_bytes, 0);
  EXPECT_EQ(stats.reserved_bytes, 0);
  EXPECT_LT(stats.num_backing_mallocs, 200) << stats.ToString();  // the cache did its job
}

}  // namespace
}  // namespace zeroshard
