#include "zeroshard/runtime/virtual_device.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Mutex registry_mu(absl::kConstInit);

absl::flat_hash_map<int, VirtualDevice*>& Registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* devices = new absl::flat_hash_map<int, VirtualDevice*>();
  return *devices;
}

}  // namespace

// Address ranges for the caching allocator: a bump pointer in a part of the
// address space no mapping uses (above 2^46), so a host read of a virtual
// tensor faults at once instead of reading someone's memory. Events complete
// at once: every virtual tensor lives on the compute stream, whose order
// already puts a reuse after the old work.
class VirtualDevice::Backing final : public CachingBacking {
 public:
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    void* p = reinterpret_cast<void*>(next_);
    next_ += (bytes + kPage - 1) / kPage * kPage + kPage;  // a guard page between segments
    return p;
  }
  absl::Status Free(void*) override { return absl::OkStatus(); }
  absl::StatusOr<void*> CreateEvent() override { return reinterpret_cast<void*>(++events_); }
  absl::Status DestroyEvent(void*) override { return absl::OkStatus(); }
  absl::Status RecordEvent(void*, void*) override { return absl::OkStatus(); }
  absl::StatusOr<bool> QueryEvent(void*) override { return true; }
  absl::Status SynchronizeEvent(void*) override { return absl::OkStatus(); }

 private:
  static constexpr uintptr_t kPage = 4096;
  absl::Mutex mu_;
  uintptr_t next_ ABSL_GUARDED_BY(mu_) = uintptr_t{1} << 46;
  std::atomic<uintptr_t> events_{0};
};

namespace {

// Tensors' view of the cache. Host reads give zeros; every transfer is charged.
class VirtualAllocator final : public Allocator {
 public:
  VirtualAllocator(Device device, CachingAllocator* cache)
      : Allocator(device, absl::StrCat(device.ToString(), " memory"), /*capacity_bytes=*/0),
        cache_(cache) {}

  absl::Status CopyToHost(void* host_dst, const void*, size_t bytes) const override {
    std::memset(host_dst, 0, bytes);
    return ChargeVirtualCopy(device(), VirtualDevice::kCompute, static_cast<int64_t>(bytes),
                             /*async=*/false);
  }
  absl::Status CopyFromHost(void*, const void*, size_t bytes) const override {
    return ChargeVirtualCopy(device(), VirtualDevice::kCompute, static_cast<int64_t>(bytes),
                             /*async=*/false);
  }
  absl::Status CopyWithinDevice(void*, const void*, size_t bytes) const override {
    return ChargeVirtual(device(), OpCost{.op = "Copy", .bytes = 2.0 * static_cast<double>(bytes)});
  }

 protected:
  void* RawAllocate(size_t bytes) override {
    absl::StatusOr<void*> p = cache_->Allocate(bytes, /*stream=*/nullptr);
    return p.ok() ? *p : nullptr;
  }
  void RawDeallocate(void* ptr, size_t) override { cache_->Free(ptr).IgnoreError(); }

 private:
  CachingAllocator* const cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VirtualDevice>> VirtualDevice::Create(int index, Options options) {
  if (options.cost == nullptr) {
    return absl::InvalidArgumentError("VirtualDevice::Create: expected a cost model, got none");
  }
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("VirtualDevice::Create: index ", index, " < 0"));
  }
  std::unique_ptr<VirtualDevice> d(new VirtualDevice(index, options));
  absl::MutexLock lock(&registry_mu);
  auto [it, inserted] = Registry().emplace(index, d.get());
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("VirtualDevice::Create: virtual:", index, " already exists"));
  }
  return d;
}

VirtualDevice* VirtualDevice::Find(int index) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(index);
  return it == Registry().end() ? nullptr : it->second;
}

VirtualDevice::VirtualDevice(int index, Options options)
    : index_(index), options_(options), backing_(std::make_unique<Backing>()) {
  CachingAllocatorOptions cache_options = options.allocator;
  cache_options.name = absl::StrCat("virtual:", index);
  cache_options.device = Device::Virtual(index);
  cache_options.capacity_bytes = options.capacity_bytes;
  cache_ = std::make_unique<CachingAllocator>(backing_.get(), cache_options);
  allocator_ = std::make_unique<VirtualAllocator>(Device::Virtual(index), cache_.get());
  streams_.push_back(0);
  stream_names_.push_back("compute");
}

VirtualDevice::~VirtualDevice() {
  {
    absl::MutexLock lock(&registry_mu);
    auto it = Registry().find(index_);
    if (it != Registry().end() && it->second == this) Registry().erase(it);
  }
  allocator_.reset();
  cache_.reset();
}

