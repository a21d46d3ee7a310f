// ShardedModel: a Module trained with its parameters sharded across ranks, the
// counterpart of PyTorch's FullyShardedDataParallel / DeepSpeed ZeRO-3.
//
//   // On every rank, with that rank's communicator and its own model instance:
//   auto gpt = std::make_shared<nn::Gpt>(config);                  // shapes only
//   ShardingOptions options;                                       // FULL_SHARD by default
//   options.wrap = WrapPolicy::ByType({"Block"});
//   options.init_seed = 1337;                                      // each rank inits its shard
//   ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, options, &rank_allocator));
//   ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(inputs, targets));  // hooks gather
//   ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));   // gradients reduce-scattered into shards
//   ... optimizer steps each unit's shard (optim/sharded_optimizer.h) ...
//   ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
//
// One training step, as data flows (see shared DESIGN.md):
// 1. Create() splits the module tree into units by the wrap policy; each
//    unit's parameters become a FlatParameter (Note [Shard layout] in
//    flat_parameter.h) and each rank keeps only its shard, in f32 (the master
//    copy). The module's parameters become views into the unit's gathered
//    buffer, defined only while it is gathered.
// 2. Forward: a unit's pre-forward hook gathers it (all-gather of the shards,
//    cast to param_dtype first) unless a prefetch already did; with
//    forward_prefetch the next unit in the recorded order starts gathering
//    too, within limit_all_gathers. The post-forward hook frees the gathered
//    bytes (FULL_SHARD, HYBRID_SHARD) and puts a pre-backward hook on the
//    unit's outputs.
// 3. Backward, units in reverse order: the pre-backward hook re-gathers the
//    unit (BACKWARD_PRE also starts the next unit's gather first), allocates
//    its flat gradient and points the parameters' .grad at views of it, so
//    gradients land in it directly. When every parameter's gradient has
//    landed, a reduce-scatter (average) leaves each rank its gradient shard
//    (BACKWARD_POST then starts the next gather), and the unit is freed. A
//    callback at the end of backward waits for the reductions, all-reduces
//    shards across replica groups (HYBRID_SHARD, NO_SHARD), adds them into the
//    gradient shards and frees the flat gradients.
// 4. Communication overlaps computation: collectives are asynchronous on the
//    communicator's own thread (or stream); compute waits only for the unit
//    it needs. On a GPU (an NCCL communicator, buffers from a device
//    allocator) the ordering is by streams and events, Note [GPU stream
//    schedule] in device_schedule.h.
//
// Gradient accumulation: by default every backward reduce-scatters and the
// gradient shards accumulate (+=) until ZeroGrad(). Inside a NoSync() scope
// the unsharded gradients are kept and summed instead, and the first backward
// after the scope reduces them (FSDP's no_sync).
//
// Activation checkpointing composes: the recompute of a checkpointed unit runs
// during backward, where its pre-forward hook finds (or makes) the gather the
// backward needs anyway; no second all-gather.
//
// Where the code is: ShardedModel's member functions live in one file per question.
//   sharded_model.cc    the class: Create, its lifetime, SummonFullParams, AverageBuffers, ToString
//   unit_builder.cc     module tree + wrap policy -> units: Build, tie placement, frozen split, InitShards
//   hooks.cc            the schedule: forward and backward hooks, gather, reshard, prefetch
//   frozen.cc           when a unit's frozen bytes may go (Note [Frozen parameters])
//   gradients.cc        gradient shards: reduction, no_sync, ZeroGrad, overflow, scaling, clipping
//   memory_plan.{h,cc}  MemoryPlan and Plan()
//   offload.cc          where master shards rest: the NVMe swap file, WithShard, shard prefetch
//
// Note [NVMe offload] (ZeRO-Infinity; OffloadPolicy's nvme_* fields): each
// rank keeps a swap file per kind of state under the NVMe path, one region
// per unit (runtime/nvme/swap_space.h), and a few host buffers to swap them
// through.
//   Parameters (nvme_params): a unit whose master shard lives on NVMe has an
//   undefined `shard` and a `swap_region`. Its shard is read before its
//   all-gather (copied, cast, into its slice of the gathered buffer; the
//   buffer stays as a clean cache) and for its optimizer step (written back
//   after). The pre-forward and pre-backward hooks read the next unit of the
//   recorded order ahead (PrefetchShard), and the optimizer's step prefetches
//   the first units of the next forward. max_in_cpu keeps the first units that
//   fit in host memory.
//   Optimizer state (nvme_optimizer): the optimizer's own swap file
//   (optim/sharded_optimizer.h); the step reads unit i + 1's state while unit
//   i steps and writes unit i - 1's back.
// Note [Replicated gradients] (SHARD_OPTIMIZER, ZeRO-1 = DeepSpeed stage 1):
// parameters are gathered and kept like SHARD_GRAD_OP, and the optimizer
// state and f32 master shards are the same slices as under every other
// strategy, but gradients are not sharded: each unit holds a persistent
// `replicated_grad` ([padded_numel] grad_dtype, where grad shards live) and its
// `grad_shard` is a view of this rank's slice of it. A backward all-reduces
// (averages) the whole flat gradient instead of reduce-scattering it and adds
// all of it into replicated_grad, so every rank holds the full averaged
// gradient, as DeepSpeed's stage 1 does; the optimizer, norms and the
// overflow check read only the rank's slice (the slices partition the
// gradient, so the results equal the other strategies'). The cost, shown by
// MemoryPlan::replicated_grads: 4 x padded_numel bytes per unit instead of
// 4 x shard_numel (2 x with keep_low_precision_grads and a 16-bit
// reduce_dtype), and an all-reduce (twice a reduce-scatter's traffic).
//
// Everything that touches a master shard outside the hooks (the optimizer,
// checkpoints, SummonFullParams) goes through WithShard, one unit at a time,
// so no more than the buffers' bytes are ever in memory. Values are bitwise
// those of host offload and of no offload (tested): only where bytes rest changes.
//
// Note [Hybrid shard groups] (HYBRID_SHARD, hybrid_shard_size 0, the
// default): shard inside a node, replicate across nodes, as FSDP's
// HYBRID_SHARD does with its default device mesh. Create all-gathers every
// rank's node name (collectives/node_layout.h: ZEROSHARD_NODE, else the host
// name) and makes each node's ranks a shard group, so the all-gathers and
// reduce-scatters of every step stay on the node's links and only the
// replicas' all-reduce crosses the network. It needs every node to hold the
// same number of consecutive ranks (what mpirun, srun and torchrun give by
// default); otherwise Create refuses, naming the layout, and
// hybrid_shard_size must be set. options() returns the resolved size and
// GroupMapping() the groups with their nodes (the training log prints it).
// A communicator whose peers do not run (the simulator's) cannot be asked:
// there the caller resolves the size (sim/simulator.cc: GPUs per node).
//
// Note [Frozen parameters] (e.g. LoRA: a frozen base weight beside trainable
// adapters in one module). FSDP's flat parameter refuses mixed requires_grad;
// here a unit whose parameters mix them is split at Create() into two units
// of the same module: the trainable unit, whose FlatParameter holds only the
// parameters that require a gradient, and its frozen part (named
// "<unit>[frozen]", `owner` pointing back; it comes just before its owner in
// units()), holding the others in a FlatParameter of its own, sharded the
// same way (f32 master shard, deferred init, NVMe swap region, checkpoints).
//   unit "h.0"          flat [ lora_a | lora_b | pad ]  grad_shard, full_grad, optimizer state
//   unit "h.0[frozen]"  flat [ weight | bias | pad ]    shard and gathered buffer only
// So the flat gradient, the reduce-scatter, the gradient shard and the
// optimizer state count trainable elements only (padded to S); a unit with
// no trainable parameter at all (frozen()) has none of them. The frozen part
// has no hooks of its own: StartGather/Gather of the owner issue and wait for
// its all-gather too (one more collective), Reshard frees both, and it takes
// no slot of limit_all_gathers. In backward the owner's trainable bytes are
// freed when its reduce-scatter starts, as for any unit. The frozen part may
// still be read after that (the input gradient through a frozen weight), so it
// goes when both (1) every trainable gradient of the unit has landed and (2)
// the gradient of every forward input of the unit has been computed: a
// gradient hook on each input (Module::forward_inputs(): the Variables among
// the forward's arguments, whatever its signature, Note [Module forward] in
// autograd/nn/module.h) counts those still to come, and each watch undoes
// itself if its graph is dropped unused, so the count is of live graphs only.
// Any node that reads a frozen weight in backward feeds the gradient of an
// input or of a trainable parameter of the unit, so it has run by then (FSDP's
// reshard-only hook on a unit's inputs; a Variable the forward's arguments
// hide from nn::ForEachVariable breaks this). Where that cannot be known the
// frozen bytes wait for the end of backward, as they always did: the root, an
// input that is a leaf (its hooks would outlive the graph), and a backward that
// recomputes the unit (activation checkpointing).
// A unit with nothing to train follows the same rule, (1) being vacuous.
// Checkpoints hold no optimizer state for frozen parameters; loading one into
// a parameter that trains gives it zero moments (checkpoint/checkpoint.h).
#ifndef ZEROSHARD_SHARDING_SHARDED_MODEL_H_
#define ZEROSHARD_SHARDING_SHARDED_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/autograd/nn/module.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/collectives/node_layout.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/nvme/swap_space.h"
#include "zeroshard/sharding/comm_hook.h"
#include "zeroshard/sharding/device_schedule.h"
#include "zeroshard/sharding/flat_parameter.h"
#include "zeroshard/sharding/memory_plan.h"
#include "zeroshard/sharding/sharding_options.h"
#include "zeroshard/runtime/gpu_timeline.h"
#include "zeroshard/runtime/trace.h"

