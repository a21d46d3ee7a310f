// VirtualCommunicator: the simulator's backend. It moves no bytes: each
// collective takes the time a network model gives it on a stream of its own
// on a virtual device (runtime/virtual_device.h), ordered with the caller's
// stream by the same rules as NCCL's (the collective starts after the work
// enqueued so far on CollectiveOptions::stream; Work::Block makes a stream
// wait for it; Work::Wait makes the host wait).
//
//   MyNetwork net;                                    // seconds per collective (sim/cost_model.h)
//   VirtualCommunicator::Options o{.network = &net, .gpus_per_node = 8};
//   o.splits = {{.size = 8, .stride = 1}, {.size = 128, .stride = 8}};   // HYBRID_SHARD's two splits
//   ZS_ASSIGN_OR_RETURN(auto world, VirtualCommunicator::Create(/*rank=*/0, /*size=*/1024, dev->device(), o));
//   ShardedModel::Create(model, *world, sharding) ...   // the real runtime, one rank of 1024
//
// Note [One representative rank]
// FSDP is SPMD: every rank runs the same schedule on the same shapes, so the
// simulator runs one rank and the others are implied. A collective ends when
// the slowest peer has arrived and the transfer is done: `straggler_seconds`
// delays every collective's start by that much (a slow peer), `jitter_seconds`
// by the latest of the peers' random delays (the rank waits in the collective
// meanwhile), and the network model gives the transfer's time. Split cannot learn the groups from peers
// that do not run, so the caller declares them in `splits`, one per Split
// call in order, as regular tilings of the parent's ranks: stride 1 makes
// blocks of `size` consecutive ranks (rank / size is the color), stride k
// makes groups {r, r + k, r + 2k, ...} (rank % k is the color). A group's
// layout on the cluster (how many of its ranks share a node) follows from its
// stride in world ranks and `gpus_per_node`.
#ifndef ZEROSHARD_COLLECTIVES_VIRTUAL_COMMUNICATOR_H_
#define ZEROSHARD_COLLECTIVES_VIRTUAL_COMMUNICATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"

namespace zeroshard {

// Where a communicator's ranks sit on the cluster.
struct VirtualGroup {
  int size = 1;            // ranks in the group
  int ranks_per_node = 1;  // of them on one node (size / ranks_per_node nodes)
  int world_stride = 1;    // distance in world ranks between consecutive members
};

// Seconds per collective; sim/ implements it from a hardware profile.
class VirtualNetwork {
 public:
  virtual ~VirtualNetwork() = default;
  // `bytes`: the full buffer (all-gather output, reduce-scatter input, all-reduce buffer,
  // all-to-all input).
  virtual double CollectiveSeconds(CollectiveOp op, int64_t bytes, const VirtualGroup& group) const = 0;
  // Bytes this rank sends for it (ring algorithms: (n-1)/n of the buffer, twice for all-reduce;
  // all-to-all: the n-1 blocks that leave the rank, (n-1)/n of its input).
  virtual double BytesSent(CollectiveOp op, int64_t bytes, const VirtualGroup& group) const = 0;
};

// One Split's groups as a tiling of the parent's ranks (Note [One representative rank]).
struct VirtualSplit {
  int size = 1;
  int stride = 1;
};

struct VirtualCommunicatorOptions {
  CommunicatorOptions common;
  const VirtualNetwork* network = nullptr;  // required; must outlive the communicator
  int gpus_per_node = 8;
  double straggler_seconds = 0;  // every collective waits this long for a slow peer
  // Jitter: each peer arrives late by an exponential delay of this mean J; a
  // collective waits for the last of its n - 1 peers, the max of n - 1 draws
  // (expected J H(n-1), about J ln n: stragglers cost more as the world
  // grows), drawn directly as -J ln(1 - u^(1/(n-1))) from a seeded generator.
  double jitter_seconds = 0;
  // Note [Waking on shared cores]: with more rank threads than cores (CPU
  // ranks on an oversubscribed machine), a rank that waits on a collective
  // gets a core back this long after it ends, and a collective issued while
  // the rank computes does not progress until the rank waits: each wait after
  // compute costs at least this. 0 (GPUs, enough cores): waits end with the
  // collective. It is measured for groups of `wake_group_size` ranks; a group
  // of g ranks wakes in wake_seconds (g - 1) / (wake_group_size - 1): a rank
  // woken with g - 1 peers' threads queues behind some of them for a core,
  // on average a number proportional to g - 1 (0: every group takes
  // wake_seconds).
  double wake_seconds = 0;
  int wake_group_size = 0;
  uint64_t seed = 1;
  std::vector<VirtualSplit> splits;
};

// What a communicator moved, per collective kind (and in total).
struct VirtualCommTotals {
  int64_t count[kNumCollectiveOps] = {};  // by CollectiveOp (Split: never counted)
  double bytes_sent[kNumCollectiveOps] = {};
  double seconds[kNumCollectiveOps] = {};
  int64_t total_count() const;
  double total_bytes_sent() const;
  double total_seconds() const;
};

class VirtualCommunicator final : public Communicator {
 public:
  using Options = VirtualCommunicatorOptions;

  static absl::StatusOr<std::unique_ptr<VirtualCommunicator>> Create(int rank, int size, Device device,
                                                                     Options options);
  ~VirtualCommunicator() override;

  absl::string_view backend() const override { return "virtual"; }
  const VirtualGroup& group() const { return group_; }
  // This communicator's figures; groups split from it keep their own.
  const VirtualCommTotals& totals() const { return totals_; }
  // The device stream its collectives run on.
  int stream() const { return stream_; }

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override;

 private:
  VirtualCommunicator(int rank, VirtualGroup group, Device device, Options options, int stream);

  const VirtualGroup group_;
  const Options options_;
  const int stream_;
  std::deque<VirtualSplit> pending_splits_;
  uint64_t draws_ = 0;  // jitter draws so far
  VirtualCommTotals totals_;
  // When the rank's last wake ended (Note [Waking on shared cores]); shared
  // with the groups split from this communicator: one rank, one thread.
  std::shared_ptr<double> last_wake_end_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_VIRTUAL_COMMUNICATOR_H_
