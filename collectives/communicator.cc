#include "zeroshard/collectives/communicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/log.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::string CommunicatorOptions::ToString() const {
  return absl::StrCat("timeout=", absl::FormatDuration(timeout), " check_mode=",
                      check_mode ? "true" : "false", " trace_capacity=", trace_capacity);
}

// What the process watchdog sees of a communicator. Registered at the first
// collective (the object is complete by then), removed by StopWatchdog.
class Communicator::WatchdogAdapter final : public WatchdogClient {
 public:
  explicit WatchdogAdapter(Communicator* comm) : comm_(comm), who_(comm->Who()) {}

  std::optional<Pending> OldestPending() const override {
    std::optional<Pending> p = comm_->OldestPending();
    if (p.has_value()) p->what = absl::StrCat(who_, ": ", p->what);
    return p;
  }
  int WatchdogRank() const override { return comm_->world_rank_; }
  std::string FlightRecord() const override {
    // Not RecentCollectives(): Who() is a virtual call, and the owner may be
    // in its destructor.
    std::string s = comm_->trace_.ToString(who_);
    const std::string arrivals = comm_->DescribeArrivals();
    if (!arrivals.empty()) absl::StrAppend(&s, "  ", arrivals, "\n");
    return s;
  }
  void AbortForWatchdog(const absl::Status& why) override {
    comm_->Abort(why);
    comm_->AbortBackend(why);
  }

 private:
  Communicator* const comm_;
  const std::string who_;
};

Communicator::Communicator(int rank, int size, Device device, CommunicatorOptions options)
    : rank_(rank),
      size_(size),
      device_(device),
      options_(std::move(options)),
      world_rank_(rank),
      trace_(options_.trace_capacity),
      trace_tid_(trace_family_->next_tid.fetch_add(1, std::memory_order_relaxed)) {}

Communicator::~Communicator() { StopWatchdog(); }

void Communicator::StopWatchdog() {
  if (watchdog_ != nullptr) {
    Watchdog::Process().Remove(watchdog_.get());
    watchdog_.reset();
  }
}

std::optional<WatchdogClient::Pending> Communicator::OldestPending() const {
  for (const CollectiveTrace::Entry& e : trace_.Entries()) {
    if (e.state != CollectiveState::kIssued && e.state != CollectiveState::kRunning) continue;
    if (IsCollectiveComplete(e.desc.seq)) continue;
    const bool running = e.state == CollectiveState::kRunning;
    return WatchdogClient::Pending{
        .what = absl::StrCat(e.desc.ToString(), " ", CollectiveStateName(e.state)),
        .since = running ? e.started : e.issued,
        .allowed = options_.timeout};
  }
  return std::nullopt;
}

std::string Communicator::Who() const {
  return absl::StrCat("rank ", rank_, " of ", size_, " (", backend(), ")");
}

std::string Communicator::RecentCollectives() const { return trace_.ToString(Who()); }

absl::Status Communicator::health() const {
  if (!aborted_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&health_mu_);
  return health_;
}

