#include "zeroshard/sharding/device_schedule.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/cuda/async_copy.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

// ================================================================ FreeEventQueue

absl::Status FreeEventQueue::Enqueue(const Stream& stream) {
  if (max_pending_ <= 0) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(Event e, Event::Create(stream.device()));
  ZS_RETURN_IF_ERROR(e.Record(stream));
  events_.push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status FreeEventQueue::WaitIfNeeded() {
  while (!events_.empty()) {  // frees the GPU has already done
    ZS_ASSIGN_OR_RETURN(const bool done, events_.front().Query());
    if (!done) break;
    events_.pop_front();
  }
  if (max_pending_ > 0 && static_cast<int>(events_.size()) >= max_pending_) {
    ++waits_;
    ZS_RETURN_IF_ERROR(events_.front().Synchronize());
    events_.pop_front();
  }
  return absl::OkStatus();
}

// ================================================================ DeviceSchedule

DeviceSchedule::DeviceSchedule(Stream compute, Stream copy, int limit, Event ready, Event done)
    : compute_(std::move(compute)),
      copy_(std::move(copy)),
      frees_(limit),
      ready_(std::move(ready)),
      done_(std::move(done)) {}

absl::StatusOr<std::unique_ptr<DeviceSchedule>> DeviceSchedule::Create(Device device,
                                                                       int limit_all_gathers) {
  const bool gpu = device.is_accelerator();  // CUDA, or a virtual device running its schedule
  Stream copy = Stream::Cpu();
  if (gpu) {
    ZS_ASSIGN_OR_RETURN(copy, Stream::Create(device));
  }
  ZS_ASSIGN_OR_RETURN(Event ready, Event::Create(device));
  ZS_ASSIGN_OR_RETURN(Event done, Event::Create(device));
  return std::unique_ptr<DeviceSchedule>(new DeviceSchedule(Stream::Default(device), std::move(copy),
                                                            gpu ? limit_all_gathers : 0,
                                                            std::move(ready), std::move(done)));
}

absl::Status DeviceSchedule::Await(Work& work) { return work.Block(compute_); }

absl::Status DeviceSchedule::AfterFree() { return frees_.Enqueue(compute_); }

absl::Status DeviceSchedule::Copy(const Tensor& dst, const Tensor& src) {
  const Device to = dst.device(), from = src.device();
  if (to == from || !on_gpu()) return dst.CopyFrom(src);
  const bool direct = dst.dtype() == src.dtype() && dst.shape() == src.shape() &&
                      dst.is_contiguous() && src.is_contiguous();
  // Host memory: the CPU's, or the simulator's virtual host (Note [Virtual host]).
  if (IsHostMemory(from) && to == device()) {
    if (!direct) {
      // Move the host's bytes as they are, then convert / lay out on the device.
      if (dst.allocator() == nullptr) return dst.CopyFrom(src);
      ZS_ASSIGN_OR_RETURN(Tensor staged, Tensor::Empty(src.shape(), src.dtype(), dst.allocator()));
      ZS_ASSIGN_OR_RETURN(Tensor packed, src.Contiguous());
      ZS_RETURN_IF_ERROR(Copy(staged, packed));
      return dst.CopyFrom(staged);  // on compute, after the copy (compute waited)
    }
    ZS_RETURN_IF_ERROR(ready_.Record(compute_));  // dst may be memory compute just freed
    ZS_RETURN_IF_ERROR(ready_.Block(copy_));
    ZS_RETURN_IF_ERROR(CopyAsync(dst, src, copy_));
    ZS_RETURN_IF_ERROR(done_.Record(copy_));
    return done_.Block(compute_);
  }
  if (from == device() && IsHostMemory(to)) {
    if (!direct) return dst.CopyFrom(src);  // synchronous, on the default stream
    ZS_RETURN_IF_ERROR(ready_.Record(compute_));  // src is complete on compute
    ZS_RETURN_IF_ERROR(ready_.Block(copy_));
    ZS_RETURN_IF_ERROR(CopyAsync(dst, src, copy_));
    ZS_RETURN_IF_ERROR(done_.Record(copy_));
    return done_.Synchronize();  // the host reads dst next
  }
  return dst.CopyFrom(src);  // another GPU: through the host
}

}  // namespace zeroshard