namespace zeroshard {

// Note [Tied parameters] (GPT's lm_head.weight is transformer.wte.weight):
// one Variable held by several modules lives once, in one unit. When the wrap
// policy puts those modules in different units, the parameter goes to the
// unit of their lowest common ancestor module (PyTorch FSDP's rule for shared
// parameters), whatever the policy (by type, by size, a callable); a wrapped
// module left with no parameter of its own is then no unit. The ancestor's
// forward encloses the forwards of the modules that use the parameter, so its
// unit is gathered whenever they run: in forward (its pre-forward hook ran
// first, its post-forward frees it after them) and in backward (its
// pre-backward re-gathers it when its outputs' gradients arrive, and a user's
// pre-backward runs it first when it has not run yet: the two can share an
// output, the last child's output being the ancestor's, and that variable's
// hooks run the child's first; it is freed only when every one of its
// gradients, the tied one summed over all uses, has landed, so after the
// users' backward). The root is never freed before
// the end of backward. Prefetch, activation checkpointing (a recompute runs
// inside the ancestor's backward) and every strategy follow. A unit that uses
// a tied parameter another unit holds (tied_holders) checks that unit is
// gathered when it runs, so a module tree that breaks the rule (an ancestor
// whose forward does not call the user's) gives an error, not wrong values.
struct TiedPlacement {
  std::vector<std::string> names;    // every name; the first is the FlatParamSlot's name
  std::vector<std::string> modules;  // the module holding each name ("" is the root)
  std::vector<std::string> units;    // the units the wrap policy put those modules in
  std::string ancestor;              // their lowest common ancestor module ("" is the root)
  std::string holder;                // the unit it lives in
  std::vector<std::string> emptied;  // wrapped modules left without parameters: not units
  std::string ToString() const;
};

// One FSDP unit: a module, its flat parameter, and this rank's buffers.
struct ShardedUnit {
  enum class State { kSharded, kGathering, kGathered };

