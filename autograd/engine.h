// The backward engine: reverse-mode differentiation over the recorded graph.
//
//   ZS_RETURN_IF_ERROR(Backward(loss));                       // d loss / d leaves, accumulated
//   ZS_RETURN_IF_ERROR(Backward({y}, {dy}, {.retain_graph = true}));
//
// Order: the graph reachable from the roots is counted first; a node runs when
// every gradient it will receive has arrived, and among ready nodes the latest
// created runs first (deterministic: same graph, same order). Leaf accumulators
// run as soon as they are ready, so a leaf's post-accumulate hooks fire as
// early as possible (the sharding runtime starts reduce-scatters there).
// Gradients arriving at one place from several consumers are summed.
//
// Without retain_graph each node drops its saved tensors after running; a
// second backward through it then fails with FailedPrecondition.
//
// Callbacks: QueueCallback(fn), called from a hook during backward, runs fn
// once after the whole pass has finished (FSDP waits for its outstanding
// reduce-scatters from such a callback). Backward may be re-entered from a
// node (activation checkpointing recomputes and runs an inner backward);
// callbacks always wait for the outermost pass.
#ifndef ZEROSHARD_AUTOGRAD_ENGINE_H_
#define ZEROSHARD_AUTOGRAD_ENGINE_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/runtime/gpu_timeline.h"
#include "zeroshard/runtime/trace.h"

namespace zeroshard::autograd {

struct BackwardOptions {
  bool retain_graph = false;
};

// `grads[i]` seeds roots[i]; an undefined seed means ones (only for one-element roots).
absl::Status Backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads,
                      const BackwardOptions& options = {});
// Backward of a one-element root (a loss) with seed 1.
absl::Status Backward(const Variable& root, const BackwardOptions& options = {});

// Runs `fn` when the outermost backward pass running on this thread finishes
// (also when called from inside a checkpoint's inner pass). FailedPrecondition
// outside a backward pass.
absl::Status QueueCallback(std::function<absl::Status()> fn);
// True while this thread runs a backward pass.
bool InBackward();

// Records each backward op this thread runs (a node's Apply) as a span named
// after the node, category "op", on `row` of `trace` (Note [Trace layout] in
// runtime/trace.h); nullptr: off, the default (a node then pays one
// thread-local load). Leaf accumulators are left out: their post-accumulate
// hooks issue and wait for collectives, which have spans of their own.
// With `gpu` (a CUDA rank's, same process) each op also gets its GPU span on
// row.Gpu() ("gpu op") and an NVTX range (Note [GPU spans] in
// runtime/gpu_timeline.h); an op run inside another op (a checkpoint's
// recompute) belongs to the outer one's GPU span and range.
void SetBackwardOpTrace(TraceRecorder* trace, TraceRow row, GpuTimeline* gpu = nullptr);

// The forward twin: while SetBackwardOpTrace's trace is set on this thread,
// an op of autograd/ops.h holding one of these is a span named after the op
// ("Linear", the name its backward node has), category "op", and with the
// GPU timeline its "gpu op" span and NVTX range; an op run inside another
// (Gelu inside a checkpointed block's recompute, Neg as Affine) belongs to the
// outer one. So a traced step's spans are every op forward and backward
// (tools/trace_summary --ops: the per-op breakdown). Off: one thread-local load.
//
//   absl::StatusOr<Variable> Linear(...) {
//     ForwardOpSpan span("Linear");
//     ...
class ForwardOpSpan {
 public:
  explicit ForwardOpSpan(const char* name);
  ~ForwardOpSpan();
  ForwardOpSpan(const ForwardOpSpan&) = delete;
  ForwardOpSpan& operator=(const ForwardOpSpan&) = delete;

 private:
  const char* name_;
  TraceRecorder* trace_ = nullptr;  // null: not recording
  GpuTimeline* gpu_ = nullptr;
  GpuMark gpu_mark_;
  double start_us_ = 0;
};

}  // namespace zeroshard::autograd

#endif  // ZEROSHARD_AUTOGRAD_ENGINE_H_
