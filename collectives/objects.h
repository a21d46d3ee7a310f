// Collectives on plain values rather than tensors: the strategy helpers a
// Lightning user expects (`strategy.barrier()`, `strategy.broadcast(obj)`,
// `strategy.reduce(metric, reduce_op="mean")`), built on the tensor
// collectives of a Communicator. Every rank must call them in the same order,
// as with any collective.
//
//   std::string run_name = ...;                        // meaningful on rank 0
//   ZS_RETURN_IF_ERROR(BroadcastString(comm, &run_name, /*root=*/0));
//   ZS_ASSIGN_OR_RETURN(double acc, ReduceValue(comm, local_acc, ReduceOp::kAvg));
#ifndef ZEROSHARD_COLLECTIVES_OBJECTS_H_
#define ZEROSHARD_COLLECTIVES_OBJECTS_H_

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"

namespace zeroshard {

// Every rank ends with root's string (any length, any bytes).
absl::Status BroadcastString(Communicator& comm, std::string* value, int root);

// Every rank ends with root's value of a trivially copyable type.
template <typename T>
absl::Status BroadcastValue(Communicator& comm, T* value, int root) {
  static_assert(std::is_trivially_copyable_v<T>, "BroadcastValue needs a trivially copyable type");
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), value, sizeof(T));
  absl::Status s = BroadcastString(comm, &bytes, root);
  if (!s.ok()) return s;
  std::memcpy(value, bytes.data(), sizeof(T));
  return absl::OkStatus();
}

// Every rank's string (any length, any bytes), in rank order. The tensors go
// through `allocator` (nullptr: host memory), so it works on a communicator of
// device tensors too (NCCL).
absl::StatusOr<std::vector<std::string>> AllGatherStrings(Communicator& comm, const std::string& mine,
                                                          Allocator* allocator = nullptr);

// A scalar metric reduced over the ranks (kSum, kAvg, kMax) in double: every
// rank's value is all-gathered (its 64 bits, as i64) and reduced in rank
// order, so every rank gets the same double, with no fp32 rounding.
absl::StatusOr<double> ReduceValue(Communicator& comm, double value, ReduceOp op);

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_OBJECTS_H_
