#include "zeroshard/runtime/stream.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

// Virtual devices (runtime/virtual_device.h): a stream's handle is its index
// on the device (nullptr: the compute stream), an event's a VirtualEvent.
namespace {

struct VirtualEvent {
  double time = 0;  // the recorded stream's clock; 0 (complete) until recorded
};

absl::StatusOr<VirtualDevice*> FindVirtual(Device device) {
  VirtualDevice* d = VirtualDevice::Find(device.index);
  if (d == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.ToString(), ": no virtual device with that index is alive"));
  }
  return d;
}

}  // namespace

// ================================================================ Stream

absl::StatusOr<Stream> Stream::Create(Device device) {
  if (device.is_cpu()) return Cpu();
  if (device.is_virtual()) {
    ZS_ASSIGN_OR_RETURN(VirtualDevice * d, FindVirtual(device));
    const int index = d->NewStream(absl::StrCat("stream ", d->num_streams()));
    return Stream(device, reinterpret_cast<void*>(static_cast<intptr_t>(index)));
  }
  ZS_ASSIGN_OR_RETURN(void* handle, cuda::CudaStreamCreate(device.index));
  return Stream(device, handle);
}

Stream::Stream(Stream&& other) noexcept : device_(other.device_), handle_(other.handle_) {
  other.handle_ = nullptr;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    this->~Stream();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (handle_ != nullptr && !device_.is_virtual()) {
    if (absl::Status s = cuda::CudaStreamDestroy(handle_); !s.ok()) {
      std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
    }
    handle_ = nullptr;
  }
}

absl::Status Stream::Synchronize() const {
  if (device_.is_cpu()) return absl::OkStatus();
  if (device_.is_virtual()) {
    ZS_ASSIGN_OR_RETURN(VirtualDevice * d, FindVirtual(device_));
    d->HostWait(d->stream_time(VirtualStreamIndex(native_handle())));
    return absl::OkStatus();
  }
  return cuda::CudaStreamSynchronize(handle_);
}

// ================================================================ Event

absl::StatusOr<Event> Event::Create(Device device, bool enable_timing) {
  if (device.is_cpu()) return Event(device, nullptr);
  if (device.is_virtual()) {
    ZS_RETURN_IF_ERROR(FindVirtual(device).status());
    return Event(device, new VirtualEvent());
  }
  ZS_ASSIGN_OR_RETURN(void* handle, cuda::CudaEventCreate(device.index, enable_timing));
  return Event(device, handle);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)),
      host_time_(other.host_time_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    this->~Event();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    host_time_ = other.host_time_;
  }
  return *this;
}

Event::~Event() {
  if (handle_ != nullptr && device_.is_virtual()) {
    delete static_cast<VirtualEvent*>(handle_);
    handle_ = nullptr;
  }
  if (handle_ != nullptr) {
    if (absl::Status s = cuda::CudaEventDestroy(handle_); !s.ok()) {
      std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
    }
    handle_ = nullptr;
  }
}

absl::Status Event::Record(const Stream& stream) {
  if (stream.device() != device_) {
    return absl::InvalidArgumentError(absl::StrCat("Event::Record: event on ", device_.ToString(),
                                                   ", stream on ", stream.device().ToString()));
  }
  if (device_.is_cpu()) {
    host_time_ = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }
  if (device_.is_virtual()) {
    ZS_ASSIGN_OR_RETURN(VirtualDevice * d, FindVirtual(device_));
    static_cast<VirtualEvent*>(handle_)->time = d->stream_time(VirtualStreamIndex(stream.native_handle()));
    return absl::OkStatus();
  }
  return cuda::CudaEventRecord(handle_, stream.native_handle());
}

absl::Status Event::Block(const Stream& stream) const {
  if (device_.is_cpu() || stream.device().is_cpu()) {
    // CPU work is complete when recorded; a CUDA stream waiting on a CPU event
    // has nothing to wait for, and a CPU stream waiting on a CUDA event waits
    // on the host.
    return device_.is_cpu() ? absl::OkStatus() : Synchronize();
  }
  if (device_.is_virtual()) {
    ZS_ASSIGN_OR_RETURN(VirtualDevice * d, FindVirtual(device_));
    d->StreamWait(VirtualStreamIndex(stream.native_handle()), static_cast<VirtualEvent*>(handle_)->time);
    return absl::OkStatus();
  }
  return cuda::CudaStreamWaitEvent(stream.native_handle(), handle_);
}

absl::StatusOr<bool> Event::Query() const {
  if (device_.is_cpu()) return true;
  if (device_.is_virtual()) {
    ZS_ASSIGN_OR_RETURN(VirtualDevice * d, FindVirtual(device_));
    return static_cast<VirtualEvent*>(handle_)->time <= d->host_time();
  }
  return cuda::CudaEventQuery(handle_);
}

absl::Status Event::Synchronize() const {
  if (device_.is_cpu()) return absl::OkStatus();
  if (device_.is_virtual()) {
    ZS_ASSIGN_OR_RETURN(VirtualDevice * d, FindVirtual(device_));
    d->HostWait(static_cast<VirtualEvent*>(handle_)->time);
    return absl::OkStatus();
  }
  return cuda::CudaEventSynchronize(handle_);
}

absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& end) {
  if (start.device_ != end.device_) {
    return absl::InvalidArgumentError("Event::ElapsedMs: events on different devices");
  }
  if (start.device_.is_cpu()) {
    return std::chrono::duration<float, std::milli>(end.host_time_ - start.host_time_).count();
  }
  if (start.device_.is_virtual()) {
    return static_cast<float>(1e3 * (static_cast<VirtualEvent*>(end.handle_)->time -
                                     static_cast<VirtualEvent*>(start.handle_)->time));
  }
  return cuda::CudaEventElapsedMs(start.handle_, end.handle_);
}

}  // namespace zeroshard
