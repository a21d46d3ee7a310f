// The options of a ShardedModel, in PyTorch FSDP's terms.
//
//   ShardingOptions options;
//   options.strategy = ShardingStrategy::kFullShard;          // FSDP's FULL_SHARD (ZeRO-3)
//   options.wrap = WrapPolicy::ByType({"Block"});              // one unit per transformer block
//   options.backward_prefetch = BackwardPrefetch::kBackwardPre;
//   options.forward_prefetch = true;
//   options.limit_all_gathers = 2;                             // gathered units in flight
//   ZS_RETURN_IF_ERROR(options.Validate(world_size));
//
// Strategies, as shard group size S and what happens to a gathered unit:
//   kFullShard    S = world size; parameters resharded after forward and after backward
//   kShardGradOp  S = world size; kept gathered from forward until after backward (ZeRO-2)
//   kNoShard      S = 1 (every rank holds everything); gradients all-reduced (DDP)
//   kHybridShard  S = hybrid_shard_size; sharded inside groups of S consecutive ranks,
//                 replicated across them; resharded like kFullShard. 0 (the
//                 default): the ranks of a node (Note [Hybrid shard groups]
//                 in sharded_model.h), resolved by ShardedModel::Create
//   kShardOptimizer S = world size; kept gathered like kShardGradOp, but gradients
//                 are replicated (ZeRO-1, DeepSpeed's stage 1): only the
//                 optimizer state and the f32 master shards are sharded
// Gradients are reduce-scattered (averaged) inside the shard group, then
// all-reduced (averaged) across the replica groups; under kShardOptimizer the
// whole flat gradient is all-reduced (averaged) instead and every rank keeps
// it (Note [Replicated gradients] in sharded_model.h).
#ifndef ZEROSHARD_SHARDING_SHARDING_OPTIONS_H_
#define ZEROSHARD_SHARDING_SHARDING_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/nvme/aio_options.h"
#include "zeroshard/runtime/nvme/swap_space.h"

namespace zeroshard {

namespace nn {
class Module;
}

// kShardOptimizer is ZeRO-1 (DeepSpeed zero_optimization.stage 1), kShardGradOp
// ZeRO-2 (stage 2), kFullShard ZeRO-3 (stage 3), kNoShard DDP (stage 0).
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard, kShardOptimizer };
enum class BackwardPrefetch { kNone, kBackwardPre, kBackwardPost };

// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD" (FSDP's names) and
// "SHARD_OPTIMIZER" (ZeRO-1; FSDP has none).
absl::string_view ShardingStrategyName(ShardingStrategy s);
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name);
// "BACKWARD_PRE", "BACKWARD_POST", "NONE".
absl::string_view BackwardPrefetchName(BackwardPrefetch p);
absl::StatusOr<BackwardPrefetch> ParseBackwardPrefetch(absl::string_view name);

// Which modules become units (FSDP's auto_wrap_policy). A module that matches
// becomes a unit holding its parameters not held by a unit below it; the root
// unit holds the rest. The root itself never matches. By size, containers
// (ModuleList, ModuleDict: no forward of their own) never match either.
// Every policy may split a tied parameter's modules (GPT's wte and lm_head):
// the parameter then lives in their lowest common ancestor's unit (Note [Tied
// parameters] in sharded_model.h).
struct WrapPolicy {
  enum class Kind { kNone, kByType, kBySize, kCustom };
  Kind kind = Kind::kNone;
  std::set<std::string> types;  // kByType: Module::type_name() values
  int64_t min_num_params = 0;   // kBySize: wrap when a subtree holds >= this many unwrapped params
  std::function<bool(const nn::Module& module, const std::string& name, int64_t unwrapped_params)>
      custom;

  static WrapPolicy None() { return {}; }
  static WrapPolicy ByType(std::set<std::string> types);
  static WrapPolicy BySize(int64_t min_num_params);
  std::string ToString() const;
};

// Mixed precision (FSDP's MixedPrecision): the dtype of the gathered
// parameters and of compute, of gradient reduction, and of buffers. Master
// weights and optimizer state stay f32.
//
// Note [BatchNorm under mixed precision]
// Modules whose type is in fp32_module_types (FSDP's
// _module_classes_to_ignore, default its _BatchNorm) run in fp32 whatever
// param_dtype says: when param_dtype or reduce_dtype is not f32, each such
// module becomes a unit of its own (whatever the wrap policy) whose
// parameters are gathered and reduced in f32. Their buffers (running
// statistics) are f32 tensors that are never cast or sharded.
struct MixedPrecision {
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  DType buffer_dtype = DType::kF32;
  std::set<std::string> fp32_module_types = {"BatchNorm2d"};
  // FSDP's keep_low_precision_grads: a unit's gradient shard stays in its
  // reduce_dtype (half the bytes of f32) instead of being upcast to f32, and
  // accumulates there; the optimizer widens it to f32 as it reads it
  // (optim/adamw.h, sgd.h), clipping and norms work on it in place. No effect
  // on units reduced in f32 (reduce_dtype f32, fp32 modules).
  bool keep_low_precision_grads = false;
  // True when some dtype is not f32 (fp32 modules then get units of their own).
  bool active() const { return param_dtype != DType::kF32 || reduce_dtype != DType::kF32; }
  std::string ToString() const;
};

