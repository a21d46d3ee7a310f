// Communication hooks: the all-gather of a unit's parameters and the
// reduce-scatter of its gradients go through a replaceable CommHook, which may
// change what travels (dtype, layout, group), as PyTorch FSDP's comm hooks and
// DeepSpeed's ZeRO++ do. ShardingOptions::comm_hook names one:
//
//   options.comm_hook.name = "qwz";          // parameters gathered as int8 blocks
//   options.comm_hook.block_size = 256;      // elements per scale
//   ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, options));
//
// Built in (Note [ZeRO++ hooks] in comm_hook.cc has the data flow of each):
//   none    the plain collectives in the parameters' and gradients' dtypes
//   qwz     ZeRO++ qwZ: each rank quantizes its (param_dtype) shard into
//           blocks of `block_size` int8 (or `param_bits` 4) values with an f32
//           scale each, the packed bytes are all-gathered and every rank
//           dequantizes every shard, its own too, so all ranks compute with
//           the same weights. The f32 master shard is never quantized.
//   qgz     ZeRO++ qgZ: gradients are quantized per destination shard
//           (`grad_bits` 8 or 4) and exchanged by all-to-all; each rank
//           dequantizes what it received and reduces in f32. With
//           1 < group_size < shard group size it is the two-step scheme: an
//           all-to-all inside each group of `group_size` ranks (a node), a
//           reduction in f32 and a requantization, then an all-to-all across
//           groups. Quantization error enters once per step, not once per
//           ring hop, so it does not grow with the rank count.
//   hpz     ZeRO++ hpZ (FSDP2's reshard_after_forward=<int>): after a unit's
//           forward each rank keeps the slice of the gathered parameters that
//           is its part of a secondary partition over `group_size` ranks (a
//           node), and backward re-gathers from that smaller group instead of
//           the whole shard group: padded_numel / group_size more bytes held
//           per unit between forward and backward, for backward's gather
//           traffic kept inside the group. Bitwise the values of `none`.
//   zeropp  all three: qwZ for forward's gathers, hpZ for backward's, qgZ for
//           the gradients (ZeRO++ as its paper runs it).
// group_size 0 means the ranks of the shard group on this rank's host (found
// by comparing host names at setup), which must be consecutive ranks.
//
// A hook of one's own: subclass CommHook, override what it changes, and
// register a factory by name (ZS_REGISTER_COMM_HOOK, or
// CommHookRegistry::Global().Register) from any linked code; the config's
// strategy.comm_hook then takes that name. Every rank must make the same calls
// in the same order with the same sizes (they are collectives).
//
// Bytes on the wire: every collective a hook issues goes through a
// communicator split from the shard group, so Communicator::bytes_sent (and the
// job's comm_bytes_per_step) counts it in its wire dtype (int8 for qwz, qgz).
#ifndef ZEROSHARD_SHARDING_COMM_HOOK_H_
#define ZEROSHARD_SHARDING_COMM_HOOK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/sharding/sharding_options.h"

namespace zeroshard {

// The all-gather of one unit's parameters: fill `full` ([padded_numel],
// param_dtype) on every rank of the group; `mine` is this rank's slice of it
// and already holds this rank's values.
struct GatherCall {
  int unit = 0;       // ShardedUnit::index
  Tensor mine;
  Tensor full;
  bool backward = false;  // the re-gather of backward (after the unit's forward)
  CollectiveOptions opts;
};

// The reduction of one unit's gradients: `mine` (this rank's slice of
// `full_grad`, [padded_numel] reduce_dtype) receives op over the group of
// every rank's full_grad slice for this rank.
struct ReduceCall {
  int unit = 0;
  Tensor full_grad;
  Tensor mine;
  ReduceOp op = ReduceOp::kAvg;
  CollectiveOptions opts;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  // The registered name.
  virtual std::string name() const = 0;
  // Once per ShardedModel, on every rank together, after its groups exist:
  // split sub-groups, learn the topology. `allocator` is the rank's device
  // memory (wire buffers, secondary shards).
  virtual absl::Status Setup(Communicator& shard_group, Allocator* allocator);
  // Starts the gather; the Work completes when `full` is filled. Default: the
  // plain all-gather.
  virtual absl::StatusOr<std::shared_ptr<Work>> AllGather(Communicator& shard_group, const GatherCall& call);
  // A unit is about to be freed after its forward and a backward will
  // re-gather it; `full` still holds the gathered parameters. Default: nothing.
  virtual absl::Status BeforeReshardAfterForward(int unit, const Tensor& full);
  // Starts the reduction; the Work completes when `mine` holds the result.
  // Default: the plain reduce-scatter.
  virtual absl::StatusOr<std::shared_ptr<Work>> ReduceScatter(Communicator& shard_group, const ReduceCall& call);
  // The end of a backward pass: drop what was kept for it.
  virtual void EndBackward() {}
  // Device bytes the hook holds now beyond the model's own buffers.
  virtual int64_t HeldBytes() const { return 0; }
  // For ShardedModel::ToString: the name and what it resolved (groups, bits).
  virtual std::string ToString() const { return name(); }
};

using CommHookFactory = std::function<absl::StatusOr<std::unique_ptr<CommHook>>(const CommHookOptions&)>;

class CommHookRegistry {
 public:
  // The process's registry, the built-in hooks registered.
  static CommHookRegistry& Global();

  // InvalidArgument for a name that is not a lowercase identifier or a null
  // factory; AlreadyExists for a name registered before.
  absl::Status Register(std::string name, std::string description, CommHookFactory factory);
  bool Has(absl::string_view name) const;
  // "hpz, none, qgz, qwz, zeropp".
  std::string NamesText() const;
  // A new hook for options.name; NotFound naming the registered hooks.
  absl::StatusOr<std::unique_ptr<CommHook>> Create(const CommHookOptions& options) const;

 private:
  struct Entry {
    std::string description;
    CommHookFactory factory;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
};

struct CommHookRegistrar {
  CommHookRegistrar(std::string name, std::string description, CommHookFactory factory);
};

// At namespace scope in a .cc that is linked in (alwayslink, or a binary's own source).
#define ZS_REGISTER_COMM_HOOK(var, name, description, factory) \
  static ::zeroshard::CommHookRegistrar var(name, description, factory)

}  // namespace zeroshard

#endif  // ZEROSHARD_SHARDING_COMM_HOOK_H_
