// Allocator: owns the memory of one device and accounts for every byte.
//
//   CpuAllocator budget(CpuAllocator::Options{.capacity_bytes = 64 << 20});
//   absl::StatusOr<void*> p = budget.Allocate(1 << 20);  // 64-byte aligned
//   budget.stats().bytes_in_use;                          // 1 MiB
//   budget.Allocate(100 << 20);   // ResourceExhausted: "cpu allocator 'budget': out of
//                                 // memory: requested 100.00 MiB with 1.00 MiB in use of a
//                                 // capacity of 64.00 MiB"
//   budget.Deallocate(*p, 1 << 20);
//
// Accounting (current, peak, number of allocations, failures) is kept by the
// base class, so every backend reports the same figures. A capacity limit turns
// "would exceed the budget" into a ResourceExhausted Status: tests give the CPU
// a "device" budget and the sharding runtime reports a memory plan against it.
//
// Beside memory, an allocator knows how to move bytes between its device and
// the host (the backend interface is memory and copies, as ggml's is).
//
// Lifetime: an allocator must outlive every Storage allocated from it. There
// is one process-wide default CPU allocator (DefaultCpuAllocator()); everything
// else is created and owned by the caller, so two runtimes can live side by side.
#ifndef ZEROSHARD_RUNTIME_ALLOCATOR_H_
#define ZEROSHARD_RUNTIME_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/device.h"

namespace zeroshard {

struct AllocatorStats {
  int64_t bytes_in_use = 0;       // currently allocated
  int64_t peak_bytes_in_use = 0;  // high-water mark since construction or ResetPeak()
  int64_t num_allocs = 0;         // successful Allocate() calls
  int64_t num_frees = 0;          // Deallocate() calls
  int64_t num_failed_allocs = 0;  // refused by the capacity or by the backing memory
  int64_t capacity_bytes = 0;     // 0 = unlimited

  int64_t live_allocations() const { return num_allocs - num_frees; }
  std::string ToString() const;
};

// "1.50 MiB", "12 B", "3.00 GiB".
std::string FormatBytes(int64_t bytes);

class Allocator {
 public:
  // Alignment of every allocation: a cache line, and enough for 512-bit vectors.
  static constexpr size_t kAlignment = 64;

  Allocator(Device device, std::string name, int64_t capacity_bytes);
  virtual ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  Device device() const { return device_; }
  const std::string& name() const { return name_; }

  // Returns `bytes` of kAlignment-aligned memory, or ResourceExhausted when the
  // capacity (or the backing memory) cannot hold it. Zero bytes gives nullptr.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // `bytes` must be the size passed to Allocate.
  void Deallocate(void* ptr, size_t bytes);

  AllocatorStats stats() const;
  void ResetPeak();
  // 0 removes the limit. Lowering it below bytes_in_use refuses later allocations only.
  void SetCapacity(int64_t bytes);

  // Byte copies between this allocator's device and host memory. All are
  // synchronous: on return the destination holds the bytes.
  virtual absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const = 0;
  virtual absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes) const = 0;
  virtual absl::Status CopyWithinDevice(void* dst, const void* src, size_t bytes) const = 0;

 protected:
  // Backing memory; nullptr when it has none to give.
  virtual void* RawAllocate(size_t bytes) = 0;
  virtual void RawDeallocate(void* ptr, size_t bytes) = 0;

 private:
  const Device device_;
  const std::string name_;
  mutable absl::Mutex mu_;
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

// Host memory from aligned_alloc. Cheap enough to create one per rank or per test.
class CpuAllocator final : public Allocator {
 public:
  struct Options {
    std::string name = "cpu";
    int64_t capacity_bytes = 0;  // 0 = unlimited
  };

  CpuAllocator() : CpuAllocator(Options{}) {}
  explicit CpuAllocator(Options options);
  ~CpuAllocator() override;

  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const override;
  absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes) const override;
  absl::Status CopyWithinDevice(void* dst, const void* src, size_t bytes) const override;

 protected:
  void* RawAllocate(size_t bytes) override;
  void RawDeallocate(void* ptr, size_t bytes) override;
};

// The process-wide CPU allocator used when a caller passes no allocator. Never
// destroyed; unlimited capacity unless a caller sets one.
Allocator* DefaultCpuAllocator();

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_ALLOCATOR_H_