  int index = 0;
  std::string name;  // dotted module name; "<root>" for the root unit
  nn::Module* module = nullptr;
  bool is_root = false;
  FlatParameter flat;
  int num_grad_params = 0;  // parameters that require a gradient
  // Note [Frozen parameters]: a module whose parameters mix requires_grad
  // becomes two units, the trainable one and its frozen part, gathered and
  // freed together.
  ShardedUnit* frozen_part = nullptr;  // this unit's frozen parameters (nullptr: none)
  ShardedUnit* owner = nullptr;        // set on a frozen part: the unit it belongs to
  // Note [Tied parameters]: (name, holding unit) of each tied parameter this
  // unit's modules use but another (ancestor's) unit holds.
  std::vector<std::pair<std::string, ShardedUnit*>> tied_holders;
  // No parameter requires a gradient: no gradient buffers, no reduce-scatter,
  // no optimizer state (grad_shard and full_grad stay undefined).
  bool frozen() const { return num_grad_params == 0; }
  // Gathered and reduced in these (f32 for fp32 modules, Note [BatchNorm under
  // mixed precision]; else the options' param_dtype and reduce_dtype).
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  // Of grad_shard (and replicated_grad): f32, or reduce_dtype with
  // MixedPrecision::keep_low_precision_grads.
  DType grad_dtype = DType::kF32;

