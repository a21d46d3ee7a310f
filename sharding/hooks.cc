// Part of ShardedModel (sharded_model.h): the schedule. The hooks a unit's
// module and parameters carry (InstallHooks), what each does in forward and
// backward (OnPreForward, OnPostForward, OnPreBackward, OnGradLanded), and the
// gathers they issue: StartGather/AwaitGather/Reshard of a unit, Prefetch of
// the next one in the recorded order within limit_all_gathers. On a GPU the
// ordering is by streams and events (Note [GPU stream schedule] in
// device_schedule.h).
#include "zeroshard/sharding/sharded_model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using autograd::Variable;

absl::Status ShardedModel::InstallHooks(ShardedUnit& unit) {
  // A frozen part is gathered and freed by its owner's hooks (Note [Frozen parameters]).
  if (unit.owner != nullptr) return absl::OkStatus();
  ShardedUnit* u = &unit;
  module_hooks_.emplace_back(unit.module,
                             unit.module->AddPreForwardHook([this, u](nn::Module&) { return OnPreForward(*u); }));
  module_hooks_.emplace_back(
      unit.module, unit.module->AddPostForwardHook([this, u](nn::Module&, std::vector<Variable>& outs) {
        return OnPostForward(*u, outs);
      }));
  for (const FlatParamSlot& p : unit.flat.params()) {
    if (!p.requires_grad) continue;
    param_hooks_.emplace_back(p.var, p.var.AddPostAccumulateGradHook(
                                         [this, u](const Variable&) { return OnGradLanded(*u); }));
  }
  return absl::OkStatus();
}

// ================================================================ gathering

absl::Status ShardedModel::StartGather(ShardedUnit& unit) {
  ZS_RETURN_IF_ERROR(StartGatherOne(unit));
  // The frozen part's all-gather is issued right after its owner's.
  if (unit.frozen_part != nullptr) ZS_RETURN_IF_ERROR(StartGatherOne(*unit.frozen_part));
  return absl::OkStatus();
}

absl::Status ShardedModel::StartGatherOne(ShardedUnit& unit) {
  if (unit.state != ShardedUnit::State::kSharded) return absl::OkStatus();
  if (Aliased(unit, options_)) {
    unit.state = ShardedUnit::State::kGathered;
    return absl::OkStatus();
  }
  ZS_RETURN_IF_ERROR(schedule_->BeforeGather());
  ZS_RETURN_IF_ERROR(unit.full.storage()->Reallocate());
  // In place: this rank's shard goes into its own slice of the gathered
  // buffer (cast to param_dtype on the way), and the all-gather fills the rest.
  ZS_ASSIGN_OR_RETURN(Tensor mine, unit.full.Narrow(0, unit.flat.shard_offset(), unit.flat.shard_numel()));
  ZS_RETURN_IF_ERROR(
      WithShard(unit, /*write=*/false, [&](const Tensor& shard) { return schedule_->Copy(mine, shard); }));
  // Through the communication hook (comm_hook.h); inside SummonFullParams
  // the plain all-gather (the base class's), whatever the hook.
  GatherCall call{.unit = unit.index,
                  .mine = mine,
                  .full = unit.full,
                  .backward = autograd::InBackward(),  // backward's gathers, prefetches included
                  .opts = schedule_->Collective()};
  // Before issuing: the backend's span must start after it (Note [Trace
  // layout]); -1: issued untraced, so no "issued" span when it is awaited.
  unit.gather_issue_us = trace_ != nullptr ? trace_->NowUs() : -1;
  if (trace_ != nullptr) call.opts.trace_label = "all-gather " + unit.name;
  ZS_ASSIGN_OR_RETURN(unit.gather_work, summoning_ ? comm_hook_->CommHook::AllGather(*shard_group_, call)
                                                   : comm_hook_->AllGather(*shard_group_, call));
  unit.state = ShardedUnit::State::kGathering;
  ++unit.gathers;
  return absl::OkStatus();
}

