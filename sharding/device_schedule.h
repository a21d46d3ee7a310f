// DeviceSchedule: how a ShardedModel orders its work on a GPU - the compute
// stream, collectives ordered by events, the limit_all_gathers rate limiter,
// and offload copies on a copy stream - kept in one place apart from the
// unit bookkeeping of sharded_model.h (hooks.cc). On the CPU every call is the plain
// blocking form (a host communicator's Work waited on, a synchronous copy), so
// the sharded model runs the same code on both.
//
//   ZS_ASSIGN_OR_RETURN(auto schedule, DeviceSchedule::Create(Device::Cuda(0), /*limit=*/2));
//   ZS_RETURN_IF_ERROR(schedule->BeforeGather());                  // rate limiter
//   ZS_RETURN_IF_ERROR(schedule->Copy(mine, shard));                // cast or H2D on the copy stream
//   ZS_ASSIGN_OR_RETURN(auto work, comm.AllGatherAsync(mine, full, schedule->Collective()));
//   ZS_RETURN_IF_ERROR(schedule->Await(*work));                     // compute waits on the GPU
//   ... forward kernels on the compute stream read `full` ...
//   ZS_RETURN_IF_ERROR(full.storage()->Release());
//   ZS_RETURN_IF_ERROR(schedule->AfterFree());
//
// Note [GPU stream schedule]
// - compute: the device's legacy default stream (Stream::Default), where every
//   op entry launches (kernels/cuda/op_util.h kOpStream).
// - communication: the NCCL communicator's own stream. Every collective is
//   issued with Collective() = {.stream = &compute}: it starts after the
//   compute work enqueued so far (the shard cast into the gather buffer, a
//   unit's gradients) through an event, and Await(work) makes compute wait for
//   it on the device (Work::Block), never the host.
// - frees: a gathered or gradient buffer is released only after Await, so its
//   reuse is ordered after compute has passed the collective (CudaAllocator:
//   cudaFree synchronises; a caching allocator bound to the compute stream:
//   stream order; a new collective into reused memory waits for compute).
// - rate limiter (limit_all_gathers = n > 0, GPU only): every release of a
//   gathered buffer records a "freed" event on compute; before an all-gather is
//   issued while n frees are still pending on the GPU, the host waits for the
//   oldest. The CPU thus runs at most n units of gathers ahead of the GPU, which
//   bounds the memory held by buffers freed on the host but still in use on the
//   device (PyTorch FSDP's free-event queue).
// - copy stream: offload moves shards between host and device with CopyAsync
//   (host memory: the CPU's, or in the simulator a virtual device's host side,
//   runtime/virtual_device.h Note [Virtual host]) on a stream of their own, after compute's work so far (the destination may
//   be memory compute just freed). H2D: compute waits for the copy on the
//   device; D2H: the host waits, as the host reads the result next.
#ifndef ZEROSHARD_SHARDING_DEVICE_SCHEDULE_H_
#define ZEROSHARD_SHARDING_DEVICE_SCHEDULE_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/collectives/work.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// The limiter's bookkeeping, apart from the streams (tested on the CPU with
// CPU events, which complete when recorded).
class FreeEventQueue {
 public:
  // max_pending <= 0: no limit (Enqueue records nothing).
  explicit FreeEventQueue(int max_pending) : max_pending_(max_pending) {}

  // A buffer was released on `stream`: mark the point.
  absl::Status Enqueue(const Stream& stream);
  // Before an all-gather: while max_pending marks are pending, wait (host) for
  // the oldest and drop it; completed marks are dropped without waiting.
  absl::Status WaitIfNeeded();

  int pending() const { return static_cast<int>(events_.size()); }
  // How often WaitIfNeeded blocked on an incomplete event.
  int64_t waits() const { return waits_; }

 private:
  const int max_pending_;
  std::deque<Event> events_;
  int64_t waits_ = 0;
};

class DeviceSchedule {
 public:
  // For a model whose buffers live on `device`.
  static absl::StatusOr<std::unique_ptr<DeviceSchedule>> Create(Device device,
                                                                int limit_all_gathers);

  Device device() const { return compute_.device(); }
  bool on_gpu() const { return compute_.device().is_accelerator(); }
  const Stream& compute() const { return compute_; }

  // The options every collective of the model is issued with.
  CollectiveOptions Collective() const { return CollectiveOptions{.stream = &compute_}; }
  // Compute waits for `work`: on the device for a CUDA collective, on the host otherwise.
  absl::Status Await(Work& work);

  // The rate limiter (GPU only): see Note [GPU stream schedule].
  absl::Status BeforeGather() { return frees_.WaitIfNeeded(); }
  absl::Status AfterFree();
  const FreeEventQueue& frees() const { return frees_; }

  // dst <- src, converting dtype, between any devices: on one device (or
  // both on the host) a plain CopyFrom on compute; host <-> GPU through the
  // copy stream as the note says.
  absl::Status Copy(const Tensor& dst, const Tensor& src);

 private:
  DeviceSchedule(Stream compute, Stream copy, int limit, Event ready, Event done);

  Stream compute_;
  Stream copy_;  // GPU only (the host stream on the CPU)
  FreeEventQueue frees_;
  Event ready_;  // compute's work so far, for the copy stream
  Event done_;   // the copy, for compute or the host
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SHARDING_DEVICE_SCHEDULE_H_