  Tensor shard;       // [shard_numel] f32: the master copy of this rank's shard (undefined on NVMe)
  int swap_region = -1;  // the shard's region in the parameter swap file; -1: in memory
  Tensor grad_shard;  // [shard_numel] grad_dtype: accumulated, reduced gradient shard (undefined when frozen())
  // SHARD_OPTIMIZER only: [padded_numel] grad_dtype, the whole accumulated, reduced
  // gradient; grad_shard views this rank's slice (Note [Replicated gradients]).
  Tensor replicated_grad;
  Tensor full;        // [padded_numel] param_dtype: the gathered buffer (storage released when sharded)
  Tensor full_grad;   // [padded_numel] reduce_dtype: only from pre-backward to the end of backward

  // Per-step state.
  State state = State::kSharded;
  std::shared_ptr<Work> gather_work;
  std::shared_ptr<Work> reduce_work;
  std::shared_ptr<Work> replica_work;  // HYBRID_SHARD / NO_SHARD: the all-reduce across replicas
  double replica_issue_us = 0;
  bool backward_started = false;  // pre-backward ran in this backward pass
  bool reduced = false;           // reduction launched in this backward pass
  int landed = 0;                 // gradients accumulated in this backward pass
  // When frozen bytes may go before the end of backward (Note [Frozen parameters]).
  std::shared_ptr<int> inputs_pending = std::make_shared<int>(0);  // watched input gradients still to come
  bool inputs_untracked = false;  // a forward's inputs could not be watched: frozen bytes wait for the end
  bool recomputed = false;        // this backward re-ran the forward (activation checkpointing)
  int gathers = 0;                // all-gathers issued (for tests and traces)
  int64_t reduce_scatter_numel = 0;  // flat-gradient elements this rank reduced (reduce-scatter; all-reduce under SHARD_OPTIMIZER); for tests
  // Trace timestamps (microseconds of the TraceRecorder).
  double forward_start_us = 0, backward_start_us = 0, gather_issue_us = 0, reduce_issue_us = 0;
  // Their GPU twins (Note [GPU spans] in runtime/gpu_timeline.h).
  GpuMark forward_gpu, backward_gpu;
};

class ShardedModel {
 public:
  // `world` is this rank's communicator; `allocator` (nullptr: the default CPU
  // allocator) is the rank's device memory and holds every sharded and
  // gathered buffer, so its statistics are this rank's memory; buffers the
  // offload policy moves to the host come from `host_allocator` (nullptr: the
  // default CPU allocator). The module must outlive the ShardedModel, and
  // `allocator` the module (its buffers are moved onto it).
  static absl::StatusOr<std::unique_ptr<ShardedModel>> Create(std::shared_ptr<nn::Module> root,
                                                              Communicator& world,
                                                              const ShardingOptions& options,
                                                              Allocator* allocator = nullptr,
                                                              Allocator* host_allocator = nullptr);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  nn::Module& module() { return *root_; }
  const ShardingOptions& options() const { return options_; }
  Communicator& world() { return world_; }
  // This rank's shard group (size S) and replica group (world / S ranks).
  Communicator& shard_group() { return *shard_group_; }
  Communicator& replica_group() { return *replica_group_; }
  // The shard and replica groups as ranks (and nodes, where HYBRID_SHARD
  // found them: hybrid_shard_size 0), for the log:
  //   "HYBRID_SHARD: 2 shard groups of 8 ranks (a group per node: ...), ...
  //     shard group 0: ranks 0-7 on node a ..."
  std::string GroupMapping() const;
  // What the units' all-gathers and reduce-scatters go through (comm_hook.h).
  CommHook& comm_hook() { return *comm_hook_; }
  Allocator* allocator() { return allocator_; }
  // The streams, events and rate limiter the model runs with (device_schedule.h).
  DeviceSchedule& schedule() { return *schedule_; }
  Allocator* host_allocator() { return host_allocator_; }
  // Where the optimizer keeps its state: the host with optimizer offload.
  Allocator* optimizer_allocator() {
    return options_.offload.optimizer_on_host() ? host_allocator_ : allocator_;
  }
  std::vector<ShardedUnit*> units();