void Communicator::Abort(const absl::Status& reason) {
  absl::MutexLock lock(&health_mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  health_ = absl::AbortedError(
      absl::StrCat("communicator ", Who(), " was aborted: ", reason.message()));
  aborted_.store(true, std::memory_order_release);
}

void Communicator::MarkRunning(const CollectiveDesc& desc) {
  trace_.SetState(desc.seq, CollectiveState::kRunning);
  if (open_spans_count_.load(std::memory_order_acquire) > 0) SpanRunning(desc.seq);
}

void Communicator::MarkPeersArrived(const CollectiveDesc& desc, absl::Duration ago) {
  if (open_spans_count_.load(std::memory_order_acquire) > 0) {
    SpanRunning(desc.seq, /*peers_arrived=*/true, absl::ToDoubleMicroseconds(ago));
  }
}

absl::Status Communicator::MarkDone(const CollectiveDesc& desc, absl::Status status) {
  if (open_spans_count_.load(std::memory_order_acquire) > 0) CloseSpan(desc, status);
  if (status.ok()) {
    trace_.SetState(desc.seq, CollectiveState::kCompleted);
    return status;
  }
  const bool timed_out = status.code() == absl::StatusCode::kDeadlineExceeded;
  absl::string_view note = status.message();
  absl::ConsumePrefix(&note, ErrorPrefix(desc, rank_, size_));  // the ring names the op already
  trace_.SetState(desc.seq, timed_out ? CollectiveState::kTimedOut : CollectiveState::kFailed,
                  note);
  // A rank's own argument error is its caller's business; everything that
  // involves other ranks gets the ring printed, so a hang or a divergence can
  // be read from the log alone.
  if (options_.print_trace_on_error && !desc.invalid_args) {
    Log(LogLevel::kError, "collectives", status.ToString(), RecentCollectives());
  }
  return status;
}

namespace {
int64_t RingBytesSent(const CollectiveDesc& desc, int size);
}  // namespace

// ================================================================ tracing

void Communicator::set_trace(TraceRecorder* trace, int pid, GpuTimeline* gpu) {
  trace_family_->pid.store(pid, std::memory_order_relaxed);
  trace_family_->gpu.store(trace != nullptr ? gpu : nullptr, std::memory_order_release);
  trace_family_->trace.store(trace, std::memory_order_release);
}

void Communicator::set_trace_name(std::string name) {
  std::lock_guard<std::mutex> lock(spans_mu_);
  trace_name_ = std::move(name);
  trace_named_in_ = nullptr;  // named again at the next span
}

TraceRow Communicator::trace_row() const {
  return TraceRow{trace_family_->pid.load(std::memory_order_relaxed), trace_tid_};
}

namespace {
// Spans opened but never closed (a launch that failed before the backend saw
// it) are dropped beyond this many.
constexpr size_t kMaxOpenSpans = 4096;
}  // namespace

void Communicator::OpenSpan(const CollectiveDesc& desc, const std::string& label) {
  TraceRecorder* trace = trace_family_->trace.load(std::memory_order_acquire);
  if (trace == nullptr) return;
  std::lock_guard<std::mutex> lock(spans_mu_);
  if (open_spans_.size() >= kMaxOpenSpans) open_spans_.erase(open_spans_.begin());
  open_spans_.push_back(OpenedSpan{.seq = desc.seq,
                                   .label = label.empty() ? std::string(CollectiveOpName(desc.op)) : label,
                                   .issued_us = trace->NowUs(),
                                   .trace = trace});
  open_spans_count_.store(static_cast<int>(open_spans_.size()), std::memory_order_release);
}

void Communicator::SpanRunning(int64_t seq, bool peers_arrived, double ago_us) {
  std::lock_guard<std::mutex> lock(spans_mu_);
  for (OpenedSpan& s : open_spans_) {
    if (s.seq == seq) {
      if (!peers_arrived) {
        s.start_us = s.trace->NowUs();
      } else {
        // Never before this rank's own start: the peers can only have all
        // arrived once this rank had.
        s.arrived_us = std::max(s.start_us, s.trace->NowUs() - std::max(0.0, ago_us));
      }
      return;
    }
  }
}

void Communicator::DropSpan(int64_t seq) {
  if (open_spans_count_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(spans_mu_);
  std::erase_if(open_spans_, [seq](const OpenedSpan& s) { return s.seq == seq; });
  open_spans_count_.store(static_cast<int>(open_spans_.size()), std::memory_order_release);
}

void Communicator::MarkEnqueued(const CollectiveDesc& desc) {
  if (open_spans_count_.load(std::memory_order_acquire) > 0) CloseSpan(desc, absl::OkStatus());
}

std::string Communicator::OpenSpanLabel(const CollectiveDesc& desc) {
  std::lock_guard<std::mutex> lock(spans_mu_);
  for (const OpenedSpan& s : open_spans_) {
    if (s.seq == desc.seq) return s.label;
  }
  return std::string(CollectiveOpName(desc.op));
}

GpuMark Communicator::BeginGpuSpan(const CollectiveDesc& desc, void* stream) {
  GpuTimeline* gpu = trace_family_->gpu.load(std::memory_order_acquire);
  if (gpu == nullptr) return GpuMark{};
  return gpu->Begin(stream, OpenSpanLabel(desc));
}

void Communicator::EndGpuSpan(const CollectiveDesc& desc, GpuMark& mark, void* stream) {
  GpuTimeline* gpu = trace_family_->gpu.load(std::memory_order_acquire);
  if (gpu == nullptr) {
    mark = GpuMark{};  // tracing ended in between: the range and event are the timeline's no more
    return;
  }
  const TraceRow row = trace_row().Gpu();
  {
    std::lock_guard<std::mutex> lock(spans_mu_);
    if (gpu_named_in_ != gpu->trace()) {
      gpu->trace()->NameRow(row, absl::StrCat("gpu comm ", trace_name_.empty() ? absl::StrCat("world (", size_, " ranks)")
                                                                                : trace_name_));
      gpu_named_in_ = gpu->trace();
    }
  }
  gpu->End(mark, stream, OpenSpanLabel(desc), "gpu comm", row,
           absl::StrFormat("\"op\": \"%s\", \"seq\": %d, \"dtype\": \"%s\", \"count\": %d, \"bytes\": %d",
                           CollectiveOpName(desc.op), desc.seq, DTypeName(desc.dtype), desc.count,
                           RingBytesSent(desc, size_)));
}

void Communicator::CloseSpan(const CollectiveDesc& desc, const absl::Status& status) {
  std::lock_guard<std::mutex> lock(spans_mu_);
  auto it = std::find_if(open_spans_.begin(), open_spans_.end(),
                         [&](const OpenedSpan& s) { return s.seq == desc.seq; });
  if (it == open_spans_.end()) return;
  OpenedSpan span = std::move(*it);
  open_spans_.erase(it);
  open_spans_count_.store(static_cast<int>(open_spans_.size()), std::memory_order_release);
  // Recorded only if still traced into the same recorder, and started.
  if (span.start_us < 0 || trace_family_->trace.load(std::memory_order_acquire) != span.trace) return;
  const double end_us = span.trace->NowUs();
  const TraceRow row = trace_row();
  if (trace_named_in_ != span.trace) {
    span.trace->NameRow(row, trace_name_.empty() ? absl::StrCat("world (", size_, " ranks)") : trace_name_);
    trace_named_in_ = span.trace;
  }
  std::string args = absl::StrFormat(
      "\"op\": \"%s\", \"seq\": %d, \"dtype\": \"%s\", \"count\": %d, \"bytes\": %d, \"issued_us\": %.3f",
      CollectiveOpName(desc.op), desc.seq, DTypeName(desc.dtype), desc.count, RingBytesSent(desc, size_),
      span.issued_us);
  if (!status.ok()) {
    std::string message(status.message().substr(0, status.message().find('\n')));
    for (char& c : message) {
      if (c == '"' || c == '\\') c = '\'';
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    absl::StrAppend(&args, ", \"status\": \"", absl::StatusCodeToString(status.code()), ": ", message, "\"");
  }
  double transfer_us = span.start_us;
  if (span.arrived_us >= span.start_us) {
    // The wait for the last peer, then the transfer (Note [Communication spans]).
    absl::StrAppendFormat(&args, ", \"peers_arrived_us\": %.3f, \"peer_wait_us\": %.3f", span.arrived_us,
                          span.arrived_us - span.start_us);
    if (span.arrived_us > span.start_us) {
      span.trace->AddSpan(absl::StrCat("wait for peers: ", span.label), "peers", row, span.start_us, span.arrived_us,
                          absl::StrFormat("\"op\": \"%s\", \"seq\": %d", CollectiveOpName(desc.op), desc.seq));
    }
    transfer_us = span.arrived_us;
  }
  span.trace->AddSpan(std::move(span.label), "comm", row, transfer_us, end_us, std::move(args));
}

// ================================================================ issuing

namespace {

bool Overlaps(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

absl::Status Communicator::ValidateArgs(const CollectiveDesc& desc, const Tensor& input,
                                        const Tensor& output) const {
  if (desc.op == CollectiveOp::kBarrier) return absl::OkStatus();
  const bool has_output = desc.op != CollectiveOp::kBroadcast;
  const char* in_name = has_output ? "input" : "tensor";
  for (const auto& [t, name] : {std::pair{&input, in_name}, std::pair{&output, "output"}}) {
    if (!has_output && t == &output) continue;
    if (!t->defined()) return absl::InvalidArgumentError(absl::StrCat(name, " is undefined"));
    if (t->device() != device_) {
      return absl::InvalidArgumentError(absl::StrCat(name, " is on ", t->device().ToString(),
                                                     ", this ", backend(),
                                                     " communicator works on ",
                                                     device_.ToString()));
    }
    if (!t->is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be contiguous, got ", t->DebugString()));
    }
  }
  if (has_output && input.dtype() != output.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("input is ", DTypeName(input.dtype()),
                                                   ", output is ", DTypeName(output.dtype()),
                                                   " (expected the same dtype)"));
  }
  const int64_t n = input.numel();
  const size_t esize = input.itemsize();
  const char* in_ptr = static_cast<const char*>(input.raw_data());
  const char* out_ptr = has_output ? static_cast<const char*>(output.raw_data()) : nullptr;
  switch (desc.op) {
    case CollectiveOp::kAllGather:
      if (output.numel() != size_ * n) {
        return absl::InvalidArgumentError(
            absl::StrCat("output has ", output.numel(), " elements, expected world_size (",
                         size_, ") x input (", n, ") = ", size_ * n));
      }
      if (Overlaps(input, output) && in_ptr != out_ptr + rank_ * n * esize) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input overlaps output but is not its slice for rank ", rank_,
            " (in place needs input == output[", rank_ * n, ", ", (rank_ + 1) * n, "))"));
      }
      return absl::OkStatus();
    case CollectiveOp::kReduceScatter: {
      const int64_t m = output.numel();
      if (n != size_ * m) {
        return absl::InvalidArgumentError(
            absl::StrCat("input has ", n, " elements, expected world_size (", size_,
                         ") x output (", m, ") = ", size_ * m));
      }
      if (Overlaps(input, output) && out_ptr != in_ptr + rank_ * m * esize) {
        return absl::InvalidArgumentError(absl::StrCat(
            "output overlaps input but is not its block for rank ", rank_,
            " (in place needs output == input[", rank_ * m, ", ", (rank_ + 1) * m, "))"));
      }
      return absl::OkStatus();
    }
    case CollectiveOp::kAllReduce:
      if (output.numel() != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "output has ", output.numel(), " elements, expected the input's ", n));
      }
      if (Overlaps(input, output) && in_ptr != out_ptr) {
        return absl::InvalidArgumentError(
            "output overlaps input without being the same bytes (in place needs output == "
            "input)");
      }
      return absl::OkStatus();
    case CollectiveOp::kBroadcast:
      if (desc.root < 0 || desc.root >= size_) {
        return absl::InvalidArgumentError(
            absl::StrCat("root ", desc.root, " is not a rank of a group of ", size_));
      }
      return absl::OkStatus();
    case CollectiveOp::kAllToAll:
      if (n % size_ != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input has ", n, " elements, expected a multiple of world_size (", size_,
            "): one block of m elements per rank"));
      }
      if (output.numel() != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "output has ", output.numel(), " elements, expected the input's ", n,
            " (world_size (", size_, ") x ", n / size_, ")"));
      }
      if (Overlaps(input, output)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "input bytes [%p, %p) overlap output bytes [%p, %p); AllToAll is never in place "
            "(expected disjoint buffers)",
            in_ptr, in_ptr + input.nbytes(), out_ptr, out_ptr + output.nbytes()));
      }
      return absl::OkStatus();
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      return absl::OkStatus();
  }
  return absl::InternalError("unknown collective");
}

