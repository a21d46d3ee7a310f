// CollectiveTrace: each rank's ring of its last few collectives, so that a
// hang or a mismatch is diagnosable from the log alone.
//
//   CollectiveTrace trace(/*capacity=*/16);
//   trace.Issued(desc);                                   // state "issued"
//   trace.SetState(desc.seq, CollectiveState::kRunning);
//   trace.SetState(desc.seq, CollectiveState::kCompleted);
//   std::cerr << trace.ToString("rank 0 of 4 (local)");
//   //  last 3 collectives of rank 0 of 4 (local), oldest first:
//   //    #10 AllGather #10 (f32, 10 elements per rank)      completed  0.041 ms
//   //    #11 AllReduce #11 (f32, 10 elements, sum)         completed  0.022 ms
//   //    #12 Barrier #12                                   timed out  200.3 ms  (waiting for rank 1)
//
// Every backend owns one (through the Communicator base class); it is the one
// implementation of the ring. Thread-safe: the issuing thread and the
// communication thread both update it.
#ifndef ZEROSHARD_COLLECTIVES_COLLECTIVE_TRACE_H_
#define ZEROSHARD_COLLECTIVES_COLLECTIVE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <mutex>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "zeroshard/collectives/collective_desc.h"

namespace zeroshard {

enum class CollectiveState : uint8_t {
  kIssued = 0,     // accepted, queued behind earlier collectives
  kRunning = 1,    // this rank has arrived and is waiting for or moving data
  kCompleted = 2,
  kFailed = 3,     // an error other than a timeout (mismatch, invalid arguments, ...)
  kTimedOut = 4,
};

absl::string_view CollectiveStateName(CollectiveState state);

class CollectiveTrace {
 public:
  struct Entry {
    CollectiveDesc desc;
    CollectiveState state = CollectiveState::kIssued;
    absl::Time issued;
    absl::Time started;   // kRunning
    absl::Time finished;  // kCompleted / kFailed / kTimedOut
    std::string note;     // e.g. the error's first line
  };

  explicit CollectiveTrace(int capacity = 16);

  void Issued(const CollectiveDesc& desc);
  // No-op for a sequence number that has left the ring.
  void SetState(int64_t seq, CollectiveState state, absl::string_view note = "");
  // SetState unless the entry already has an outcome (completed, failed,
  // timed out): for callers that make sure no entry stays in progress.
  void Finish(int64_t seq, CollectiveState state, absl::string_view note = "");

  // Oldest first.
  std::vector<Entry> Entries() const;
  // A multi-line report headed by `who` (e.g. "rank 0 of 4 (local)").
  std::string ToString(absl::string_view who) const;

 private:
  void Set(int64_t seq, CollectiveState state, absl::string_view note, bool only_in_progress);

  const int capacity_;
  // std::mutex: see Note [std::mutex on the collective path] in work.h.
  mutable std::mutex mu_;  // guards the two below
  std::vector<Entry> ring_;
  int64_t next_ = 0;  // total entries ever added
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_COLLECTIVE_TRACE_H_
