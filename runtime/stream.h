// Stream and Event: ordered work on a device, and markers in that order.
//
//   ZS_ASSIGN_OR_RETURN(Stream comm, Stream::Create(Device::Cuda(0)));
//   ZS_ASSIGN_OR_RETURN(Event gathered, Event::Create(comm.device()));
//   ... enqueue an all-gather on comm ...
//   ZS_RETURN_IF_ERROR(gathered.Record(comm));
//   ZS_RETURN_IF_ERROR(gathered.Block(compute));   // compute waits on the device, not the host
//
// On CUDA a Stream owns a cudaStream_t (non-blocking) and an Event a
// cudaEvent_t. On the CPU work is synchronous: a CPU stream is a token, an
// event completes when recorded, and it keeps the host time of its Record so
// ElapsedMs times CPU work the same way it times GPU work. Streams are passed
// explicitly; there is no hidden current stream.
#ifndef ZEROSHARD_RUNTIME_STREAM_H_
#define ZEROSHARD_RUNTIME_STREAM_H_

#include <chrono>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/device.h"

namespace zeroshard {

class Stream {
 public:
  // The synchronous host stream.
  static Stream Cpu() { return Stream(Device::Cpu(), nullptr); }
  // A new stream on `device` (for the CPU, the host stream).
  static absl::StatusOr<Stream> Create(Device device);
  // The device's legacy default stream, not owned: where the op entries launch
  // (kernels/cuda/op_util.h kOpStream), ordered with every blocking stream.
  // Events recorded on it mark the end of the op work issued so far. For the
  // CPU, the host stream.
  static Stream Default(Device device) { return Stream(device, nullptr); }

  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  Device device() const { return device_; }
  // cudaStream_t for CUDA streams (nullptr: the legacy default stream); nullptr
  // for the CPU stream.
  void* native_handle() const { return handle_; }
  // Returns when all work enqueued so far has finished.
  absl::Status Synchronize() const;

 private:
  Stream(Device device, void* handle) : device_(device), handle_(handle) {}
  Device device_;
  void* handle_;
};

class Event {
 public:
  static absl::StatusOr<Event> Create(Device device, bool enable_timing = false);

  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  Device device() const { return device_; }
  // Marks the current end of `stream`'s work.
  absl::Status Record(const Stream& stream);
  // Makes `stream` wait (on the device) until the recorded work has finished.
  absl::Status Block(const Stream& stream) const;
  // True once the recorded work has finished (an unrecorded event is complete).
  absl::StatusOr<bool> Query() const;
  absl::Status Synchronize() const;
  // Milliseconds between two recorded events (timing must be enabled on CUDA).
  static absl::StatusOr<float> ElapsedMs(const Event& start, const Event& end);

 private:
  Event(Device device, void* handle) : device_(device), handle_(handle) {}
  Device device_;
  void* handle_;
  std::chrono::steady_clock::time_point host_time_{};  // CPU events: time of Record
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_STREAM_H_
