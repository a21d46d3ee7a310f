// Communicator: the collectives interface the sharding runtime speaks to. One
// rank of a group; collectives on tensors; asynchronous Work handles;
// sub-communicators. Backends: in-process ranks (local_communicator.h), MPI
// (mpi_communicator.h), NCCL (nccl_communicator.h).
//
//   // Every rank runs the same code with its own communicator:
//   absl::Status Step(Communicator& comm, const Tensor& shard, const Tensor& full) {
//     // full: [size * n], shard: [n], shard may be full's slice for this rank (in place)
//     ZS_ASSIGN_OR_RETURN(auto gather, comm.AllGatherAsync(shard, full));
//     ... compute that touches neither tensor ...
//     ZS_RETURN_IF_ERROR(gather->Wait());
//     ZS_RETURN_IF_ERROR(comm.ReduceScatter(grads_full, grad_shard, ReduceOp::kAvg));
//     // blocks: [size * m]; got: [size * m], got's block j is rank j's block rank
//     ZS_RETURN_IF_ERROR(comm.AllToAll(blocks, got));
//     ZS_ASSIGN_OR_RETURN(auto replicas, comm.Split(/*color=*/comm.rank() % 2, /*key=*/comm.rank()));
//     return replicas->AllReduce(grad_shard, ReduceOp::kAvg);   // in place
//   }
//
// Note [Collective layouts]
//   Only element counts matter: every tensor must be contiguous (row-major)
//   and is read as a flat array; shapes are not compared. Input and output
//   have the same dtype and live on device(). With n = input.numel() and
//   size = size(), rank = rank():
//   - AllGather(input, output): output.numel() == size * n; on every rank
//     output[i*n, (i+1)*n) = input of rank i. In place when input is exactly
//     output[rank*n, (rank+1)*n) (same bytes, not a copy).
//   - ReduceScatter(input, output, op): input.numel() == size * m with
//     m = output.numel(); rank i gets output = op over ranks of
//     input[i*m, (i+1)*m). In place when output is exactly input[rank*m, ...).
//   - AllReduce(input, output, op): same numel; output = op over ranks of
//     input, on every rank. In place when output is input (same bytes).
//   - Broadcast(tensor, root): tensor of every rank = tensor of `root`
//     (same numel on every rank).
//   - AllToAll(input, output): input.numel() == output.numel() == size * m
//     (m may be 0); rank i's output[j*m, (j+1)*m) = rank j's
//     input[i*m, (i+1)*m): block j of my input goes to rank j, block j of my
//     output comes from rank j (my own block is copied across). Never in
//     place: input and output must not overlap at all (InvalidArgument naming
//     both byte ranges); a caller that wants the result in the input's
//     buffer copies it back. ZeRO++'s qgZ reduces int8 gradient blocks this
//     way: each rank all-to-alls its quantized blocks and reduces what it got.
//   - Barrier(): returns on a rank once every rank has entered it.
//   Any other overlap between input and output is an InvalidArgument.
//   Every rank must issue the same collectives in the same order with the
//   same dtype, counts, reduce op and root. Reductions follow Note
//   [Reduction numerics] (collectives/reduction.h): fp32 accumulation for
//   bf16/f16, rank order, bitwise identical on every rank.
//
// Note [Collective errors]
//   Every collective gets a sequence number (1, 2, ... per communicator).
//   Errors are Status values, the same on every rank where the failure is
//   shared:
//   - arguments that fail the layout rules above: InvalidArgument on that
//     rank at once; the rank still joins the collective with an "invalid"
//     mark so that its peers fail too instead of hanging;
//   - ranks that disagree (dtype, count, op, reduce op, root): InvalidArgument
//     on every rank naming the rank(s) that differ. The in-process backend
//     always checks; MPI and NCCL check in check mode
//     (CommunicatorOptions::check_mode), which costs one small exchange;
//   - a rank that does not arrive within CommunicatorOptions::timeout:
//     DeadlineExceeded on the ranks that wait, naming the missing rank(s).
//     The communicator is then aborted: later collectives fail with Aborted.
//   Each rank keeps a ring of its last collectives (collective_trace.h) and
//   logs it (runtime/log.h: an event of source "collectives", the status as
//   its message, the ring as its detail) on a timeout, a mismatch or an abort.
//   Every communicator is watched by the process's watchdog (runtime/watchdog.h)
//   from its first collective: one in progress for longer than the timeout
//   plus the watchdog's grace (which a backend's own timeout should have
//   caught) writes the flight records, aborts the communicators and ends the
//   process. Nothing is watched until the job starts the watchdog.
//
// Note [Bytes sent]
//   bytes_sent() counts, for each collective issued with valid arguments,
//   the payload bytes one rank sends under the bandwidth-optimal ring
//   algorithm for its size W (the convention of nccl-tests' bus bandwidth),
//   whatever the backend does on the wire; N is the collective's whole
//   buffer in bytes:
//   - AllGather: (W-1)/W * N of the output (each rank's input W-1 times);
//   - ReduceScatter: (W-1)/W * N of the input;
//   - AllReduce: 2 (W-1)/W * N (a reduce-scatter, then an all-gather),
//     rounded down to a whole byte;
//   - Broadcast: (W-1)/W * N (a pipelined chain: W-1 of the W ranks forward
//     the tensor once; the per-rank average), rounded down;
//   - AllToAll: (W-1)/W * N of the input (W-1 of its W blocks leave the rank,
//     each once, directly to its peer; the rank's own block stays), exact;
//   - Barrier, Split, and any collective at W = 1: 0.
//   So it is the nominal algorithm traffic in the collective's own dtype, not
//   what a backend measured on its links: the in-process backend copies
//   through shared memory, MPI's small all-reduce sends whole inputs. It
//   compares schedules, dtypes and compression across backends; a backend's
//   own wire figures belong in its bench.
//
// Threading: a Communicator is used by one thread at a time (its collectives
// are ordered by the order of the calls). Asynchronous collectives of host
// backends run on the communicator's own communication thread, one after
// another; those of different communicators (e.g. shard and replica groups)
// may run at the same time.
#ifndef ZEROSHARD_COLLECTIVES_COMMUNICATOR_H_
#define ZEROSHARD_COLLECTIVES_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "zeroshard/collectives/collective_desc.h"
#include "zeroshard/collectives/collective_trace.h"
#include "zeroshard/collectives/reduction.h"
#include "zeroshard/collectives/work.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/gpu_timeline.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/runtime/watchdog.h"

