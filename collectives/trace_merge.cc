#include "zeroshard/collectives/trace_merge.h"

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/collectives/objects.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::StatusOr<ClockOffset> EstimateClockOffset(absl::Span<const ClockSample> samples) {
  if (samples.empty()) return absl::InvalidArgumentError("EstimateClockOffset: expected at least one sample, found none");
  const ClockSample* best = nullptr;
  for (size_t i = 0; i < samples.size(); ++i) {
    const ClockSample& s = samples[i];
    if (!(s.t_recv_us >= s.t_send_us)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "EstimateClockOffset: sample %d was received at %.3f us, before it was sent at %.3f us (expected "
          "t_recv >= t_send on one clock)",
          i, s.t_recv_us, s.t_send_us));
    }
    if (best == nullptr || s.t_recv_us - s.t_send_us < best->t_recv_us - best->t_send_us) best = &s;
  }
  return ClockOffset{.offset_us = best->t_root_us - (best->t_send_us + best->t_recv_us) / 2,
                     .bound_us = (best->t_recv_us - best->t_send_us) / 2,
                     .rounds = static_cast<int>(samples.size())};
}

absl::StatusOr<ClockOffset> MeasureClockOffset(Communicator& comm, const TraceRecorder& clock, int rounds) {
  if (rounds < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MeasureClockOffset: expected rounds >= 1, found ", rounds));
  }
  ZS_ASSIGN_OR_RETURN(Tensor root_time, Tensor::Zeros({1}, DType::kI64));
  std::vector<ClockSample> samples;
  for (int i = 0; i < rounds; ++i) {
    ClockSample s;
    s.t_send_us = clock.NowUs();
    ZS_RETURN_IF_ERROR(comm.Barrier());
    if (comm.rank() == 0) {
      const double t = clock.NowUs();
      *static_cast<int64_t*>(root_time.raw_data()) = std::bit_cast<int64_t>(t);
    }
    ZS_RETURN_IF_ERROR(comm.Broadcast(root_time, /*root=*/0));
    s.t_recv_us = clock.NowUs();
    s.t_root_us = std::bit_cast<double>(*static_cast<const int64_t*>(root_time.raw_data()));
    samples.push_back(s);
  }
  if (comm.rank() == 0) return ClockOffset{.rounds = rounds};
  return EstimateClockOffset(samples);
}

absl::Status GatherTrace(Communicator& comm, TraceRecorder& trace, const ClockOffset& offset) {
  // Every rank's offset and bound, to record beside the spans.
  ZS_ASSIGN_OR_RETURN(Tensor mine, Tensor::Zeros({2}, DType::kI64));
  static_cast<int64_t*>(mine.raw_data())[0] = std::bit_cast<int64_t>(offset.offset_us);
  static_cast<int64_t*>(mine.raw_data())[1] = std::bit_cast<int64_t>(offset.bound_us);
  ZS_ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({2 * comm.size()}, DType::kI64));
  ZS_RETURN_IF_ERROR(comm.AllGather(mine, all));
  // One rank at a time, so no process holds more than its own and one other
  // rank's bytes (a gather to rank 0 is a broadcast here: every rank receives).
  for (int r = 1; r < comm.size(); ++r) {
    std::string bytes;
    if (comm.rank() == r) bytes = trace.Serialize(offset.offset_us);
    ZS_RETURN_IF_ERROR(BroadcastString(comm, &bytes, r));
    if (comm.rank() == 0) {
      absl::Status s = trace.Merge(bytes);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("GatherTrace: rank ", r, "'s spans: ", s.message()));
    }
  }
  if (comm.rank() != 0) return absl::OkStatus();
  const int64_t* v = static_cast<const int64_t*>(all.raw_data());
  std::string offsets, bounds;
  for (int r = 0; r < comm.size(); ++r) {
    absl::StrAppendFormat(&offsets, "%s%.3f", r ? ", " : "", std::bit_cast<double>(v[2 * r]));
    absl::StrAppendFormat(&bounds, "%s%.3f", r ? ", " : "", std::bit_cast<double>(v[2 * r + 1]));
  }
  trace.SetOtherData("clock_alignment",
                     absl::StrFormat("{\"method\": \"barrier and broadcast, midpoint of the shortest of %d round "
                                     "trips (collectives/trace_merge.h)\", \"offset_us\": [%s], \"bound_us\": [%s]}",
                                     offset.rounds, offsets, bounds));
  return absl::OkStatus();
}

}  // namespace zeroshard