Allocator* VirtualDevice::allocator() { return allocator_.get(); }
CachingAllocatorStats VirtualDevice::memory() const { return cache_->stats(); }
void VirtualDevice::ResetPeakMemory() {
  cache_->ResetPeakStats();
  allocator_->ResetPeak();
}

int VirtualDevice::NewStream(std::string name) {
  absl::MutexLock lock(&mu_);
  streams_.push_back(host_);
  stream_names_.push_back(std::move(name));
  return static_cast<int>(streams_.size()) - 1;
}

int VirtualDevice::num_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

std::string VirtualDevice::stream_name(int stream) const {
  absl::MutexLock lock(&mu_);
  return stream_names_.at(stream);
}

double VirtualDevice::host_time() const {
  absl::MutexLock lock(&mu_);
  return host_;
}

double VirtualDevice::stream_time(int stream) const {
  absl::MutexLock lock(&mu_);
  return streams_.at(stream);
}

double VirtualDevice::Now() const {
  absl::MutexLock lock(&mu_);
  double t = host_;
  for (double s : streams_) t = std::max(t, s);
  return t;
}

void VirtualDevice::Launch(int stream, const OpCost& cost) {
  const double launch = options_.cost->LaunchSeconds();
  const double seconds = options_.cost->OpSeconds(cost);
  absl::MutexLock lock(&mu_);
  host_ += launch;
  double& clock = streams_.at(stream);
  const double start = std::max(clock, host_);
  clock = start + seconds;
  if (options_.synchronous) host_ = std::max(host_, clock);
  AddSpan(stream, cost.op, "compute", start, clock, cost.flops, cost.bytes, cost.gemm_batch > 0);
}

double VirtualDevice::Enqueue(int stream, absl::string_view name, absl::string_view category,
                              double seconds, double after, double bytes, double not_before) {
  absl::MutexLock lock(&mu_);
  double& clock = streams_.at(stream);
  const double start = std::max({clock, host_, after});
  clock = std::max(start, not_before) + seconds;
  AddSpan(stream, name, category, start, clock, 0, bytes);
  return clock;
}

void VirtualDevice::StreamWait(int stream, double time) {
  absl::MutexLock lock(&mu_);
  double& clock = streams_.at(stream);
  clock = std::max(clock, time);
  if (options_.synchronous && stream == kCompute) host_ = std::max(host_, clock);
}

void VirtualDevice::HostWait(double time) {
  absl::MutexLock lock(&mu_);
  host_ = std::max(host_, time);
}

void VirtualDevice::HostAdvance(double seconds) {
  absl::MutexLock lock(&mu_);
  host_ += seconds;
}

std::vector<VirtualSpan> VirtualDevice::spans() const {
  absl::MutexLock lock(&mu_);
  return spans_;
}

void VirtualDevice::ClearSpans() {
  absl::MutexLock lock(&mu_);
  spans_.clear();
}

void VirtualDevice::Settle() {
  absl::MutexLock lock(&mu_);
  double t = host_;
  for (double s : streams_) t = std::max(t, s);
  host_ = t;
  for (double& s : streams_) s = t;
  spans_.clear();
}

void VirtualDevice::AddSpan(int stream, absl::string_view name, absl::string_view category,
                            double start, double end, double flops, double bytes, bool gemm) {
  if (!options_.record_spans) return;
  spans_.push_back(VirtualSpan{.stream = stream, .name = name, .category = category,
                               .start = start, .end = end, .flops = flops, .bytes = bytes, .gemm = gemm});
}

absl::Status ChargeVirtual(Device device, const OpCost& cost) {
  VirtualDevice* d = device.is_virtual() ? VirtualDevice::Find(device.index) : nullptr;
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        cost.op, " on ", device.ToString(), ": no virtual device with that index is alive"));
  }
  d->Launch(VirtualDevice::kCompute, cost);
  return absl::OkStatus();
}

absl::Status ChargeVirtualCopy(Device device, int stream, int64_t bytes, bool async) {
  VirtualDevice* d = device.is_virtual() ? VirtualDevice::Find(device.index) : nullptr;
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "copy on ", device.ToString(), ": no virtual device with that index is alive"));
  }
  d->HostAdvance(d->cost().LaunchSeconds());
  const double end = d->Enqueue(stream, "HostCopy", "copy", d->cost().HostCopySeconds(bytes),
                                /*after=*/0, static_cast<double>(bytes));
  if (!async) d->HostWait(end);
  return absl::OkStatus();
}

}  // namespace zeroshard