namespace zeroshard {

// Options every backend shares; backends embed them in their own options.
struct CommunicatorOptions {
  // How long a rank waits for its peers in one collective before it fails
  // with DeadlineExceeded. absl::InfiniteDuration() waits forever.
  absl::Duration timeout = absl::Minutes(10);
  // Verify before moving data that every rank issued the same collective
  // (Note [Collective errors]).
  bool check_mode = false;
  // Entries in the ring of recent collectives.
  int trace_capacity = 16;
  // Log the ring (runtime/log.h) when a collective times out, mismatches or
  // finds the communicator aborted.
  bool print_trace_on_error = true;

  // "timeout=10m check_mode=false trace_capacity=16".
  std::string ToString() const;
};

// Per-call options.
struct CollectiveOptions {
  // CUDA backends: the collective starts after the work enqueued so far on
  // `stream`, runs on the communicator's stream, and Work::Block(stream)
  // orders later work after it. nullptr: only the communicator's stream.
  // Host backends ignore it.
  const Stream* stream = nullptr;
  // The name of the collective's span while the communicator is traced
  // (set_trace), e.g. "all-gather transformer.h.1"; "" names it by its op.
  // Communication hooks pass their call's options on, so every collective a
  // hook issues for a unit carries the unit's label.
  std::string trace_label;
};

// One collective as the base class hands it to a backend: validated
// arguments (or desc.invalid_args), a sequence number, and the tensors.
struct CollectiveCall {
  CollectiveDesc desc;
  Tensor input;   // AllGather, ReduceScatter, AllReduce, AllToAll; Broadcast: the tensor
  Tensor output;  // AllGather, ReduceScatter, AllReduce, AllToAll; Broadcast: the tensor
  const Stream* stream = nullptr;
  bool blocking = false;  // the caller waits at once (host backends may run it inline)
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "local", "mpi" or "nccl".
  virtual absl::string_view backend() const = 0;
  // Where tensors must live: the CPU for local and MPI, the GPU for NCCL.
  Device device() const { return device_; }
  const CommunicatorOptions& options() const { return options_; }

