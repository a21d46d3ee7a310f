#include "optim/sharded_optimizer.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace zeroshard::optim {

absl::string_view OptimizerKindName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kSgd: return "sgd";
  }
  return "?";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "adamw") return OptimizerKind::kAdamW;
  if (n == "adam") return OptimizerKind::kAdam;
  if (n == "sgd") return OptimizerKind::kSgd;
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer \"", name,
                                                 "\": expected adamw, adam or sgd"));
}

absl::StatusOr<ShardedOptimizer> ShardedOptimizer::Create(ShardedModel& model,
                                                          const OptimizerOptions& options) {
  ShardedOptimizer opt;
  opt.model_ = &model;
  opt.options_ = options;
  opt.options_.adamw.decoupled_weight_decay = options.kind == OptimizerKind::kAdamW;
  if (options.kind == OptimizerKind::kSgd) {
    ZS_RETURN_IF_ERROR(options.sgd.Validate());
  } else {
    ZS_RETURN_IF_ERROR(opt.options_.adamw.Validate());
  }
  auto decays = options.decays ? options.decays
                               : [](const std::string&, const Shape& s) { return s.size() >= 2; };
  for (ShardedUnit* u : model.units()) {
    ParamGroup decayed{{}, options.lr, options.weight_decay};
    ParamGroup plain{{}, options.lr, 0.0};
    for (const FlatParamSlot& p : u->flat.params()) {
      if (!p.requires_grad || p.numel == 0) continue;
      (decays(p.name, p.shape) ? decayed : plain).ranges.push_back(FlatRange{p.offset, p.numel});
    }
    const std::vector<ParamGroup> whole = {decayed, plain};
    ZS_RETURN_IF_ERROR(ValidateParamGroups(whole, u->flat.padded_numel()));
    opt.groups_.push_back(ShardParamGroups(whole, u->flat.shard_offset(), u->flat.shard_numel()));
    if (options.kind == OptimizerKind::kSgd) {
      ZS_ASSIGN_OR_RETURN(SgdState s, SgdState::Create(u->flat.shard_numel(), options.sgd,
                                                        model.optimizer_allocator()));
      opt.sgd_.push_back(std::move(s));
    } else {
      ZS_ASSIGN_OR_RETURN(AdamWState s, AdamWState::Create(u->flat.shard_numel(), model.optimizer_allocator()));
      opt.adam_.push_back(std::move(s));
    }
  }
  return opt;
}

absl::Status ShardedOptimizer::set_step_count(int64_t steps) {
  if (steps < 0) return absl::InvalidArgumentError(absl::StrCat("set_step_count: ", steps, " < 0"));
  steps_ = steps;
  for (AdamWState& s : adam_) s.step = steps;
  for (SgdState& s : sgd_) s.step = steps;
  return absl::OkStatus();
}

absl::Status ShardedOptimizer::Step(double lr, double grad_scale) {
  std::vector<ShardedUnit*> units = model_->units();
  for (size_t i = 0; i < units.size(); ++i) {
    std::vector<ParamGroup> groups = groups_[i];
    for (ParamGroup& g : groups) g.lr = lr;
    const StepOptions step{.grad_scale = grad_scale};
    if (options_.kind == OptimizerKind::kSgd) {
      ZS_RETURN_IF_ERROR(SgdStep(options_.sgd, groups, units[i]->shard, units[i]->grad_shard, sgd_[i], step));
    } else {
      ZS_RETURN_IF_ERROR(
          AdamWStep(options_.adamw, groups, units[i]->shard, units[i]->grad_shard, adam_[i], step));
    }
  }
  ++steps_;
  return absl::OkStatus();
}

}  // namespace zeroshard::optim