  // Runs fn with the unit's master shard resident (Note [NVMe offload]): the
  // shard itself, or a view of a swap buffer read from NVMe, written back
  // after fn when `write`. Not reentrant for one unit with NVMe.
  absl::Status WithShard(ShardedUnit& unit, bool write, const std::function<absl::Status(const Tensor& shard)>& fn);
  // Starts reading the unit's shard from NVMe if a swap buffer is free now;
  // nothing for units in memory or a null unit.
  void PrefetchShard(const ShardedUnit* unit);
  // Prefetches the first units of the next forward (the recorded order).
  void PrefetchForward();
  // The parameter swap space; nullptr without parameter NVMe offload.
  SwapSpace* param_swap() { return param_swap_.get(); }

  // Zeroes every gradient shard (the start of an optimizer step's accumulation).
  absl::Status ZeroGrad();
  // Scales the gradient shards so that their global norm is at most max_norm
  // (norm_type 2 or infinity); returns the total norm before clipping, equal
  // on every rank and to the unsharded model's. One all-reduce.
  absl::StatusOr<double> ClipGradNorm(double max_norm, double norm_type = 2.0);
  // ClipGradNorm (norm 2) with no host synchronisation, for gradients on a
  // GPU: the per-unit sums of squares (double, in unit order, as above), their
  // f32 total all-reduced by the shard group on the device (NCCL, ordered on
  // the compute stream), and the scale min(1, max_norm / (norm + 1e-6)) applied
  // by a kernel reading it from device memory. Returns the norm as one double
  // on the device (an i64 tensor of one element holding its bytes: read it
  // with ReadGradNorm, train/train_step.h, when logging). Gradients on the
  // CPU (CPU ranks, CPU offload): ClipGradNorm's value, in the same form on
  // the host.
  absl::StatusOr<Tensor> ClipGradNormOnDevice(double max_norm);

  // True on every rank when any rank's gradient shards hold an Inf or NaN
  // (fp16 loss scaling skips such steps); one all-reduce over the world.
  absl::StatusOr<bool> GradientsOverflowed();
  // Multiplies every gradient shard by `factor` (e.g. 1 / loss scale).
  absl::Status ScaleGradients(double factor);

  // Inside the scope backward passes keep unsharded gradients and do not
  // communicate; the first backward after it reduces everything accumulated.
  class NoSyncScope {
   public:
    explicit NoSyncScope(ShardedModel* m) : m_(m) { m_->sync_gradients_ = false; }
    ~NoSyncScope() { m_->sync_gradients_ = true; }
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;

