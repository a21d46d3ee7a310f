// Part of ShardedModel (sharded_model.h): when a unit's frozen bytes may go
// before the end of backward (Note [Frozen parameters] in sharded_model.h).
// WatchInputs counts the gradients of the unit's forward inputs still to come;
// MaybeFreeFrozen frees the frozen part (or a unit with nothing to train) once
// neither they nor the unit's trainable gradients can read it. Build() splits
// the frozen part off (unit_builder.cc); the owner's hooks gather it.
#include "zeroshard/sharding/sharded_model.h"

#include <memory>
#include <vector>

#include "zeroshard/runtime/status.h"

namespace zeroshard {

using autograd::Variable;

namespace {

// One watched input gradient of a unit (Note [Frozen parameters]): counted
// while it lives and has not run, so a graph dropped without backward leaves
// no count behind.
class PendingInput {
 public:
  explicit PendingInput(std::shared_ptr<int> count) : count_(std::move(count)) { ++*count_; }
  ~PendingInput() {
    if (!done_) --*count_;
  }
  PendingInput(const PendingInput&) = delete;
  PendingInput& operator=(const PendingInput&) = delete;
  // True the first time: the gradient has been computed.
  bool Done() {
    if (done_) return false;
    done_ = true;
    --*count_;
    return true;
  }

 private:
  std::shared_ptr<int> count_;
  bool done_ = false;
};

}  // namespace

void ShardedModel::WatchInputs(ShardedUnit& unit) {
  const std::vector<Variable>* inputs = unit.module->forward_inputs();
  if (inputs == nullptr) {  // not inside Module::RunForward (never, from its post-forward hook): be safe
    unit.inputs_untracked = true;
    return;
  }
  for (const Variable& in : *inputs) {
    if (!in.defined() || !in.requires_grad()) continue;  // no gradient will flow there
    if (in.is_leaf()) {  // a leaf's hooks live as long as it does, beyond this graph
      unit.inputs_untracked = true;
      continue;
    }
    ShardedUnit* u = &unit;
    auto pending = std::make_shared<PendingInput>(unit.inputs_pending);
    in.AddGradHook([this, u, pending](const Tensor& g) -> absl::StatusOr<Tensor> {
      if (pending->Done()) ZS_RETURN_IF_ERROR(MaybeFreeFrozen(*u));
      return g;
    });
  }
}

absl::Status ShardedModel::MaybeFreeFrozen(ShardedUnit& unit) {
  if (unit.is_root || !unit.backward_started || unit.recomputed || unit.inputs_untracked ||
      *unit.inputs_pending > 0) {
    return absl::OkStatus();
  }
  if (unit.frozen_part != nullptr) {
    // Trainable gradients still to land may yet read the frozen values.
    return unit.reduced ? ReshardOne(*unit.frozen_part) : absl::OkStatus();
  }
  return unit.frozen() ? ReshardOne(unit) : absl::OkStatus();
}

}  // namespace zeroshard