  // ------------------------------------------------------------ asynchronous
  // An error here means the collective was not started (invalid arguments, or
  // an aborted communicator); otherwise Work::Wait() gives its status.
  absl::StatusOr<std::shared_ptr<Work>> AllGatherAsync(const Tensor& input, const Tensor& output,
                                                       const CollectiveOptions& opts = {});
  absl::StatusOr<std::shared_ptr<Work>> ReduceScatterAsync(const Tensor& input,
                                                           const Tensor& output, ReduceOp op,
                                                           const CollectiveOptions& opts = {});
  absl::StatusOr<std::shared_ptr<Work>> AllReduceAsync(const Tensor& input, const Tensor& output,
                                                       ReduceOp op,
                                                       const CollectiveOptions& opts = {});
  absl::StatusOr<std::shared_ptr<Work>> BroadcastAsync(const Tensor& tensor, int root,
                                                       const CollectiveOptions& opts = {});
  absl::StatusOr<std::shared_ptr<Work>> BarrierAsync(const CollectiveOptions& opts = {});
  // Note [Collective layouts]: block j of `input` to rank j, block j of
  // `output` from rank j; input and output must not overlap.
  absl::StatusOr<std::shared_ptr<Work>> AllToAllAsync(const Tensor& input, const Tensor& output,
                                                      const CollectiveOptions& opts = {});

  // ------------------------------------------------------------ blocking
  absl::Status AllGather(const Tensor& input, const Tensor& output,
                         const CollectiveOptions& opts = {});
  absl::Status ReduceScatter(const Tensor& input, const Tensor& output,
                             ReduceOp op = ReduceOp::kSum, const CollectiveOptions& opts = {});
  absl::Status AllReduce(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::kSum,
                         const CollectiveOptions& opts = {});
  // In place.
  absl::Status AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                         const CollectiveOptions& opts = {});
  absl::Status Broadcast(const Tensor& tensor, int root, const CollectiveOptions& opts = {});
  absl::Status Barrier(const CollectiveOptions& opts = {});
  absl::Status AllToAll(const Tensor& input, const Tensor& output,
                        const CollectiveOptions& opts = {});

  // ------------------------------------------------------------ groups
  // Collective over this communicator: ranks with the same `color` form a
  // new communicator, ordered by (key, rank). A negative color takes part
  // but gets no communicator (nullptr). The new one has this one's options.
  // E.g. hybrid sharding on 8 ranks: shard groups Split(rank / 4, rank),
  // replica groups Split(rank % 4, rank).
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

  // Collectives issued between GroupStart() and GroupEnd() may be launched
  // together (NCCL: one ncclGroupStart/End for a bucket). Host backends run
  // them one by one; the calls are accepted everywhere.
  virtual absl::Status GroupStart() { return absl::OkStatus(); }
  virtual absl::Status GroupEnd() { return absl::OkStatus(); }

