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
// frozen parameters and padding are in no group, so they never change. A
// shard's state is exactly the same slice of the unsharded optimizer's state
// (optim/param_group.h ShardParamGroups), which checkpoints rely on.
#ifndef ZEROSHARD_OPTIM_SHARDED_OPTIMIZER_H_
#define ZEROSHARD_OPTIM_SHARDED_OPTIMIZER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "optim/adamw.h"
#include "optim/param_group.h"
#include "optim/sgd.h"
#include "runtime/sharding/sharded_model.h"

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

  // Per unit (in ShardedModel::units() order): the state of this rank's shard.
  std::vector<AdamWState>& adam_states() { return adam_; }
  std::vector<SgdState>& sgd_states() { return sgd_; }
  // The groups of unit i restricted to this rank's shard.
  const std::vector<ParamGroup>& shard_groups(size_t i) const { return groups_[i]; }

 private:
  ShardedModel* model_ = nullptr;
  OptimizerOptions options_;
  std::vector<std::vector<ParamGroup>> groups_;  // per unit: {decayed, not decayed}
  std::vector<AdamWState> adam_;
  std::vector<SgdState> sgd_;
  int64_t steps_ = 0;
};

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_SHARDED_OPTIMIZER_H_