absl::Status ShardedModel::Gather(ShardedUnit& unit) {
  ZS_RETURN_IF_ERROR(StartGather(unit));
  ZS_RETURN_IF_ERROR(AwaitGather(unit));
  if (unit.frozen_part != nullptr) ZS_RETURN_IF_ERROR(AwaitGather(*unit.frozen_part));
  return absl::OkStatus();
}

absl::Status ShardedModel::AwaitGather(ShardedUnit& unit) {
  if (unit.state == ShardedUnit::State::kGathering) {
    const double wait_start = trace_ ? trace_->NowUs() : 0;
    GpuMark wait_gpu;  // on the GPU: how long compute stalled for the gather
    if (gpu_ != nullptr) wait_gpu = GpuBegin("wait all-gather " + unit.name);
    ZS_RETURN_IF_ERROR(schedule_->Await(*unit.gather_work));
    unit.gather_work.reset();
    unit.state = ShardedUnit::State::kGathered;
    if (trace_ != nullptr) {
      GpuEnd(wait_gpu, "wait all-gather " + unit.name, "gpu wait");  // inside the host span
      const double now = trace_->NowUs();
      trace_->AddSpan("wait all-gather " + unit.name, "wait", {world_.rank(), TraceRow::kCompute}, wait_start, now);
      if (unit.gather_issue_us >= 0) {
        trace_->AddSpan("all-gather " + unit.name, "issued", {world_.rank(), TraceRow::kIssued},
                        unit.gather_issue_us, now);
      }
    }
  }
  for (const FlatParamSlot& p : unit.flat.params()) {
    if (p.var.defined()) continue;
    ZS_ASSIGN_OR_RETURN(Tensor flat_view, unit.full.Narrow(0, p.offset, p.numel));
    ZS_ASSIGN_OR_RETURN(Tensor view, flat_view.View(p.shape));
    ZS_RETURN_IF_ERROR(p.var.set_value(view));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::Reshard(ShardedUnit& unit) {
  ZS_RETURN_IF_ERROR(ReshardOne(unit));
  if (unit.frozen_part != nullptr) ZS_RETURN_IF_ERROR(ReshardOne(*unit.frozen_part));
  return absl::OkStatus();
}

absl::Status ShardedModel::ReshardOne(ShardedUnit& unit) {
  if (Aliased(unit, options_) || unit.state == ShardedUnit::State::kSharded) return absl::OkStatus();
  if (unit.state == ShardedUnit::State::kGathering) {
    // Never free bytes a collective is writing: compute (which orders the free) waits first.
    ZS_RETURN_IF_ERROR(schedule_->Await(*unit.gather_work));
    unit.gather_work.reset();
    if (trace_ != nullptr && unit.gather_issue_us >= 0) {
      trace_->AddSpan("all-gather " + unit.name, "issued", {world_.rank(), TraceRow::kIssued}, unit.gather_issue_us,
                      trace_->NowUs());
    }
  }
  for (const FlatParamSlot& p : unit.flat.params()) {
    ZS_RETURN_IF_ERROR(p.var.set_value(Tensor()));
  }
  ZS_RETURN_IF_ERROR(unit.full.storage()->Release());
  ZS_RETURN_IF_ERROR(schedule_->AfterFree());
  unit.state = ShardedUnit::State::kSharded;
  return absl::OkStatus();
}

int ShardedModel::GatheredCount() const {
  int n = 0;
  for (const auto& u : units_) {
    // A frozen part rides with its owner (Note [Frozen parameters]).
    if (!u->is_root && u->owner == nullptr && u->state != ShardedUnit::State::kSharded) ++n;
  }
  return n;
}

absl::Status ShardedModel::Prefetch(ShardedUnit* unit) {
  if (unit == nullptr || unit->is_root || unit->state != ShardedUnit::State::kSharded) {
    return absl::OkStatus();
  }
  if (options_.limit_all_gathers > 0 && GatheredCount() >= options_.limit_all_gathers) {
    return absl::OkStatus();  // rate limited: it will be gathered when it runs
  }
  return StartGather(*unit);
}

ShardedUnit* ShardedModel::NextInForwardOrder(const ShardedUnit& unit) {
  for (size_t i = 0; i + 1 < recorded_order_.size(); ++i) {
    if (recorded_order_[i] == unit.index) return units_[recorded_order_[i + 1]].get();
  }
  return nullptr;
}

ShardedUnit* ShardedModel::NextInBackwardOrder(const ShardedUnit& unit) {
  // The root's backward starts first (the loss's gradient reaches its hook
  // before any unit's) and ends last, so the unit to fetch while it runs is
  // the last one in forward order, as FSDP's root pre-backward prefetches it.
  // Before, nothing was fetched then and the first unit's backward waited for
  // its whole gather.
  if (unit.is_root) {
    return forward_order_.size() > 1 && forward_order_.back() != unit.index ? units_[forward_order_.back()].get()
                                                                             : nullptr;
  }
  for (size_t i = forward_order_.size(); i-- > 1;) {
    if (forward_order_[i] == unit.index) return units_[forward_order_[i - 1]].get();
  }
  return nullptr;
}

// ================================================================ hooks

absl::Status ShardedModel::OnPreForward(ShardedUnit& unit) {
  if (autograd::InBackward()) {
    // A checkpointed unit recomputing inside backward: this is its backward
    // gather. Its frozen bytes wait for the end (Note [Frozen parameters]).
    unit.recomputed = true;
    return OnPreBackward(unit);
  }
  if (unit.is_root) {
    if (!forward_order_.empty()) recorded_order_ = forward_order_;
    forward_order_.clear();
    in_forward_ = true;
  }
  if (std::find(forward_order_.begin(), forward_order_.end(), unit.index) == forward_order_.end()) {
    forward_order_.push_back(unit.index);
  }
  if (trace_ != nullptr) unit.forward_start_us = trace_->NowUs();
  if (gpu_ != nullptr) {
    gpu_->Drop(unit.forward_gpu);  // one left open by an earlier pass that failed
    unit.forward_gpu = GpuBegin("forward " + unit.name);
  }
  ZS_RETURN_IF_ERROR(Gather(unit));
  ZS_RETURN_IF_ERROR(CheckTiedHolders(unit, "forward"));
  PrefetchShard(NextInForwardOrder(unit));  // NVMe: the next unit's shard is read meanwhile
  if (options_.forward_prefetch && !unit.is_root) {
    ZS_RETURN_IF_ERROR(Prefetch(NextInForwardOrder(unit)));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::CheckTiedHolders(const ShardedUnit& unit, const char* when) const {
  for (const auto& [name, holder] : unit.tied_holders) {
    if (holder->state == ShardedUnit::State::kGathered) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "ShardedModel: unit \"", unit.name, "\" runs its ", when, " with tied parameter \"", name,
        "\", which lives in unit \"", holder->name, "\" (Note [Tied parameters]); expected that unit gathered, found it ",
        holder->state == ShardedUnit::State::kSharded ? "sharded" : "still gathering",
        ": the module of unit \"", holder->name, "\" must run the module of unit \"", unit.name,
        "\" inside its own forward"));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::OnPostForward(ShardedUnit& unit, std::vector<Variable>& outputs) {
  if (autograd::InBackward()) return absl::OkStatus();  // recompute: keep it for its backward
  const bool backward_follows = autograd::GradMode::IsEnabled();
  if (backward_follows) {
    ShardedUnit* u = &unit;
    for (Variable& out : outputs) {
      if (!out.defined() || !out.requires_grad()) continue;
      out.AddGradHook([this, u](const Tensor& g) -> absl::StatusOr<Tensor> {
        ZS_RETURN_IF_ERROR(OnPreBackward(*u));
        return g;
      });
    }
    if (!unit.is_root && (unit.frozen_part != nullptr || unit.frozen())) WatchInputs(unit);
  }
  if (unit.is_root) in_forward_ = false;
  if (trace_ != nullptr) {
    GpuEnd(unit.forward_gpu, "forward " + unit.name, "gpu compute");  // inside the host span
    trace_->AddSpan("forward " + unit.name, "compute", {world_.rank(), TraceRow::kCompute}, unit.forward_start_us,
                    trace_->NowUs());
  }
  // Without a backward to come (evaluation), nothing needs the gathered bytes.
  if (!backward_follows || (!unit.is_root && options_.ReshardAfterForward())) {
    if (backward_follows) {
      // hpZ keeps its secondary slice of the gathered bytes for backward.
      for (ShardedUnit* u : {&unit, unit.frozen_part}) {
        if (u != nullptr && u->state == ShardedUnit::State::kGathered && !Aliased(*u, options_)) {
          ZS_RETURN_IF_ERROR(comm_hook_->BeforeReshardAfterForward(u->index, u->full));
        }
      }
    }
    ZS_RETURN_IF_ERROR(Reshard(unit));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::OnPreBackward(ShardedUnit& unit) {
  if (unit.backward_started) return absl::OkStatus();
  unit.backward_started = true;
  unit.landed = 0;
  if (trace_ != nullptr) unit.backward_start_us = trace_->NowUs();
  if (gpu_ != nullptr) {
    gpu_->Drop(unit.backward_gpu);  // one left open by an earlier pass that failed
    unit.backward_gpu = GpuBegin("backward " + unit.name);
  }
  if (!callback_queued_) {
    callback_queued_ = true;
    ZS_RETURN_IF_ERROR(autograd::QueueCallback([this] { return FinishBackward(); }));
  }
  ZS_RETURN_IF_ERROR(Gather(unit));
  // Note [Tied parameters]: the holder's backward starts first. Its hook may
  // not have fired yet: a unit's output can be its last child's output, whose
  // gradient hooks run the child's first.
  for (const auto& [name, holder] : unit.tied_holders) {
    ShardedUnit& h = holder->owner != nullptr ? *holder->owner : *holder;
    if (!h.backward_started) ZS_RETURN_IF_ERROR(OnPreBackward(h));
  }
  ZS_RETURN_IF_ERROR(CheckTiedHolders(unit, "backward"));
  PrefetchShard(NextInBackwardOrder(unit));
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPre) {
    ZS_RETURN_IF_ERROR(Prefetch(NextInBackwardOrder(unit)));
  }
  if (!unit.frozen() && !unit.full_grad.defined()) {  // kept across backwards inside NoSync()
    if (GradientsLandInShard(unit)) {
      unit.full_grad = GradStorage(unit);  // Note [Gradients that land in their shard]
    } else {
      ZS_ASSIGN_OR_RETURN(unit.full_grad, Tensor::Zeros({unit.flat.padded_numel()}, unit.reduce_dtype, allocator_));
    }
  }
  for (const FlatParamSlot& p : unit.flat.params()) {
    if (!p.requires_grad) continue;
    ZS_ASSIGN_OR_RETURN(Tensor flat_view, unit.full_grad.Narrow(0, p.offset, p.numel));
    ZS_ASSIGN_OR_RETURN(Tensor view, flat_view.View(p.shape));
    ZS_RETURN_IF_ERROR(p.var.set_grad(view));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::OnGradLanded(ShardedUnit& unit) {
  if (!unit.backward_started) {
    return absl::InternalError(absl::StrCat("ShardedModel: a gradient of unit \"", unit.name,
                                            "\" landed before the unit's backward started"));
  }
  if (++unit.landed == unit.num_grad_params) return ReduceUnit(unit);
  return absl::OkStatus();
}

}  // namespace zeroshard