// Where NVMe-offloaded state lives and how it moves (DeepSpeed's
// offload_optimizer / offload_param blocks with device "nvme").
struct NvmeOffload {
  std::string path;       // nvme_path: an existing, writable directory (a local NVMe mount)
  int buffer_count = 4;   // swap buffers of the largest unit's region (>= 1; 3 reads ahead and writes behind)
  bool pin_memory = false;  // page-lock the buffers
  // Parameters only (DeepSpeed's max_in_cpu): elements of master shards kept
  // in host memory; whole units, in unit order, while they fit; the rest on NVMe.
  int64_t max_in_cpu = 0;
  // Overlap I/O with compute (DeepSpeed's pipeline_read / pipeline_write):
  // read the next units ahead, write back in the background.
  bool read_ahead = true;
  bool write_behind = true;
  std::string ToString() const;
};

// CPU offload (FSDP's CPUOffload, DeepSpeed's ZeRO-Offload): which of this
// rank's persistent buffers live in host memory instead of the device. On a
// GPU the device keeps only what a step needs transiently (gathered units,
// flat gradients, activations); on the CPU-only machines here the "device" is
// an allocator with its own budget, so the figures show the same split.
//   params:    the f32 master shards (copied to the device slice before each gather)
//   grads:     the reduced gradient shards (copied to the host after each reduction)
//   optimizer: the optimizer state (the step then runs on the host, so it
//              implies params and grads on the host too)
// NVMe offload (ZeRO-Infinity; Note [NVMe offload] in sharded_model.h) goes
// one level further: files under an NVMe path, swapped through host buffers.
//   nvme_optimizer: the optimizer state (Adam moments, SGD momentum) of each
//              unit is a region of a swap file, read for the unit's step and
//              written back after it (implies `optimizer`: the step is on the host)
//   nvme_params: the f32 master shards too (beyond max_in_cpu), read before
//              the unit's all-gather and for its step (implies `params`)
struct OffloadPolicy {
  bool params = false;
  bool grads = false;
  bool optimizer = false;
  bool nvme_optimizer = false;
  bool nvme_params = false;
  NvmeOffload optimizer_nvme;                        // DeepSpeed's default buffer_count 4
  NvmeOffload param_nvme{.buffer_count = 5};         // and 5
  AioOptions aio;
  // Check mode: every region's CRC-32C is recorded as it is written and
  // verified after each read (a file changed underneath is a DataLoss, never
  // silent garbage); costs a checksum pass per transfer.
  bool nvme_verify = true;
  // Test hook: faults injected into the swap files' I/O (Note [Swap faults]).
  std::shared_ptr<IoFaults> nvme_faults;

  bool any() const { return params || grads || optimizer || nvme(); }
  bool nvme() const { return nvme_optimizer || nvme_params; }
  bool optimizer_on_host() const { return optimizer || nvme_optimizer; }
  bool params_on_host() const { return params || optimizer_on_host() || nvme_params; }
  bool grads_on_host() const { return grads || optimizer_on_host(); }
  // The swap space of the parameter shards (`params`) or of the optimizer state, for `rank`.
  SwapSpaceOptions SwapOptions(bool params, int rank) const;
  std::string ToString() const;
};

// Which communication hook the all-gathers and reduce-scatters go through
// (sharding/comm_hook.h: none, qwz, qgz, hpz, zeropp, or a registered name).
struct CommHookOptions {
  // none, qwz, qgz, hpz, zeropp, or a registered name.
  std::string name = "none";
  // qwz, qgz: elements per quantization block (one f32 scale each; even for 4 bits).
  int64_t block_size = 256;
  // qwz: 8 or 4 bits per parameter value on the wire.
  int param_bits = 8;
  // qgz: 8 or 4 bits per gradient value on the wire.
  int grad_bits = 8;
  // hpz: ranks of a secondary partition; qgz: ranks of the first all-to-all
  // step. 0: the shard group's ranks on this host. Must divide the shard group size.
  int group_size = 0;
  // "qwz block_size=256 param_bits=8 grad_bits=8 group_size=0".
  std::string ToString() const;
};

struct ShardingOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  WrapPolicy wrap;
  // Dotted module names whose parameters are left out of every unit: not
  // sharded, and their gradients not reduced (FSDP's ignored_modules).
  std::vector<std::string> ignored_modules;
  // kHybridShard: ranks per shard group (must divide the world size); 0: the
  // ranks of each node (Note [Hybrid shard groups]).
  int hybrid_shard_size = 0;
  // Start the next unit's all-gather (in the recorded forward order) when a unit begins forward.
  bool forward_prefetch = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  // Most units gathered at once, counting prefetches (FSDP's limit_all_gathers
  // rate limiter). 0: no limit.
  int limit_all_gathers = 2;
  // Broadcast rank 0's initial parameter values to every rank at start.
  bool sync_module_states = false;
  // Initialise unmaterialised parameters shard by shard: each rank fills only
  // its own slice, bit-identical to the same slice of the unsharded init.
  uint64_t init_seed = 0;
  MixedPrecision mixed_precision;
  OffloadPolicy offload;
  CommHookOptions comm_hook;

  // Shard group size for `world_size` ranks.
  int ShardGroupSize(int world_size) const;
  bool ReshardAfterForward() const {
    return strategy == ShardingStrategy::kFullShard || strategy == ShardingStrategy::kHybridShard;
  }
  // kShardOptimizer: the whole flat gradient is all-reduced and kept on every rank.
  bool ReplicatesGradients() const { return strategy == ShardingStrategy::kShardOptimizer; }
  absl::Status Validate(int world_size) const;
  std::string ToString() const;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SHARDING_SHARDING_OPTIONS_H_