  // ------------------------------------------------------------ tracing
  // Note [Communication spans]
  //   While traced, each collective issued with valid arguments becomes one
  //   span on `trace` (category "comm", named by CollectiveOptions::trace_label
  //   or its op) from the backend's own start (MarkRunning: this rank arrived
  //   and moves data or waits for its peers) to its end (MarkDone), on a row
  //   of its own per communicator in process `pid` (Note [Trace layout] in
  //   runtime/trace.h). Its args: op, seq, dtype, count, bytes (Note [Bytes
  //   sent]), issued_us (when the base class accepted it) and, on an error,
  //   status. The span lies inside [issue, observed completion]: a backend
  //   marks done before it completes the Work. A backend that knows when
  //   its peers have all arrived (the in-process one: after its arrival
  //   rendezvous) calls MarkPeersArrived, with how long ago the last peer
  //   arrived when it learns that later (its thread was not running then):
  //   the time before that moment becomes its own
  //   span, category "peers" ("wait for peers: <label>"), and the "comm" span
  //   starts there, so it shows when the transfer ran and a peer's lateness
  //   (skew, a straggler, ranks sharing cores) shows apart from it
  //   (tools/trace_summary's "peer wait"). MPI's collectives wait inside the
  //   library, so their spans include the wait for peers. A backend whose
  //   collectives run on a CUDA stream (NCCL) ends the host span when the
  //   collective is enqueued (MarkEnqueued): the span is the launch. Its
  //   device times come from `gpu` (set_trace): a span on the row's GPU twin
  //   ("gpu comm", category "gpu comm", TraceRow::Gpu) from events around the
  //   collective on the communication stream, and an NVTX range around the
  //   launch (Note [GPU spans] in runtime/gpu_timeline.h).
  // set_trace applies to this communicator and to every communicator split
  // from the same root, before or after the call (a communication hook's
  // groups included); nullptr turns it off. A collective in flight when it
  // changes is not recorded. Off, a collective pays three atomic loads (on
  // NCCL two more, for its GPU span).
  void set_trace(TraceRecorder* trace, int pid, GpuTimeline* gpu = nullptr);
  // The name of this communicator's row ("shard group (2 ranks)"); the
  // default: "world (N ranks)", or for a split "group of N ranks (split #seq
  // of row <parent's row>, color c)".
  void set_trace_name(std::string name);
  // This communicator's row (its pid is the one set_trace gave).
  TraceRow trace_row() const;

  // ------------------------------------------------------------ diagnostics
  // The ring of recent collectives, as printed on errors.
  std::string RecentCollectives() const;
  // OK, or why the communicator was aborted (e.g. a timeout).
  absl::Status health() const;
  // "rank 1 of 4 (local)".
  std::string Who() const;
  // Bytes this rank has sent in the collectives it issued on this
  // communicator and on every communicator split from it (Note [Bytes
  // sent]). Thread-safe.
  int64_t bytes_sent() const { return bytes_sent_->load(std::memory_order_relaxed); }
  // The rank this communicator's flight record is filed under: its own rank,
  // or for a group split from another, the parent's (the world rank).
  int world_rank() const { return world_rank_; }

 protected:
  Communicator(int rank, int size, Device device, CommunicatorOptions options);