   private:
    ShardedModel* m_;
  };
  NoSyncScope NoSync() { return NoSyncScope(this); }

  // Gathers every unit, runs fn with the module's parameters complete, and
  // frees them again; with `writeback`, changes fn made to the parameters are
  // copied back into the shards. With `rank0_only`, only rank 0's parameters
  // are defined inside fn (the others still take part in the gathers).
  absl::Status SummonFullParams(const std::function<absl::Status()>& fn, bool writeback = false,
                                bool rank0_only = false);

  // Buffers (BatchNorm running statistics) are not sharded: each rank keeps
  // the module's own tensors, in their own dtype, moved to the rank's
  // allocator (device) at Create(), and updates them from its own batches (FSDP's behaviour: no SyncBatchNorm). sync_module_states
  // broadcasts rank 0's at Create(). AverageBuffers() replaces every floating
  // buffer by its mean over the world (one all-reduce each; integer buffers
  // such as num_batches_tracked are equal on every rank and left alone): the
  // documented step before saving a checkpoint or evaluating, so that the
  // saved statistics describe every rank's data.
  absl::Status AverageBuffers();

  // Waits for outstanding reductions and finishes the backward pass (runs at
  // the end of every backward through an engine callback; public for tests).
  absl::Status FinishBackward();

  // Records this rank's spans into `trace` (nullptr: off) in process `rank`
  // (Note [Trace layout] in runtime/trace.h): compute (forward and backward
  // per unit, backward ops, waits), each collective from issue to observed
  // completion, and each communicator's collectives as the backend ran them.
  // Backward ops are recorded for passes on the calling thread. With `gpu`
  // (this rank's GPU timeline, same recorder and pid) the compute spans, ops,
  // waits and collectives also get GPU spans and NVTX ranges (Note [GPU
  // spans] in runtime/gpu_timeline.h).
  void set_trace(TraceRecorder* trace, GpuTimeline* gpu = nullptr);

  // Where each tied parameter lives (Note [Tied parameters]).
  const std::vector<TiedPlacement>& ties() const { return ties_; }

  MemoryPlan Plan() const;
  // Units, flat sizes, padding, dtype, device, where each parameter lives.
  std::string ToString() const;

 private:
  ShardedModel(std::shared_ptr<nn::Module> root, Communicator& world, ShardingOptions options,
               Allocator* allocator, Allocator* host_allocator);
  // True when the gathered buffer can be the shard itself (nothing to gather or cast).
  static bool Aliased(const ShardedUnit& u, const ShardingOptions& o);
  // Where small collective operands (flags, norms) live: the communicator's device.
  Allocator* CommAllocator() { return world_.device().is_cpu() ? DefaultCpuAllocator() : allocator_; }

  // unit_builder.cc
  absl::Status Build();
  absl::Status InitShards(ShardedUnit& unit);

  // offload.cc
  // The parameter swap file for the units beyond max_in_cpu (nvme_params).
  absl::Status CreateParamSwap();

  // hooks.cc
  absl::Status InstallHooks(ShardedUnit& unit);
  // Starts the unit's all-gather (and its frozen part's) unless it is gathered or gathering.
  absl::Status StartGather(ShardedUnit& unit);
  absl::Status StartGatherOne(ShardedUnit& unit);
  // Waits for the unit's gather (starting it if needed) and points the
  // parameters at it; the frozen part's too.
  absl::Status Gather(ShardedUnit& unit);
  absl::Status AwaitGather(ShardedUnit& unit);
  // Frees the gathered bytes (the parameters become undefined); the frozen
  // part's too, unless ReshardOne.
  absl::Status Reshard(ShardedUnit& unit);
  absl::Status ReshardOne(ShardedUnit& unit);
  // Starts prefetching `unit` if the in-flight limit allows.
  absl::Status Prefetch(ShardedUnit* unit);
  int GatheredCount() const;
  ShardedUnit* NextInForwardOrder(const ShardedUnit& unit);
  ShardedUnit* NextInBackwardOrder(const ShardedUnit& unit);
  absl::Status OnPreForward(ShardedUnit& unit);
  absl::Status OnPostForward(ShardedUnit& unit, std::vector<autograd::Variable>& outputs);
  absl::Status OnPreBackward(ShardedUnit& unit);
  // Note [Tied parameters]: the units holding the tied parameters `unit` uses are gathered.
  absl::Status CheckTiedHolders(const ShardedUnit& unit, const char* when) const;
  absl::Status OnGradLanded(ShardedUnit& unit);

