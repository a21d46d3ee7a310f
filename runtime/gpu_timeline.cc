#include "zeroshard/runtime/gpu_timeline.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/nvtx.h"

namespace zeroshard {

namespace {

// cudaEventElapsedTime's resolution ("around 0.5 microseconds", the CUDA
// runtime API reference).
constexpr double kTimerResolutionUs = 0.5;
// A float's rounding, relative (half an ulp: 2^-24).
constexpr double kFloatRounding = 1.0 / 16777216;

}  // namespace

GpuTimeline::GpuTimeline(Device device, TraceRecorder* trace, int pid, GpuTimelineOptions options)
    : device_(device),
      trace_(trace),
      pid_(pid),
      events_(options.events && device.is_cuda() && trace != nullptr),
      nvtx_(options.nvtx) {}

GpuTimeline::~GpuTimeline() {
  absl::MutexLock lock(&mu_);
  for (void* e : all_) (void)cuda::CudaEventDestroy(e);
}

void GpuTimeline::Fail(const absl::Status& s) {
  if (error_.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat("GPU trace of ", device_.ToString(), ": ", s.message()));
  }
}

void* GpuTimeline::Acquire() {
  if (!free_.empty()) {
    void* e = free_.back();
    free_.pop_back();
    return e;
  }
  absl::StatusOr<void*> e = cuda::CudaEventCreate(device_.index, /*enable_timing=*/true);
  if (!e.ok()) {
    Fail(e.status());
    return nullptr;
  }
  all_.push_back(*e);
  ++stats_.events_created;
  return *e;
}

GpuMark GpuTimeline::Begin(void* stream, const std::string& name, bool event) {
  GpuMark mark;
  if (nvtx_) mark.range = nvtx::RangeStart(name.c_str());
  if (!event || !events_) return mark;
  absl::MutexLock lock(&mu_);
  mark.event = Acquire();
  if (mark.event == nullptr) return mark;
  if (absl::Status s = cuda::CudaEventRecord(mark.event, stream); !s.ok()) {
    Fail(s);
    free_.push_back(mark.event);
    mark.event = nullptr;
  }
  return mark;
}

void GpuTimeline::End(GpuMark& mark, void* stream, std::string name, std::string category, TraceRow row,
                      std::string args) {
  if (mark.event != nullptr) {
    absl::MutexLock lock(&mu_);
    void* end = Acquire();
    absl::Status s = end == nullptr ? absl::OkStatus() : cuda::CudaEventRecord(end, stream);
    if (end == nullptr || !s.ok()) {
      if (!s.ok()) Fail(s);
      free_.push_back(mark.event);
      if (end != nullptr) free_.push_back(end);
    } else {
      pending_.push_back(Pending{.start = mark.event,
                                 .end = end,
                                 .name = std::move(name),
                                 .category = std::move(category),
                                 .args = std::move(args),
                                 .row = row});
    }
    mark.event = nullptr;
  }
  nvtx::RangeEnd(mark.range);
  mark.range = 0;
}

void GpuTimeline::Drop(GpuMark& mark) {
  if (mark.event != nullptr) {
    absl::MutexLock lock(&mu_);
    free_.push_back(mark.event);
    mark.event = nullptr;
  }
  nvtx::RangeEnd(mark.range);
  mark.range = 0;
}

absl::Status GpuTimeline::Resolve() {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  // 1. The spans whose end has completed, asked before the reference is
  //    recorded: their events precede it on the device's timer.
  std::vector<Pending> done, waiting;
  for (Pending& p : pending_) {
    absl::StatusOr<bool> complete = cuda::CudaEventQuery(p.end);
    if (!complete.ok()) {
      Fail(complete.status());
      return error_;
    }
    (*complete ? done : waiting).push_back(std::move(p));
  }
  pending_ = std::move(waiting);
  stats_.pending = static_cast<int64_t>(pending_.size());
  if (done.empty()) return absl::OkStatus();
  // 2. The reference: issued after t0, reached by t1. On this device's
  //    compute stream (the legacy default stream of the current device).
  void* ref = Acquire();
  if (ref == nullptr) return error_;
  if (absl::Status d = cuda::CudaSetDevice(device_.index); !d.ok()) {
    free_.push_back(ref);
    Fail(d);
    return error_;
  }
  const double t0 = trace_->NowUs();
  absl::Status s = cuda::CudaEventRecord(ref, /*stream=*/nullptr);
  if (s.ok()) s = cuda::CudaEventSynchronize(ref);
  const double t1 = trace_->NowUs();
  if (!s.ok()) {
    Fail(s);
    return error_;
  }
  ++stats_.resolves;
  const double ref_us = (t0 + t1) / 2, align_us = (t1 - t0) / 2;
  // 3. Each span from its events' distance to the reference.
  for (Pending& p : done) {
    absl::StatusOr<float> before_ref = cuda::CudaEventElapsedMs(p.start, ref);
    absl::StatusOr<float> length = cuda::CudaEventElapsedMs(p.start, p.end);
    if (!before_ref.ok() || !length.ok()) {
      Fail(before_ref.ok() ? length.status() : before_ref.status());
      return error_;
    }
    const double start_us = ref_us - 1000.0 * *before_ref;
    const double dur_us = std::max(0.0, 1000.0 * *length);
    const double error_us =
        align_us + kTimerResolutionUs + 1000.0 * (std::fabs(*before_ref) + std::fabs(*length)) * kFloatRounding;
    stats_.max_clock_error_us = std::max(stats_.max_clock_error_us, error_us);
    std::string args = absl::StrFormat("\"clock_error_us\": %.3f", error_us);
    if (!p.args.empty()) args = absl::StrCat(p.args, ", ", args);
    trace_->AddSpan(std::move(p.name), std::move(p.category), p.row, start_us, start_us + dur_us, std::move(args));
    ++stats_.spans;
    free_.push_back(p.start);
    free_.push_back(p.end);
  }
  free_.push_back(ref);
  return absl::OkStatus();
}

absl::Status GpuTimeline::Flush() {
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    for (const Pending& p : pending_) {
      if (absl::Status s = cuda::CudaEventSynchronize(p.end); !s.ok()) {
        Fail(s);
        return error_;
      }
    }
  }
  return Resolve();
}

GpuTimeline::Stats GpuTimeline::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.pending = static_cast<int64_t>(pending_.size());
  return s;
}

}  // namespace zeroshard