  // Runs (or queues) one collective. `call.desc.invalid_args` marks a call
  // whose arguments failed on this rank: join the rendezvous, move no data,
  // fail. Backends report progress with MarkRunning / MarkDone.
  virtual absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) = 0;
  // A blocking collective (`call.blocking`): by default Launch, then Wait.
  // Host backends run it on the caller's thread when their queue is idle.
  virtual absl::Status RunBlocking(CollectiveCall call);
  // `desc` is the Split's descriptor (seq, color, key). nullptr for color < 0.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) = 0;

  void MarkRunning(const CollectiveDesc& desc);
  // Every peer has posted this collective: the transfer starts now (Note
  // [Communication spans]). Optional; a no-op when untraced.
  // `ago`: how long before this call the last peer arrived (>= 0).
  void MarkPeersArrived(const CollectiveDesc& desc, absl::Duration ago = absl::ZeroDuration());
  // Records the outcome in the ring; on a timeout, mismatch or abort prints
  // the ring (if enabled). Returns `status` for chaining.
  absl::Status MarkDone(const CollectiveDesc& desc, absl::Status status);
  // Marks the communicator unusable; later collectives fail with Aborted.
  void Abort(const absl::Status& reason);

  CollectiveTrace& trace() { return trace_; }

  // Note [Communication spans], for backends that run collectives on a CUDA
  // stream: the host's part of `desc` is done (it is enqueued); ends its
  // host span, not the collective (the ring still shows it in progress).
  void MarkEnqueued(const CollectiveDesc& desc);
  // The collective's GPU span on `stream` (a cudaStream_t) and NVTX range:
  // Begin after the stream waits for the caller's stream and before the
  // collective's work, End after it. No-ops while not traced with a GPU timeline.
  GpuMark BeginGpuSpan(const CollectiveDesc& desc, void* stream);
  void EndGpuSpan(const CollectiveDesc& desc, GpuMark& mark, void* stream);

  // ------------------------------------------------------------ watchdog
  // Backends that can make a collective in progress fail (wake the in-process
  // group, ncclCommAbort) do it here; Abort(why) has already marked this
  // communicator. Called on the watchdog's thread, once.
  virtual void AbortBackend(const absl::Status& why) { (void)why; }
  // What the backend knows about the collective in progress, for the flight
  // record: which ranks arrived ("" when it cannot tell).
  virtual std::string DescribeArrivals() const { return ""; }
  // Whether a collective the ring shows in progress has in fact completed. A
  // backend whose ring learns of completions late (NCCL: at the next launch)
  // answers from its own state; the watchdog asks. Thread-safe.
  virtual bool IsCollectiveComplete(int64_t seq) const {
    (void)seq;
    return false;
  }
  // No longer watched. Every backend calls it first in its destructor (the
  // base destructor calls it too, too late for the virtual calls above).
  void StopWatchdog();

 private:
  class WatchdogAdapter;
  // The validated call with its sequence number; on invalid arguments the
  // error (after joining the collective so the peers fail too).
  absl::StatusOr<CollectiveCall> Prepare(CollectiveOp op, const Tensor& input,
                                         const Tensor& output, ReduceOp reduce_op, int root,
                                         const CollectiveOptions& opts, bool blocking);
  absl::StatusOr<std::shared_ptr<Work>> Issue(CollectiveOp op, const Tensor& input,
                                              const Tensor& output, ReduceOp reduce_op, int root,
                                              const CollectiveOptions& opts);
  absl::Status ValidateArgs(const CollectiveDesc& desc, const Tensor& input,
                            const Tensor& output) const;
  // Registers with the process watchdog (first collective; issuing thread).
  void Watch();
  // The oldest collective in progress, for the watchdog.
  std::optional<WatchdogClient::Pending> OldestPending() const;
  absl::Status IssueBlocking(CollectiveOp op, const Tensor& input, const Tensor& output,
                             ReduceOp reduce_op, int root, const CollectiveOptions& opts);

  // Note [Communication spans]: called at issue, MarkRunning and MarkDone.
  void OpenSpan(const CollectiveDesc& desc, const std::string& label);
  void SpanRunning(int64_t seq, bool peers_arrived = false, double ago_us = 0);
  void CloseSpan(const CollectiveDesc& desc, const absl::Status& status);
  // A collective the backend never saw (its launch failed): no span.
  void DropSpan(int64_t seq);
  // The name of the open span of `desc` (its label or its op).
  std::string OpenSpanLabel(const CollectiveDesc& desc);

  const int rank_;
  const int size_;
  const Device device_;
  const CommunicatorOptions options_;
  int world_rank_;
  CollectiveTrace trace_;
  std::unique_ptr<WatchdogAdapter> watchdog_;  // registered at the first collective
  int64_t next_seq_ = 0;  // touched only by the (single) issuing thread
  mutable absl::Mutex health_mu_;
  absl::Status health_ ABSL_GUARDED_BY(health_mu_);
  std::atomic<bool> aborted_{false};
  // Shared with the communicators split from this one.
  std::shared_ptr<std::atomic<int64_t>> bytes_sent_ = std::make_shared<std::atomic<int64_t>>(0);
  // Tracing (Note [Communication spans]): shared with the communicators split
  // from the same root; this communicator's row in it.
  struct TraceFamily {
    std::atomic<TraceRecorder*> trace{nullptr};
    std::atomic<GpuTimeline*> gpu{nullptr};
    std::atomic<int> pid{0};
    std::atomic<int> next_tid{TraceRow::kFirstStream};
  };
  struct OpenedSpan {
    int64_t seq = 0;
    std::string label;
    double issued_us = 0, start_us = -1, arrived_us = -1;
    TraceRecorder* trace = nullptr;
  };
  std::shared_ptr<TraceFamily> trace_family_ = std::make_shared<TraceFamily>();
  int trace_tid_;
  std::atomic<int> open_spans_count_{0};
  mutable std::mutex spans_mu_;  // guards the three below (std::mutex: Note [std::mutex on the collective path])
  std::vector<OpenedSpan> open_spans_;
  std::string trace_name_;
  TraceRecorder* trace_named_in_ = nullptr;  // the recorder that has this row's name
  TraceRecorder* gpu_named_in_ = nullptr;    // ... and its GPU twin's
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_COMMUNICATOR_H_
