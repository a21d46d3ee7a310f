#include "runtime/stream.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/device_api.h"
#include "runtime/status.h"

namespace zeroshard {

// ================================================================ Stream

absl::StatusOr<Stream> Stream::Create(Device device) {
  if (device.is_cpu()) return Cpu();
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
  if (handle_ != nullptr) {
    if (absl::Status s = cuda::CudaStreamDestroy(handle_); !s.ok()) {
      std::fprintf(stderr, "zeroshard: %s\n", s.ToString().c_str());
    }
    handle_ = nullptr;
  }
}

absl::Status Stream::Synchronize() const {
  if (device_.is_cpu()) return absl::OkStatus();
  return cuda::CudaStreamSynchronize(handle_);
}

// ================================================================ Event

absl::StatusOr<Event> Event::Create(Device device, bool enable_timing) {
  if (device.is_cpu()) return Event(device, nullptr);
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
  return cuda::CudaEventRecord(handle_, stream.native_handle());
}

absl::Status Event::Block(const Stream& stream) const {
  if (device_.is_cpu() || stream.device().is_cpu()) {
    // CPU work is complete when recorded; a CUDA stream waiting on a CPU event
    // has nothing to wait for, and a CPU stream waiting on a CUDA event waits
    // on the host.
    return device_.is_cpu() ? absl::OkStatus() : Synchronize();
  }
  return cuda::CudaStreamWaitEvent(stream.native_handle(), handle_);
}

absl::StatusOr<bool> Event::Query() const {
  if (device_.is_cpu()) return true;
  return cuda::CudaEventQuery(handle_);
}

absl::Status Event::Synchronize() const {
  if (device_.is_cpu()) return absl::OkStatus();
  return cuda::CudaEventSynchronize(handle_);
}

absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& end) {
  if (start.device_ != end.device_) {
    return absl::InvalidArgumentError("Event::ElapsedMs: events on different devices");
  }
  if (start.device_.is_cpu()) {
    return std::chrono::duration<float, std::milli>(end.host_time_ - start.host_time_).count();
  }
  return cuda::CudaEventElapsedMs(start.handle_, end.handle_);
}

}  // namespace zeroshard
