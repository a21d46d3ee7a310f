#include "zeroshard/runtime/allocator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const int64_t abs_bytes = bytes < 0 ? -bytes : bytes;
  if (abs_bytes < 1024) return absl::StrCat(bytes, " B");
  if (abs_bytes < (int64_t{1} << 20)) return absl::StrFormat("%.2f KiB", b / 1024.0);
  if (abs_bytes < (int64_t{1} << 30)) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  return absl::StrFormat("%.2f GiB", b / (1 << 30));
}

std::string AllocatorStats::ToString() const {
  return absl::StrCat("in use ", FormatBytes(bytes_in_use), ", peak ",
                      FormatBytes(peak_bytes_in_use), ", allocations ", num_allocs, " (",
                      live_allocations(), " live, ", num_failed_allocs, " failed), capacity ",
                      capacity_bytes == 0 ? std::string("unlimited") : FormatBytes(capacity_bytes));
}

Allocator::Allocator(Device device, std::string name, int64_t capacity_bytes)
    : device_(device), name_(std::move(name)) {
  stats_.capacity_bytes = capacity_bytes;
}

Allocator::~Allocator() {
  absl::MutexLock lock(&mu_);
  if (stats_.bytes_in_use != 0) {
    // Storages outliving their allocator would free into a dead object: report
    // it loudly (an invariant of the caller's, see the header).
    std::fprintf(stderr, "zeroshard: allocator '%s' destroyed with %s still in use\n",
                 name_.c_str(), FormatBytes(stats_.bytes_in_use).c_str());
  }
}

absl::StatusOr<void*> Allocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const int64_t n = static_cast<int64_t>(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (stats_.capacity_bytes > 0 && stats_.bytes_in_use + n > stats_.capacity_bytes) {
      ++stats_.num_failed_allocs;
      return absl::ResourceExhaustedError(absl::StrCat(
          device_.ToString(), " allocator '", name_, "': out of memory: requested ",
          FormatBytes(n), " with ", FormatBytes(stats_.bytes_in_use), " in use of a capacity of ",
          FormatBytes(stats_.capacity_bytes), " (peak ", FormatBytes(stats_.peak_bytes_in_use),
          ")"));
    }
    // Reserve before the backing call so concurrent callers cannot both pass.
    stats_.bytes_in_use += n;
  }
  void* p = RawAllocate(bytes);
  absl::MutexLock lock(&mu_);
  if (p == nullptr) {
    stats_.bytes_in_use -= n;
    ++stats_.num_failed_allocs;
    return absl::ResourceExhaustedError(absl::StrCat(
        device_.ToString(), " allocator '", name_, "': the backing memory refused ",
        FormatBytes(n), " with ", FormatBytes(stats_.bytes_in_use), " in use"));
  }
  ++stats_.num_allocs;
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) {
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  return p;
}

void Allocator::Deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  RawDeallocate(ptr, bytes);
  absl::MutexLock lock(&mu_);
  stats_.bytes_in_use -= static_cast<int64_t>(bytes);
  ++stats_.num_frees;
}

AllocatorStats Allocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Allocator::ResetPeak() {
  absl::MutexLock lock(&mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void Allocator::SetCapacity(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  stats_.capacity_bytes = bytes < 0 ? 0 : bytes;
}

// ---------------------------------------------------------------- CpuAllocator

CpuAllocator::CpuAllocator(Options options)
    : Allocator(Device::Cpu(), std::move(options.name), options.capacity_bytes) {}

CpuAllocator::~CpuAllocator() = default;

void* CpuAllocator::RawAllocate(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

void CpuAllocator::RawDeallocate(void* ptr, size_t /*bytes*/) { std::free(ptr); }

absl::Status CpuAllocator::CopyToHost(void* host_dst, const void* src, size_t bytes) const {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuAllocator::CopyFromHost(void* dst, const void* host_src, size_t bytes) const {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status CpuAllocator::CopyWithinDevice(void* dst, const void* src, size_t bytes) const {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

Allocator* DefaultCpuAllocator() {
  static Allocator* const allocator = new CpuAllocator(CpuAllocator::Options{.name = "default"});
  return allocator;
}

}  // namespace zeroshard
