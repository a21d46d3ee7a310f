// CollectiveDesc: what one rank asked for in one collective, and the check
// that every rank asked for the same thing.
//
//   CollectiveDesc d{.seq = 12, .op = CollectiveOp::kAllGather, .dtype = DType::kF32,
//                    .count = 10};
//   d.ToString();   // "AllGather #12 (f32, 10 elements per rank)"
//
//   // Check mode: the descriptors of all ranks, indexed by rank.
//   absl::Status s = CheckSameCollective(descs);
//   // InvalidArgument: "collective mismatch at #12: rank 2 issued AllGather #12 (f32,
//   //   12 elements per rank), ranks 0, 1, 3 issued AllGather #12 (f32, 10 elements per rank)"
//
// The descriptor is a fixed-size value (no pointers) so the MPI backend can
// send it as bytes. `count` is always the per-rank INPUT element count; the
// output count follows from the op (see Note [Collective layouts] in
// collectives/communicator.h).
#ifndef ZEROSHARD_COLLECTIVES_COLLECTIVE_DESC_H_
#define ZEROSHARD_COLLECTIVES_COLLECTIVE_DESC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "zeroshard/collectives/reduction.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard {

enum class CollectiveOp : uint8_t {
  kAllGather = 0,
  kReduceScatter = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kBarrier = 4,
  kSplit = 5,
  kAllToAll = 6,
};
// One more than the largest CollectiveOp: arrays indexed by op.
inline constexpr int kNumCollectiveOps = 7;

// "AllGather", "ReduceScatter", "AllReduce", "Broadcast", "Barrier", "Split",
// "AllToAll".
absl::string_view CollectiveOpName(CollectiveOp op);

struct CollectiveDesc {
  int64_t seq = 0;  // per communicator, 1 for the first collective
  CollectiveOp op = CollectiveOp::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp reduce_op = ReduceOp::kSum;  // ReduceScatter, AllReduce
  bool in_place = false;                // not compared across ranks
  // True when this rank's arguments failed their local check: it still joins
  // the rendezvous so that every rank fails the collective together.
  bool invalid_args = false;
  int32_t root = 0;    // Broadcast
  int64_t count = 0;   // elements of this rank's input
  int32_t color = 0;   // Split (differs across ranks by design)
  int32_t key = 0;     // Split

  // "AllReduce #3 (bf16, 1000 elements, sum, in place)".
  std::string ToString() const;
  // True when two ranks' descriptors describe the same collective (every
  // field but in_place, color and key).
  bool SameCollective(const CollectiveDesc& other) const;
};

// Check mode: OK when every rank issued the same collective. Otherwise an
// InvalidArgument naming the rank(s) that differ from the majority (rank 0's
// side on a tie) and what each side issued. A rank with `invalid_args` is
// named as having failed its own argument check.
absl::Status CheckSameCollective(absl::Span<const CollectiveDesc> per_rank);

// "AllGather #3 on rank 1 of 4: " - the prefix of every error message.
std::string ErrorPrefix(const CollectiveDesc& desc, int rank, int size);

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_COLLECTIVE_DESC_H_
