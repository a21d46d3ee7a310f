// TraceRecorder: a Chrome trace (JSON "traceEvents", opens in Perfetto or
// chrome://tracing) of spans from any number of threads, one process per rank.
//
//   TraceRecorder trace;
//   const TraceRow compute{.pid = rank, .tid = TraceRow::kCompute};
//   trace.NameProcess(rank, absl::StrCat("rank ", rank));
//   {
//     ScopedSpan span(&trace, "forward transformer.h.0", "compute", compute);
//     ...
//   }
//   trace.AddSpan("all-gather transformer.h.1", "comm", {rank, 2}, start_us, end_us,
//                 R"("op": "AllGather", "seq": 12)");
//   ZS_RETURN_IF_ERROR(trace.WriteJson("trace.json"));
//
// Times are microseconds since the recorder was created. Thread-safe; a null
// recorder pointer turns every call into nothing, so instrumented code pays
// only a branch when tracing is off. docs/tracing.md describes the layout
// (Note [Trace layout]) and how ranks of several processes are merged.
//
// Note [Trace layout]
//   A process (pid) per rank, named "rank <r>"; its rows (tid):
//   - kCompute (0): the step ("step", category "step"), each unit's forward
//     and backward ("compute"), each backward op ("op", nested inside its
//     unit's backward), and the time the rank blocked on a collective ("wait").
//     Compute spans nest and enclose the waits inside them: busy time is
//     compute minus wait (tools/trace_summary).
//   - kIssued (1): each collective the sharding runtime issued, from issue to
//     the moment it observed completion ("issued").
//   - kFirstStream (2) and up: one row per communicator (world, shard group,
//     replica group, a communication hook's groups): each collective from the
//     backend's own start to its end ("comm"; collectives/communicator.h).
//   A "comm" span and the "issued" span of the same collective share its
//   name ("all-gather <unit>"), and the comm span lies inside it.
//   - kGpuOffset + t: on a CUDA device, the GPU twin of host row t: "gpu
//     compute" (1000) holds what the compute row's spans ran on the device,
//     "gpu comm <communicator>" (1000 + its row) each collective as the
//     communication stream ran it, all on the host clock (Note [GPU spans] in
//     runtime/gpu_timeline.h).
#ifndef ZEROSHARD_RUNTIME_TRACE_H_
#define ZEROSHARD_RUNTIME_TRACE_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

// One row of the trace: a process (a rank) and a thread row within it
// (Note [Trace layout]).
struct TraceRow {
  static constexpr int kCompute = 0;
  static constexpr int kIssued = 1;
  static constexpr int kFirstStream = 2;
  // The GPU twin of a row: its tid plus this (Note [GPU spans] in runtime/gpu_timeline.h).
  static constexpr int kGpuOffset = 1000;
  int pid = 0;
  int tid = 0;
  TraceRow Gpu() const { return TraceRow{pid, tid + kGpuOffset}; }
  bool operator==(const TraceRow&) const = default;
};

class TraceRecorder {
 public:
  struct Span {
    std::string name, category;
    TraceRow row;
    double start_us = 0, dur_us = 0;
    // Members of the event's "args" object as JSON text ("\"seq\": 3"); "" none.
    std::string args;
  };

  TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}
  // A recorder that keeps no spans (AddSpan does nothing; names and other
  // data are kept): instrumented code takes its traced path for its NVTX
  // ranges (ZEROSHARD_NVTX=1 without --trace) with no memory growing over the run.
  struct DiscardSpans {};
  explicit TraceRecorder(DiscardSpans) : TraceRecorder() { keep_spans_ = false; }
  bool keeps_spans() const { return keep_spans_; }

  double NowUs() const {
    if (clock_) return clock_();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  // Times from `now_us` instead of the host's steady clock (the simulator
  // records the sharding hooks' spans on a virtual device's compute-stream
  // clock). Set before anything is recorded.
  void set_clock(std::function<double()> now_us) { clock_ = std::move(now_us); }
  // A complete event on `row` from start_us to end_us; `args` as in Span.
  void AddSpan(std::string name, std::string category, TraceRow row, double start_us, double end_us,
               std::string args = "");
  // Names a process ("rank 0") or a row ("compute"); the first name given wins.
  void NameProcess(int pid, std::string name);
  void NameRow(TraceRow row, std::string name);
  // A top-level "otherData" member of the written trace (e.g. each rank's
  // clock offset); `json_value` is JSON text. Replaces an earlier value.
  void SetOtherData(std::string key, std::string json_value);
  size_t size() const;
  // Sum of the durations of spans of `category` in process `pid` (-1: every
  // process).
  double TotalUs(const std::string& category, int pid = -1) const;
  std::vector<Span> spans() const;
  absl::Status WriteJson(const std::string& path) const;

  // Every span and name, as bytes for another process (Note [Merged traces]
  // in collectives/trace_merge.h), with `shift_us` added to every time.
  std::string Serialize(double shift_us = 0) const;
  // Adds what Serialize wrote. DataLoss naming the offset on malformed bytes
  // (nothing is added then).
  absl::Status Merge(absl::string_view serialized);

 private:
  const std::chrono::steady_clock::time_point origin_;
  bool keep_spans_ = true;
  std::function<double()> clock_;
  mutable absl::Mutex mu_;
  std::vector<Span> spans_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> process_names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<TraceRow, std::string>> row_names_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> other_data_ ABSL_GUARDED_BY(mu_);
};

// Records [construction, destruction) as one span; does nothing for a null recorder.
class ScopedSpan {
 public:
  ScopedSpan(TraceRecorder* trace, std::string name, std::string category, TraceRow row)
      : trace_(trace), name_(std::move(name)), category_(std::move(category)), row_(row),
        start_(trace ? trace->NowUs() : 0) {}
  ~ScopedSpan() {
    if (trace_ != nullptr) trace_->AddSpan(std::move(name_), std::move(category_), row_, start_, trace_->NowUs());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  TraceRecorder* trace_;
  std::string name_, category_;
  TraceRow row_;
  double start_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_TRACE_H_
