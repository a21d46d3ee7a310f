// One trace for a multi-process run: each rank's clock aligned to rank 0's,
// and every rank's spans merged into rank 0's recorder, which writes the file.
//
//   TraceRecorder trace;                                  // this process's
//   ZS_ASSIGN_OR_RETURN(ClockOffset offset, MeasureClockOffset(comm, trace));
//   ... record the traced steps (a process per rank, runtime/trace.h) ...
//   ZS_RETURN_IF_ERROR(GatherTrace(comm, trace, offset));
//   if (comm.rank() == 0) ZS_RETURN_IF_ERROR(trace.WriteJson(path));
//
// Note [Merged traces]
//   Every process's TraceRecorder counts from its own creation, so the raw
//   times of two ranks do not compare. MeasureClockOffset runs `rounds`
//   rounds of
//       t_send = now();  Barrier();  rank 0: t_root = now();
//       Broadcast(t_root from rank 0);  t_recv = now()
//   Rank 0 leaves the barrier only after every rank entered it, and a rank
//   leaves the broadcast only after rank 0 read t_root, so rank 0 read its
//   clock at an instant when this rank's clock read some L in [t_send,
//   t_recv]. With offset = rank 0's clock - this rank's clock, the estimate
//       offset ~ t_root - (t_send + t_recv) / 2
//   is off by |L - midpoint| <= (t_recv - t_send) / 2 = bound; the round with
//   the shortest round trip gives the tightest bound (EstimateClockOffset).
//   Drift after the measurement is not corrected (steady clocks drift by
//   parts per million: microseconds over the seconds a trace covers).
//   GatherTrace then sends each rank's spans, shifted by its offset, to rank
//   0 (a broadcast per rank of Serialize's bytes, through the communicator)
//   and records every rank's offset and bound in the trace's otherData
//   ("clock_alignment"). In-process ranks share one recorder and one clock:
//   nothing to align or merge, and the file has the same layout.
#ifndef ZEROSHARD_COLLECTIVES_TRACE_MERGE_H_
#define ZEROSHARD_COLLECTIVES_TRACE_MERGE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/trace.h"

namespace zeroshard {

// One round of Note [Merged traces]: this rank's clock at send and receive,
// rank 0's clock between them (microseconds).
struct ClockSample {
  double t_send_us = 0, t_root_us = 0, t_recv_us = 0;
};

struct ClockOffset {
  double offset_us = 0;  // add to this rank's times to get rank 0's
  double bound_us = 0;   // the estimate is within this of the true offset
  int rounds = 0;        // samples it was chosen from
};

// The midpoint estimate from the sample with the shortest round trip:
// offset = t_root - (t_send + t_recv) / 2, bound = (t_recv - t_send) / 2.
// InvalidArgument for no samples or a sample received before it was sent.
absl::StatusOr<ClockOffset> EstimateClockOffset(absl::Span<const ClockSample> samples);

// This rank's offset to rank 0's clock, as `clock` counts (collective: every
// rank calls it; rank 0 gets {0, 0}). `rounds` >= 1.
absl::StatusOr<ClockOffset> MeasureClockOffset(Communicator& comm, const TraceRecorder& clock, int rounds = 8);

// Collective: every rank's spans and names, shifted by its `offset`, are
// merged into rank 0's `trace` (other ranks' recorders are left as they
// are), with the offsets in otherData "clock_alignment".
absl::Status GatherTrace(Communicator& comm, TraceRecorder& trace, const ClockOffset& offset);

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_TRACE_MERGE_H_