  // frozen.cc
  // Note [Frozen parameters]: hooks on the gradients of the unit's forward
  // inputs, and the frozen bytes freed once nothing in backward can read them.
  void WatchInputs(ShardedUnit& unit);
  absl::Status MaybeFreeFrozen(ShardedUnit& unit);

  // gradients.cc
  absl::Status ReduceUnit(ShardedUnit& unit);
  // Allocates the unit's gradient shard (a slice of replicated_grad under SHARD_OPTIMIZER).
  absl::Status InitGradShard(ShardedUnit& unit, Allocator* grad_home);
  // What ZeroGrad and scaling act on: replicated_grad when defined, else grad_shard.
  static const Tensor& GradStorage(const ShardedUnit& unit);
  // Note [Gradients that land in their shard] (gradients.cc).
  bool GradientsLandInShard(const ShardedUnit& unit) const;

  std::shared_ptr<nn::Module> root_;
  Communicator& world_;
  ShardingOptions options_;  // hybrid_shard_size resolved (0: the ranks per node)
  std::optional<NodeLayout> nodes_;  // when HYBRID_SHARD's groups came from the nodes
  Allocator* allocator_;
  Allocator* host_allocator_;
  std::unique_ptr<DeviceSchedule> schedule_;
  std::unique_ptr<Communicator> shard_group_;
  std::unique_ptr<Communicator> replica_group_;
  std::unique_ptr<CommHook> comm_hook_;  // after the groups: destroyed before them
  std::vector<std::unique_ptr<ShardedUnit>> units_;  // root last
  std::unique_ptr<SwapSpace> param_swap_;            // nvme_params
  ShardedUnit* root_unit_ = nullptr;
  std::vector<TiedPlacement> ties_;
  std::vector<std::pair<nn::Module*, int>> module_hooks_;
  std::vector<std::pair<autograd::Variable, int>> param_hooks_;

  // Forward order of the current and the previous iteration (unit indices).
  std::vector<int> forward_order_;
  std::vector<int> recorded_order_;
  bool in_forward_ = false;
  bool callback_queued_ = false;
  bool sync_gradients_ = true;
  // Inside SummonFullParams: gathers bypass the communication hook, so the
  // parameters a user reads, saves or writes back are the masters' values,
  // never their quantized image (qwZ).
  bool summoning_ = false;
  std::vector<ShardedUnit*> reduce_order_;  // outstanding reductions, in the order they started
  // Note [Unsharded gradients are freed as their reductions finish] (gradients.cc).
  static constexpr size_t kReductionsInFlight = 2;
  absl::Status CompleteReduction(ShardedUnit& unit);
  // The replica all-reduces (second stage) outstanding, in order, and their end.
  std::vector<ShardedUnit*> replica_order_;
  absl::Status CompleteReplicaReduction(ShardedUnit& unit);
  // Adds the reduced gradient into the unit's shard and frees the unsharded one.
  absl::Status AccumulateReduced(ShardedUnit& unit);
  absl::StatusOr<Tensor> ReducedPart(const ShardedUnit& unit);
  TraceRecorder* trace_ = nullptr;
  GpuTimeline* gpu_ = nullptr;  // non-null only while trace_ is
  // The GPU twin of a compute-row span, on the compute stream (nothing without a timeline).
  GpuMark GpuBegin(const std::string& name);
  void GpuEnd(GpuMark& mark, std::string name, const char* category);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SHARDING_SHARDED_MODEL_H_
