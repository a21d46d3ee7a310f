// GpuTimeline: what a rank's GPU ran, as spans of the trace on the host clock
// (from CUDA events), and NVTX ranges of the same names for Nsight Systems.
//
//   GpuTimeline gpu(Device::Cuda(0), &trace, /*pid=*/rank, {.events = true, .nvtx = true});
//   GpuMark m = gpu.Begin(/*stream=*/nullptr, "MatMul");   // NVTX range + an event on the stream
//   ... launch the op's kernels on the stream ...
//   gpu.End(m, nullptr, "MatMul", "gpu op", TraceRow{rank, TraceRow::kCompute}.Gpu());
//   ...                                                     // the step's other work
//   ZS_RETURN_IF_ERROR(gpu.Resolve());   // end of the traced step: the spans land in `trace`
//   ZS_RETURN_IF_ERROR(gpu.Flush());     // after the last traced step: the rest
//
// Note [GPU spans]
//   On a CUDA device a host span only times the launch. While a step is
//   traced, each op, unit, wait and collective that has a host span also
//   records a start and an end event (cudaEventRecord) on the stream its work
//   runs on: ops, units and waits on the compute stream (the legacy default
//   stream, Note [GPU stream schedule] in sharding/device_schedule.h),
//   collectives on their NCCL communicator's stream. Nothing is read back
//   then: no host synchronisation inside the step.
//   Resolve(), called once at the end of a traced step, turns the events into
//   spans. It takes the pending spans whose end event has completed
//   (cudaEventQuery: no wait; the start precedes the end on its stream), then
//   records one reference event on the compute stream, reading the host clock
//   just before (t0), and waits for it (cudaEventSynchronize: the one host
//   synchronisation tracing adds, per traced step), reading the clock after
//   (t1). The device reached the reference no earlier than t0 (it was not yet
//   issued) and no later than t1, so giving it the host time (t0 + t1) / 2 is
//   off by at most (t1 - t0) / 2: the alignment error, a few microseconds
//   when the device is idle, as it is once the step's work is done. Every
//   completed event e then lies at (t0 + t1) / 2 - cudaEventElapsedTime(e,
//   ref): one reference serves every stream of the device, as the device's
//   streams share its timer. A span's args carry its bound "clock_error_us":
//   the alignment error, plus 0.5 us (the event timer's resolution, CUDA's
//   documentation) and the float rounding of the elapsed milliseconds. An
//   event that had not completed (a collective nothing waited for) stays
//   pending for the next Resolve or Flush.
//   So a GPU span starts no earlier than its host span minus its
//   clock_error_us (the device cannot run what was not yet launched), spans
//   of one stream keep the stream's order, and one GPU row per host row
//   (TraceRow::Gpu) holds them. Events come from a pool: a traced step
//   reuses the previous one's (cudaEventCreate only while the pool grows).
//   On the CPU simulator (tools/cuda/sim) an event's time is the host clock at
//   cudaEventRecord and work runs at its launch, so a GPU span lies inside
//   its host span, within the same bound.
//   NVTX: Begin opens an NVTX range of the span's name (runtime/cuda/nvtx.h)
//   and End closes it, on the host, around the launch: nsys shows it on the
//   thread and projects it onto the kernels launched inside.
#ifndef ZEROSHARD_RUNTIME_GPU_TIMELINE_H_
#define ZEROSHARD_RUNTIME_GPU_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/trace.h"

namespace zeroshard {

// The start of a span: its start event (pooled; nullptr: no GPU span) and its
// NVTX range (0: none).
struct GpuMark {
  void* event = nullptr;
  uint64_t range = 0;
};

struct GpuTimelineOptions {
  // GPU spans from CUDA events (on a CUDA device only).
  bool events = true;
  // NVTX ranges (builds with the CUDA toolkit only; runtime/cuda/nvtx.h).
  bool nvtx = true;
};

class GpuTimeline {
 public:
  // Spans go to process `pid` of `trace` (not owned; outlives this).
  GpuTimeline(Device device, TraceRecorder* trace, int pid, GpuTimelineOptions options);
  ~GpuTimeline();
  GpuTimeline(const GpuTimeline&) = delete;
  GpuTimeline& operator=(const GpuTimeline&) = delete;

  Device device() const { return device_; }
  int pid() const { return pid_; }
  TraceRecorder* trace() const { return trace_; }
  // Whether Begin records events (options.events on a CUDA device).
  bool records_events() const { return events_; }

  // Opens the NVTX range `name` and, when `event` and records_events(),
  // records a start event on `stream` (a cudaStream_t; nullptr: the legacy
  // default stream).
  GpuMark Begin(void* stream, const std::string& name, bool event = true);
  // Records the end event on `stream` (the one Begin used), closes the range,
  // and queues the span `name` for Resolve on `row` (a GPU row,
  // TraceRow::Gpu). `args` as in TraceRecorder::Span. Resets `mark`.
  void End(GpuMark& mark, void* stream, std::string name, std::string category, TraceRow row,
           std::string args = "");
  // Closes the range and returns the start event to the pool: no span.
  void Drop(GpuMark& mark);

  // Note [GPU spans]: adds the completed pending spans to the trace; one host
  // synchronisation (none when nothing is pending). The first CUDA error any
  // call met, if any.
  absl::Status Resolve();
  // Waits for every pending span, then resolves them (after the traced steps).
  absl::Status Flush();

  struct Stats {
    int64_t events_created = 0;  // cudaEventCreate calls (the pool's size)
    int64_t spans = 0;           // spans added to the trace
    int64_t pending = 0;         // spans waiting for their events
    int64_t resolves = 0;        // reference events waited for
    double max_clock_error_us = 0;
  };
  Stats stats() const;

 private:
  struct Pending {
    void* start = nullptr;
    void* end = nullptr;
    std::string name, category, args;
    TraceRow row;
  };
  void* Acquire() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Device device_;
  TraceRecorder* const trace_;
  const int pid_;
  const bool events_;
  const bool nvtx_;
  mutable absl::Mutex mu_;
  std::vector<void*> all_ ABSL_GUARDED_BY(mu_);   // every event created
  std::vector<void*> free_ ABSL_GUARDED_BY(mu_);  // the pool
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_GPU_TIMELINE_H_
