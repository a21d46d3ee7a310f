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

// The host side's memory (Note [Virtual host]): exact byte counts as the CPU
// allocator keeps them, addresses from a bump pointer above 2^47, beyond
// user space on x86-64 and clear of the device's range, so nothing is
// reserved and a host read of the bytes faults at once. Copies through it
// are host kernels (reading its memory on the host costs a host pass).
class VirtualHostAllocator final : public Allocator {
 public:
  explicit VirtualHostAllocator(Device host)
      : Allocator(host, absl::StrCat(host.ToString(), " host memory"), /*capacity_bytes=*/0) {}

  absl::Status CopyToHost(void* host_dst, const void*, size_t bytes) const override {
    std::memset(host_dst, 0, bytes);  // a real host buffer (a scalar read): zeros, as on the device
    return Charge("HostRead", bytes);
  }
  absl::Status CopyFromHost(void*, const void*, size_t bytes) const override { return Charge("HostWrite", bytes); }
  absl::Status CopyWithinDevice(void*, const void*, size_t bytes) const override {
    return Charge("HostCopy", 2 * bytes);
  }

 protected:
  void* RawAllocate(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    void* p = reinterpret_cast<void*>(next_);
    next_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return p;
  }
  void RawDeallocate(void*, size_t) override {}

 private:
  absl::Status Charge(absl::string_view op, size_t bytes) const {
    return ChargeVirtual(device(), OpCost{.op = op, .bytes = static_cast<double>(bytes)});
  }
  absl::Mutex mu_;
  uintptr_t next_ ABSL_GUARDED_BY(mu_) = uintptr_t{1} << 47;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VirtualDevice>> VirtualDevice::Create(int index, Options options) {
  if (options.cost == nullptr) {
    return absl::InvalidArgumentError("VirtualDevice::Create: expected a cost model, got none");
  }
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("VirtualDevice::Create: index ", index, " < 0"));
  }
  if (options.host_index == index) {
    return absl::InvalidArgumentError(absl::StrCat("VirtualDevice::Create: host_index ", index,
                                                   " is the device's own index; expected another or -1"));
  }
  absl::MutexLock lock(&registry_mu);
  for (int i : {index, options.host_index}) {
    if (i >= 0 && Registry().contains(i)) {
      return absl::AlreadyExistsError(absl::StrCat("VirtualDevice::Create: virtual:", i, " already exists"));
    }
  }
  std::unique_ptr<VirtualDevice> d(new VirtualDevice(index, options));
  Registry().emplace(index, d.get());
  if (options.host_index >= 0) Registry().emplace(options.host_index, d.get());
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
  if (has_host()) {
    host_allocator_ = std::make_unique<VirtualHostAllocator>(host_device());
    host_stream_ = static_cast<int>(streams_.size());
    streams_.push_back(0);
    stream_names_.push_back("host");
  }
}

VirtualDevice::~VirtualDevice() {
  {
    absl::MutexLock lock(&registry_mu);
    for (int i : {index_, options_.host_index}) {
      auto it = Registry().find(i);
      if (it != Registry().end() && it->second == this) Registry().erase(it);
    }
  }
  host_allocator_.reset();
  allocator_.reset();
  cache_.reset();
}

Allocator* VirtualDevice::allocator() { return allocator_.get(); }
CachingAllocatorStats VirtualDevice::memory() const { return cache_->stats(); }
void VirtualDevice::ResetPeakMemory() {
  cache_->ResetPeakStats();
  allocator_->ResetPeak();
  if (host_allocator_ != nullptr) host_allocator_->ResetPeak();
}

Allocator* VirtualDevice::host_allocator() { return host_allocator_.get(); }

void VirtualDevice::HostRun(const OpCost& cost) {
  const double seconds = options_.cost->HostOpSeconds(cost);
  absl::MutexLock lock(&mu_);
  const double start = host_;
  host_ += seconds;
  // The track's clock follows the host's kernels (never past the host clock).
  streams_.at(host_stream_) = host_;
  AddSpan(host_stream_, cost.op, "host", start, host_, cost.flops, cost.bytes);
}

double VirtualDevice::SwapTransfer(bool write, int64_t bytes) {
  const double seconds = options_.cost->NvmeSeconds(write, bytes);
  absl::MutexLock lock(&mu_);
  if (nvme_stream_ < 0) {
    nvme_stream_ = static_cast<int>(streams_.size());
    streams_.push_back(host_);
    stream_names_.push_back("nvme");
  }
  double& clock = streams_.at(nvme_stream_);
  const double start = std::max(clock, host_);
  clock = start + seconds;
  AddSpan(nvme_stream_, write ? "NvmeWrite" : "NvmeRead", "nvme", start, clock, 0, static_cast<double>(bytes));
  return clock;
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
  const double busy = std::max(start, not_before);
  clock = busy + seconds;
  if (busy > start) AddSpan(stream, "wait for peers", "peers", start, busy, 0, 0);
  AddSpan(stream, name, category, busy, clock, 0, bytes);
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
  if (d->IsHostSide(device)) {
    d->HostRun(cost);
  } else {
    d->Launch(VirtualDevice::kCompute, cost);
  }
  return absl::OkStatus();
}

absl::Status ChargeVirtualCopy(Device device, int stream, int64_t bytes, bool async) {
  VirtualDevice* d = device.is_virtual() ? VirtualDevice::Find(device.index) : nullptr;
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "copy on ", device.ToString(), ": no virtual device with that index is alive"));
  }
  if (d->IsHostSide(device)) {  // host memory the host reads or writes itself
    d->HostRun(OpCost{.op = "HostCopy", .bytes = static_cast<double>(bytes)});
    return absl::OkStatus();
  }
  d->HostAdvance(d->cost().LaunchSeconds());
  const double end = d->Enqueue(stream, "HostCopy", "copy", d->cost().HostCopySeconds(bytes),
                                /*after=*/0, static_cast<double>(bytes));
  if (!async) d->HostWait(end);
  return absl::OkStatus();
}

bool IsHostMemory(Device device) {
  if (device.is_cpu()) return true;
  if (!device.is_virtual()) return false;
  const VirtualDevice* d = VirtualDevice::Find(device.index);
  return d != nullptr && d->IsHostSide(device);
}

bool IsHostSideOf(Device host, Device device) {
  if (!host.is_virtual() || !device.is_virtual()) return false;
  const VirtualDevice* d = VirtualDevice::Find(device.index);
  return d != nullptr && d->device() == device && d->IsHostSide(host);
}

absl::Status ChargeVirtualTransfer(Device dst, Device src, int64_t bytes) {
  if (!IsHostSideOf(dst, src) && !IsHostSideOf(src, dst)) {
    return absl::InvalidArgumentError(absl::StrCat("copy from ", src.ToString(), " to ", dst.ToString(),
                                                   ": expected a virtual device and its host side"));
  }
  const Device device = IsHostSideOf(dst, src) ? src : dst;
  return ChargeVirtualCopy(device, VirtualDevice::kCompute, bytes, /*async=*/false);
}

}  // namespace zeroshard
