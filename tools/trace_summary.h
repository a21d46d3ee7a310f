// trace_summary: exposed communication per step and per unit from a Chrome
// trace (the job's --trace, zs_simulate's --trace, or any trace with complete
// "X" events), by interval arithmetic on each rank's spans.
//
//   tools/trace_summary trace.json
//
//   ZS_ASSIGN_OR_RETURN(TraceSummary s, SummarizeTraceFile("trace.json"));
//   std::printf("%s", FormatSummary(s).c_str());   // ends "exposed_comm_fraction 0.213000"
//
// Note [Exposed communication]
//   A rank is a process (pid; Note [Trace layout] in runtime/trace.h). Each of
//   its complete events is, by category then name:
//     step     cat "step", or a name starting "ProfilerStep#" (PyTorch): the windows
//     wait     cat "wait": the rank blocked on a collective
//     ignored  cat "issued" (the sharding runtime's issue-to-completion view)
//     peers    cat "peers": the rank's collective waited for its peers to
//              arrive before the transfer (Note [Communication spans] in
//              collectives/communicator.h)
//     comm     cat "comm", a category containing "comm" or "nccl", or a name
//              containing "nccl" (any case)
//     compute  everything else (compute, op, copy, PyTorch's kernels and ops)
//   busy    = union(compute) - union(wait): compute spans enclose the waits
//             inside them (a unit's forward includes waiting for its gather)
//   comm    = union(comm)
//   exposed = comm - busy: communication the rank's compute did not hide
//   idle    = window - (busy + comm)
//   peer wait = union(peers) - busy - comm: part of idle, the time a rank's
//             collectives waited for late peers (skew, a straggler, ranks
//             sharing cores), not communication to hide by overlap
//   each measured inside every step window (no step span on a rank: one
//   window from its first event's start to its last event's end).
//   Units are named by compute spans "forward <unit>" and "backward <unit>";
//   a unit's compute is the busy time whose innermost unit span is its (the
//   root unit's spans enclose the others'); its comm and exposed are those of
//   the comm spans whose name ends with " <unit>" ("all-gather <unit>"). Two
//   units' collectives in flight at once count for both, so the per-unit
//   figures may add up to more than the rank's.
//   exposed_comm_fraction = sum over ranks of exposed / sum over ranks of
//   the windows' length.
//   GPU rows: a rank with spans of category "gpu ..." (the job's trace on
//   CUDA devices: gpu compute, gpu op, gpu wait, gpu comm; Note [GPU spans]
//   in runtime/gpu_timeline.h) is measured on those alone, each read as its
//   category without "gpu " (gpu wait is a wait, gpu comm communication):
//   what the device ran rather than when the host launched it. Its host
//   spans give only the step windows. The table names such a rank "on its
//   GPU rows".
#ifndef ZEROSHARD_TOOLS_TRACE_SUMMARY_H_
#define ZEROSHARD_TOOLS_TRACE_SUMMARY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard::tools {

// Sorted, disjoint, non-empty [lo, hi) intervals (microseconds).
struct Interval {
  double lo = 0, hi = 0;
};
using Intervals = std::vector<Interval>;

Intervals Union(std::vector<Interval> spans);
Intervals Subtract(const Intervals& a, const Intervals& b);
Intervals Intersect(const Intervals& a, const Intervals& b);
double Length(const Intervals& a);

struct WindowFigures {
  std::string name;
  double start_us = 0, dur_us = 0;
  double compute_us = 0, comm_us = 0, exposed_us = 0, idle_us = 0;
  double peer_wait_us = 0;
};

struct UnitFigures {
  std::string unit;
  double compute_us = 0, comm_us = 0, exposed_us = 0;
};

// Note [Per-op breakdown]
//   The spans of category "op" (on GPU rows "gpu op": the job's traced steps
//   name every autograd op forward, ForwardOpSpan, and backward, the node's
//   Apply, by the op: "Linear", "LayerNorm", ...) summed by name inside the
//   step windows, each as a fraction of the windows' length. Op spans do not
//   nest (an op inside an op belongs to the outer one), so the fractions add
//   up to at most 1; the rest is units' own work, collectives, optimizer,
//   launch gaps. GEMM ops are those whose time is matrix products on tensor
//   cores (IsGemmOp: Linear, MatMul, Attention's fused kernels, Conv2d); the
//   largest other op is the figure the GPU issue's "no non-GEMM op above 5% of
//   the step" reads.
struct OpFigures {
  std::string name;
  int64_t count = 0;
  double total_us = 0;
  double fraction = 0;  // of the step windows
};
bool IsGemmOp(absl::string_view name);

struct RankSummary {
  std::string pid;   // as the trace writes it
  std::string name;  // its process_name, or ""
  bool gpu_rows = false;  // measured on its GPU rows (Note [Exposed communication])
  std::vector<WindowFigures> steps;
  WindowFigures total;               // the steps together
  std::vector<UnitFigures> units;    // in the order their first span starts; "(no unit)" last
  std::vector<OpFigures> ops;        // Note [Per-op breakdown], largest first
};

struct TraceSummary {
  int events = 0;  // complete events read
  std::vector<RankSummary> ranks;
  double exposed_us = 0, window_us = 0, peer_wait_us = 0;
  double exposed_comm_fraction = 0;
  double peer_wait_fraction = 0;  // summed peer wait over summed windows
  bool has_peer_spans = false;
};

// `json_text`: {"traceEvents": [...]} or a bare array of events.
// InvalidArgument saying what was expected and what was found.
absl::StatusOr<TraceSummary> SummarizeTrace(absl::string_view json_text);
absl::StatusOr<TraceSummary> SummarizeTraceFile(const std::string& path);

// Per rank a table of steps and one of units (milliseconds), then the lines
// "exposed_comm_fraction <x>" and, where the trace has "peers" spans,
// "peer_wait_fraction <y>".
// With `ops`, each rank also gets its per-op table (Note [Per-op breakdown])
// and the line "largest_non_gemm_op <name> <fraction>".
std::string FormatSummary(const TraceSummary& summary, bool ops = false);

}  // namespace zeroshard::tools

#endif  // ZEROSHARD_TOOLS_TRACE_SUMMARY_H_
