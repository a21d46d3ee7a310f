// ShardedOptimizer: AdamW, Adam or SGD stepping each rank's shard of every
// unit of a ShardedModel (ZeRO: optimizer state sharded with the parameters).
//
//   OptimizerOptions o{.kind = OptimizerKind::kAdamW, .lr = 6e-4, .weight_decay = 0.1};
//   o.adamw.beta2 = 0.95;
//   ZS_ASSIGN_OR_RETURN(ShardedOptimizer opt, ShardedOptimizer::Create(*sharded, o));
//   ... forward, backward ...
//   ZS_RETURN_IF_ERROR(opt.Step(scheduler.LrAt(step)));
//   ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
//
// Parameter groups as nanoGPT's: weight decay on parameters of 2 or more
// dimensions, none on biases and LayerNorm weights (or a caller's rule);
// frozen parameters and padding are in no group, so they never change (a
// unit of frozen parameters only has no state and is skipped). A
// shard's state is exactly the same slice of the unsharded optimizer's state
// (optim/param_group.h ShardParamGroups), which checkpoints rely on.
//
// With the model's OffloadPolicy::nvme_optimizer the state lives in a swap
// file under the NVMe path, one region per unit ([exp_avg | exp_avg_sq] or
// [momentum_buffer], each 4096-aligned), and Step swaps it through
// buffer_count host buffers: unit i + 1's state (and, with nvme_params, its
// master shard) is read while unit i steps, unit i - 1's is written back
// meanwhile (Note [NVMe offload] in sharding/sharded_model.h). The
// state tensors of adam_states()/sgd_states() are then undefined between
// steps; WithUnitState gives them for one unit at a time.
#ifndef ZEROSHARD_OPTIM_SHARDED_OPTIMIZER_H_
#define ZEROSHARD_OPTIM_SHARDED_OPTIMIZER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/param_group.h"
#include "zeroshard/optim/sgd.h"
#include "zeroshard/runtime/nvme/swap_space.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard::optim {

enum class OptimizerKind { kAdamW, kAdam, kSgd };
absl::string_view OptimizerKindName(OptimizerKind k);
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double weight_decay = 0.0;
  AdamWOptions adamw;  // kAdamW, kAdam (decoupled_weight_decay is set from kind)
  SgdOptions sgd;
  // Which parameters get weight decay; default: shape.size() >= 2 (nanoGPT).
  std::function<bool(const std::string& name, const Shape& shape)> decays;
};

class ShardedOptimizer {
 public:
  static absl::StatusOr<ShardedOptimizer> Create(ShardedModel& model, const OptimizerOptions& options);

  // One step of every unit's shard with learning rate `lr`; gradients are
  // multiplied by grad_scale as they are read (clipping, loss-scale unscaling).
  absl::Status Step(double lr, double grad_scale = 1.0);
  int64_t step_count() const { return steps_; }
  // Restores the step count (checkpoints): Adam's bias corrections use it.
  absl::Status set_step_count(int64_t steps);
  const OptimizerOptions& options() const { return options_; }

  // Per unit (in ShardedModel::units() order): the state of this rank's
  // shard (its tensors undefined with NVMe offload: use WithUnitState). A
  // frozen unit (ShardedUnit::frozen(), Note [Frozen parameters] in
  // sharded_model.h) has no state: its tensors stay undefined.
  std::vector<AdamWState>& adam_states() { return adam_; }
  std::vector<SgdState>& sgd_states() { return sgd_; }

  // The names of the state tensors of a unit, as checkpoints store them:
  // {"exp_avg", "exp_avg_sq"} (Adam, AdamW), {"momentum_buffer"} (SGD with
  // momentum) or none.
  std::vector<std::string> state_slots() const;
  // Runs fn with unit i's state tensors (in state_slots() order) resident:
  // swapped in from NVMe if they live there and, with `write`, written back
  // after fn succeeds. A frozen unit has none: fn gets an empty vector.
  absl::Status WithUnitState(size_t i, bool write,
                             const std::function<absl::Status(const std::vector<Tensor>& slots)>& fn);
  // The state's swap space (nullptr without NVMe offload), for logs and benchmarks.
  SwapSpace* swap() { return swap_.get(); }
  // One line per NVMe swap space of the model and the optimizer (where,
  // how big, notes such as a refused O_DIRECT); "" without NVMe offload.
  std::string NvmeSummary();
  // The groups of unit i restricted to this rank's shard.
  const std::vector<ParamGroup>& shard_groups(size_t i) const { return groups_[i]; }

 private:
  ShardedModel* model_ = nullptr;
  OptimizerOptions options_;
  std::vector<std::vector<ParamGroup>> groups_;  // per unit: {decayed, not decayed}
  std::vector<AdamWState> adam_;
  std::vector<SgdState> sgd_;
  int64_t steps_ = 0;
  std::unique_ptr<SwapSpace> swap_;  // nvme_optimizer; Note [NVMe offload]
  std::vector<int> state_region_;    // per unit: its region in swap_, -1 for a frozen unit

  absl::Status CreateSwap();
  // Points unit i's state tensors at `bytes` (nullptr: undefined).
  void BindState(size_t i, char* bytes);
  // One unit's step with its shard and state resident; `read_ahead` runs once
  // they are (it starts the next units' reads).
  absl::Status StepUnit(size_t i, ShardedUnit& unit, double lr, double grad_scale,
                        const std::function<void()>& read_ahead);
};

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_SHARDED_OPTIMIZER_H_