namespace {

// Note [Bytes sent]: one rank's payload under the ring algorithm.
int64_t RingBytesSent(const CollectiveDesc& desc, int size) {
  if (size <= 1) return 0;
  const int64_t w = size;
  const int64_t in_bytes = desc.count * static_cast<int64_t>(DTypeSize(desc.dtype));
  switch (desc.op) {
    case CollectiveOp::kAllGather: return (w - 1) * in_bytes;         // output = w * input
    case CollectiveOp::kReduceScatter: return (w - 1) * in_bytes / w;  // input = w * output
    case CollectiveOp::kAllReduce: return 2 * (w - 1) * in_bytes / w;
    case CollectiveOp::kBroadcast: return (w - 1) * in_bytes / w;
    case CollectiveOp::kAllToAll: return (w - 1) * in_bytes / w;  // exact: in_bytes = w * m * esize
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit: return 0;
  }
  return 0;
}

}  // namespace

absl::StatusOr<CollectiveCall> Communicator::Prepare(CollectiveOp op, const Tensor& input,
                                                     const Tensor& output, ReduceOp reduce_op,
                                                     int root, const CollectiveOptions& opts,
                                                     bool blocking) {
  ZS_RETURN_IF_ERROR(health());
  Watch();
  CollectiveCall call;
  call.desc.seq = ++next_seq_;
  call.desc.op = op;
  call.desc.reduce_op = reduce_op;
  call.desc.root = root;
  if (input.defined()) {
    call.desc.dtype = input.dtype();
    call.desc.count = input.numel();
  }
  call.input = input;
  call.output = op == CollectiveOp::kBroadcast ? input : output;
  call.stream = opts.stream;
  call.blocking = blocking;
  absl::Status args = ValidateArgs(call.desc, input, output);
  if (args.ok() && input.defined() && call.output.defined()) {
    call.desc.in_place = op != CollectiveOp::kBroadcast && Overlaps(input, call.output);
  }
  if (args.ok()) {
    trace_.Issued(call.desc);
    OpenSpan(call.desc, opts.trace_label);
    bytes_sent_->fetch_add(RingBytesSent(call.desc, size_), std::memory_order_relaxed);
    return call;
  }
  call.desc.invalid_args = true;
  args = absl::Status(args.code(),
                      absl::StrCat(ErrorPrefix(call.desc, rank_, size_), args.message()));
  trace_.Issued(call.desc);
  // Join the collective anyway (moving nothing) so the peers fail rather
  // than wait for this rank until the timeout.
  const CollectiveDesc desc = call.desc;
  call.blocking = false;
  call.input = call.output = Tensor();
  absl::StatusOr<std::shared_ptr<Work>> joined = Launch(std::move(call));
  (void)joined;
  trace_.SetState(desc.seq, CollectiveState::kFailed, args.message());
  return args;
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::Issue(CollectiveOp op, const Tensor& input,
                                                          const Tensor& output,
                                                          ReduceOp reduce_op, int root,
                                                          const CollectiveOptions& opts) {
  ZS_ASSIGN_OR_RETURN(CollectiveCall call,
                      Prepare(op, input, output, reduce_op, root, opts, /*blocking=*/false));
  const int64_t seq = call.desc.seq;
  absl::StatusOr<std::shared_ptr<Work>> work = Launch(std::move(call));
  // Not started: the ring must not show it in progress (the watchdog reads it).
  if (!work.ok()) {
    trace_.Finish(seq, CollectiveState::kFailed, work.status().message());
    DropSpan(seq);
  }
  return work;
}

absl::Status Communicator::IssueBlocking(CollectiveOp op, const Tensor& input,
                                         const Tensor& output, ReduceOp reduce_op, int root,
                                         const CollectiveOptions& opts) {
  ZS_ASSIGN_OR_RETURN(CollectiveCall call,
                      Prepare(op, input, output, reduce_op, root, opts, /*blocking=*/true));
  const int64_t seq = call.desc.seq;
  absl::Status status = RunBlocking(std::move(call));
  // Backends record the outcome; an error before they could (a failed launch)
  // must not leave the collective "in progress" in the ring.
  if (!status.ok()) {
    trace_.Finish(seq, CollectiveState::kFailed, status.message());
    DropSpan(seq);
  }
  return status;
}

absl::Status Communicator::RunBlocking(CollectiveCall call) {
  ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, Launch(std::move(call)));
  return work->Wait();
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::AllGatherAsync(const Tensor& input,
                                                                   const Tensor& output,
                                                                   const CollectiveOptions& opts) {
  return Issue(CollectiveOp::kAllGather, input, output, ReduceOp::kSum, 0, opts);
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::ReduceScatterAsync(
    const Tensor& input, const Tensor& output, ReduceOp op, const CollectiveOptions& opts) {
  return Issue(CollectiveOp::kReduceScatter, input, output, op, 0, opts);
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::AllReduceAsync(const Tensor& input,
                                                                   const Tensor& output,
                                                                   ReduceOp op,
                                                                   const CollectiveOptions& opts) {
  return Issue(CollectiveOp::kAllReduce, input, output, op, 0, opts);
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::BroadcastAsync(const Tensor& tensor, int root,
                                                                   const CollectiveOptions& opts) {
  return Issue(CollectiveOp::kBroadcast, tensor, Tensor(), ReduceOp::kSum, root, opts);
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::BarrierAsync(const CollectiveOptions& opts) {
  return Issue(CollectiveOp::kBarrier, Tensor(), Tensor(), ReduceOp::kSum, 0, opts);
}

absl::StatusOr<std::shared_ptr<Work>> Communicator::AllToAllAsync(const Tensor& input,
                                                                  const Tensor& output,
                                                                  const CollectiveOptions& opts) {
  return Issue(CollectiveOp::kAllToAll, input, output, ReduceOp::kSum, 0, opts);
}

absl::Status Communicator::AllGather(const Tensor& input, const Tensor& output,
                                     const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kAllGather, input, output, ReduceOp::kSum, 0, opts);
}

absl::Status Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                         const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kReduceScatter, input, output, op, 0, opts);
}

absl::Status Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op,
                                     const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kAllReduce, input, output, op, 0, opts);
}

