// TraceRecorder: a Chrome trace (JSON "traceEvents", opens in Perfetto or
// chrome://tracing) of spans from any number of threads.
//
//   TraceRecorder trace;
//   {
//     ScopedSpan span(&trace, "forward transformer.h.0", "compute", /*tid=*/rank);
//     ...
//   }
//   trace.AddSpan("all-gather transformer.h.1", "comm", 100 + rank, start_us, end_us);
//   ZS_RETURN_IF_ERROR(trace.WriteJson("trace.json"));
//
// Times are microseconds since the recorder was created. Thread-safe; a null
// recorder pointer turns every call into nothing, so instrumented code pays
// only a branch when tracing is off.
#ifndef ZEROSHARD_RUNTIME_TRACE_H_
#define ZEROSHARD_RUNTIME_TRACE_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

class TraceRecorder {
 public:
  struct Span {
    std::string name, category;
    int tid;
    double start_us, dur_us;
  };

  TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}

  double NowUs() const {
    if (clock_) return clock_();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  // Times from `now_us` instead of the host's steady clock (the simulator
  // records the sharding hooks' spans on a virtual device's compute-stream
  // clock). Set before anything is recorded.
  void set_clock(std::function<double()> now_us) { clock_ = std::move(now_us); }
  // A complete event on row `tid` from start_us to end_us.
  void AddSpan(std::string name, std::string category, int tid, double start_us, double end_us);
  // Names a row ("rank 0 compute").
  void NameThread(int tid, std::string name);
  size_t size() const;
  // Sum of the durations of spans of `category` on row `tid` (-1: every row).
  double TotalUs(const std::string& category, int tid = -1) const;
  std::vector<Span> spans() const;
  absl::Status WriteJson(const std::string& path) const;

 private:
  const std::chrono::steady_clock::time_point origin_;
  std::function<double()> clock_;
  mutable absl::Mutex mu_;
  std::vector<Span> spans_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, std::string>> thread_names_ ABSL_GUARDED_BY(mu_);
};

// Records [construction, destruction) as one span; does nothing for a null recorder.
class ScopedSpan {
 public:
  ScopedSpan(TraceRecorder* trace, std::string name, std::string category, int tid)
      : trace_(trace), name_(std::move(name)), category_(std::move(category)), tid_(tid),
        start_(trace ? trace->NowUs() : 0) {}
  ~ScopedSpan() {
    if (trace_ != nullptr) trace_->AddSpan(std::move(name_), std::move(category_), tid_, start_, trace_->NowUs());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  TraceRecorder* trace_;
  std::string name_, category_;
  int tid_;
  double start_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_TRACE_H_