absl::Status Communicator::AllReduce(const Tensor& tensor, ReduceOp op,
                                     const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kAllReduce, tensor, tensor, op, 0, opts);
}

absl::Status Communicator::Broadcast(const Tensor& tensor, int root,
                                     const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kBroadcast, tensor, Tensor(), ReduceOp::kSum, root, opts);
}

absl::Status Communicator::Barrier(const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kBarrier, Tensor(), Tensor(), ReduceOp::kSum, 0, opts);
}

absl::Status Communicator::AllToAll(const Tensor& input, const Tensor& output,
                                    const CollectiveOptions& opts) {
  return IssueBlocking(CollectiveOp::kAllToAll, input, output, ReduceOp::kSum, 0, opts);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  ZS_RETURN_IF_ERROR(health());
  CollectiveDesc desc;
  desc.seq = ++next_seq_;
  desc.op = CollectiveOp::kSplit;
  desc.color = color < 0 ? -1 : color;
  desc.key = key;
  Watch();
  trace_.Issued(desc);
  absl::StatusOr<std::unique_ptr<Communicator>> child = DoSplit(desc);
  if (!child.ok()) {
    trace_.Finish(desc.seq, CollectiveState::kFailed, child.status().message());
  } else if (*child != nullptr) {
    (*child)->world_rank_ = world_rank_;  // its flight record goes with this rank's
    (*child)->bytes_sent_ = bytes_sent_;  // its traffic counts as this rank's
    // Traced with this one, on a row of its own (Note [Communication spans]).
    (*child)->trace_family_ = trace_family_;
    (*child)->trace_tid_ = trace_family_->next_tid.fetch_add(1, std::memory_order_relaxed);
    (*child)->trace_name_ = absl::StrCat("group of ", (*child)->size(), " ranks (split #", desc.seq, " of row ",
                                         trace_tid_, ", color ", color, ")");
  }
  return child;
}

void Communicator::Watch() {
  if (watchdog_ != nullptr) return;
  watchdog_ = std::make_unique<WatchdogAdapter>(this);
  Watchdog::Process().Add(watchdog_.get());
}

}  // namespace zeroshard
