#include "zeroshard/optim/sharded_optimizer.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/optim/step_checks.h"
#include "zeroshard/runtime/half.h"
#include "zeroshard/runtime/status.h"

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

std::string OptimizerName(const OptimizerOptions& options) {
  return options.rule != nullptr ? options.rule->name() : std::string(OptimizerKindName(options.kind));
}

absl::StatusOr<ShardedOptimizer> ShardedOptimizer::Create(ShardedModel& model,
                                                          const OptimizerOptions& options) {
  ShardedOptimizer opt;
  opt.model_ = &model;
  opt.options_ = options;
  opt.options_.adamw.decoupled_weight_decay = options.kind == OptimizerKind::kAdamW;
  const ShardOptimizerRule* rule = options.rule.get();
  if (rule != nullptr) {
    ZS_RETURN_IF_ERROR(ValidateShardOptimizerRule(*rule));
    // Note [Shard rule contract]: host memory only. Master shards, gradient
    // shards and state are on the host wherever the state is (optimizer
    // offload moves all three); without offload they are on the model's device.
    Allocator* state_home = model.optimizer_allocator();
    const Device where = state_home != nullptr ? state_home->device() : Device::Cpu();
    if (!where.is_cpu()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "optimizer rule \"", rule->name(), "\" steps shards in host memory, but the master shards and "
          "optimizer state of this model are on ", where.ToString(),
          ": enable CPU offload of the optimizer (OffloadPolicy::optimizer or nvme_optimizer), or use a built-in "
          "optimizer"));
    }
  } else if (options.kind == OptimizerKind::kSgd) {
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
    // With NVMe offload the state's bytes live in the swap file (CreateSwap).
    const bool nvme = model.options().offload.nvme_optimizer;
    if (u->frozen()) {  // Note [Frozen parameters]: no state at all
      if (rule != nullptr) {
        opt.rule_states_.emplace_back();
      } else if (options.kind == OptimizerKind::kSgd) {
        opt.sgd_.emplace_back();
      } else {
        opt.adam_.emplace_back();
      }
      continue;
    }
    if (rule != nullptr) {
      std::vector<Tensor> slots(rule->state_slots().size());
      for (Tensor& t : slots) {
        if (nvme) continue;  // bound to the swap buffers by WithUnitState
        ZS_ASSIGN_OR_RETURN(t, Tensor::Zeros({u->flat.shard_numel()}, DType::kF32, model.optimizer_allocator()));
      }
      opt.rule_states_.push_back(std::move(slots));
    } else if (options.kind == OptimizerKind::kSgd) {
      ZS_ASSIGN_OR_RETURN(SgdState s, SgdState::Create(nvme ? 0 : u->flat.shard_numel(), options.sgd,
                                                        model.optimizer_allocator()));
      if (nvme) s.momentum_buffer = Tensor();
      opt.sgd_.push_back(std::move(s));
    } else {
      AdamWState s;
      if (!nvme) {
        ZS_ASSIGN_OR_RETURN(s, AdamWState::Create(u->flat.shard_numel(), model.optimizer_allocator()));
      }
      opt.adam_.push_back(std::move(s));
    }
  }
  if (model.options().offload.nvme_optimizer) {
    ZS_RETURN_IF_ERROR(opt.CreateSwap());
  }
  return opt;
}

std::vector<std::string> ShardedOptimizer::state_slots() const {
  if (options_.rule != nullptr) return options_.rule->state_slots();
  if (options_.kind == OptimizerKind::kSgd) {
    return options_.sgd.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }
  return {"exp_avg", "exp_avg_sq"};
}

namespace {
// Bytes of one state slot of an n-element shard in a swap region (O_DIRECT alignment).
int64_t SlotBytes(int64_t n) { return AlignUp(n * 4, kDirectIoAlignment); }
}  // namespace

absl::Status ShardedOptimizer::CreateSwap() {
  const size_t slots = state_slots().size();
  if (slots == 0) return absl::OkStatus();  // SGD without momentum keeps no state
  const OffloadPolicy& off = model_->options().offload;
  std::vector<int64_t> bytes;
  std::vector<std::string> names;
  for (ShardedUnit* u : model_->units()) {
    state_region_.push_back(u->frozen() ? -1 : static_cast<int>(bytes.size()));
    if (u->frozen()) continue;  // no state (Note [Frozen parameters])
    bytes.push_back(static_cast<int64_t>(slots) * SlotBytes(u->flat.shard_numel()));
    names.push_back(absl::StrCat("unit ", u->index, " '", u->name, "' optimizer state"));
  }
  const SwapSpaceOptions so = off.SwapOptions(/*params=*/false, model_->world().rank());
  ZS_ASSIGN_OR_RETURN(swap_, SwapSpace::Create(so, bytes, std::move(names), model_->host_allocator()));
  // The state starts at zero, on disk.
  for (int r = 0; r < swap_->num_regions(); ++r) {
    ZS_RETURN_IF_ERROR(swap_->Acquire(r, /*overwrite=*/true).status());
    ZS_RETURN_IF_ERROR(swap_->Release(r, /*dirty=*/true));
  }
  return absl::OkStatus();
}

void ShardedOptimizer::BindState(size_t i, char* bytes) {
  const int64_t n = model_->units()[i]->flat.shard_numel();
  auto view = [&](int slot) {
    return bytes == nullptr ? Tensor() : Tensor::Wrap(bytes + slot * SlotBytes(n), {n}, DType::kF32, swap_->device());
  };
  if (options_.rule != nullptr) {
    for (size_t k = 0; k < rule_states_[i].size(); ++k) rule_states_[i][k] = view(static_cast<int>(k));
  } else if (options_.kind == OptimizerKind::kSgd) {
    sgd_[i].momentum_buffer = view(0);
  } else {
    adam_[i].exp_avg = view(0);
    adam_[i].exp_avg_sq = view(1);
  }
}

absl::Status ShardedOptimizer::WithUnitState(size_t i, bool write,
                                             const std::function<absl::Status(const std::vector<Tensor>&)>& fn) {
  if (i >= groups_.size()) {
    return absl::OutOfRangeError(absl::StrCat("WithUnitState: unit ", i, " of ", groups_.size()));
  }
  auto slots = [&]() -> std::vector<Tensor> {
    if (options_.rule != nullptr) return rule_states_[i];
    if (options_.kind == OptimizerKind::kSgd) {
      return sgd_[i].momentum_buffer.defined() ? std::vector<Tensor>{sgd_[i].momentum_buffer} : std::vector<Tensor>{};
    }
    return {adam_[i].exp_avg, adam_[i].exp_avg_sq};
  };
  if (model_->units()[i]->frozen()) return fn({});  // no state (Note [Frozen parameters])
  if (swap_ == nullptr) return fn(slots());
  const int region = state_region_[i];
  ZS_ASSIGN_OR_RETURN(char* bytes, swap_->Acquire(region));
  BindState(i, bytes);
  const absl::Status s = fn(slots());
  BindState(i, nullptr);
  const absl::Status released = swap_->Release(region, write && s.ok());
  return s.ok() ? released : s;
}

std::string ShardedOptimizer::NvmeSummary() {
  std::string out;
  for (SwapSpace* space : {model_->param_swap(), swap_.get()}) {
    if (space == nullptr) continue;
    absl::StrAppend(&out, "NVMe ", space->ToString(), "\n");
    if (!space->note().empty()) absl::StrAppend(&out, "  note: ", space->note(), "\n");
  }
  return out;
}

absl::Status ShardedOptimizer::set_step_count(int64_t steps) {
  if (steps < 0) return absl::InvalidArgumentError(absl::StrCat("set_step_count: ", steps, " < 0"));
  steps_ = steps;
  for (AdamWState& s : adam_) s.step = steps;
  for (SgdState& s : sgd_) s.step = steps;
  return absl::OkStatus();
}

absl::Status ShardedOptimizer::StepUnit(size_t i, ShardedUnit& unit, double lr, double grad_scale,
                                        const std::function<void()>& read_ahead) {
  std::vector<ParamGroup> groups = groups_[i];
  for (ParamGroup& g : groups) g.lr = lr;
  const StepOptions step{.grad_scale = grad_scale};
  return model_->WithShard(unit, /*write=*/true, [&](const Tensor& shard) -> absl::Status {
    return WithUnitState(i, /*write=*/true, [&](const std::vector<Tensor>&) -> absl::Status {
      read_ahead();  // unit i holds its buffers now, so the reads cannot evict it
      if (options_.rule != nullptr) return StepRule(i, unit, shard, groups, grad_scale);
      if (options_.kind == OptimizerKind::kSgd) {
        return SgdStep(options_.sgd, groups, shard, unit.grad_shard, sgd_[i], step);
      }
      return AdamWStep(options_.adamw, groups, shard, unit.grad_shard, adam_[i], step);
    });
  });
}

absl::Status ShardedOptimizer::StepRule(size_t i, ShardedUnit& unit, const Tensor& shard,
                                        const std::vector<ParamGroup>& groups, double grad_scale) {
  const ShardOptimizerRule& rule = *options_.rule;
  const std::string op = absl::StrCat("optimizer rule \"", rule.name(), "\", unit ", i, " '", unit.name, "'");
  const int64_t n = shard.numel();
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(op, "master shard", shard, n, {DType::kF32}));
  const Tensor& grad = unit.grad_shard;
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(op, "gradient shard", grad, n, {DType::kF32, DType::kBF16, DType::kF16}));
  StepOptions scale{.grad_scale = grad_scale};
  ZS_RETURN_IF_ERROR(internal::CheckStepOptions(op, scale, n));
  ShardStepArgs args;
  args.param = absl::MakeSpan(shard.data<float>(), n);
  // g = float(grad) * float(grad_scale), as AdamW reads it (optim/adamw_math.h);
  // an f32 gradient with scale 1 is passed as it is (x * 1.0f == x).
  const float s = static_cast<float>(grad_scale);
  if (grad.dtype() == DType::kF32 && s == 1.0f) {
    args.grad = absl::MakeConstSpan(grad.data<float>(), n);
  } else {
    rule_grad_.resize(n);
    const void* raw = grad.raw_data();
    if (grad.dtype() == DType::kF32) {
      for (int64_t e = 0; e < n; ++e) rule_grad_[e] = static_cast<const float*>(raw)[e] * s;
    } else {
      const bool bf16 = grad.dtype() == DType::kBF16;
      const uint16_t* bits = static_cast<const uint16_t*>(raw);
      for (int64_t e = 0; e < n; ++e) {
        rule_grad_[e] = (bf16 ? BFloat16BitsToFloat(bits[e]) : Float16BitsToFloat(bits[e])) * s;
      }
    }
    args.grad = absl::MakeConstSpan(rule_grad_.data(), n);
  }
  for (const Tensor& t : rule_states_[i]) {
    ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(op, "state", t, n, {DType::kF32}));
    args.state.push_back(absl::MakeSpan(t.data<float>(), n));
  }
  args.groups = groups;
  args.step = steps_ + 1;
  const absl::Status st = rule.Step(args);
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(op, ", step ", args.step, ": ", st.message()));
  return absl::OkStatus();
}

absl::Status ShardedOptimizer::Step(double lr, double grad_scale) {
  std::vector<ShardedUnit*> units = model_->units();
  // With NVMe the units step in alternating order, forward one step and
  // backward the next: the units the previous step touched last are still in
  // the swap buffers, so they go first and need no read. (Units are
  // independent: the order changes no value.)
  std::vector<size_t> order(units.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const bool nvme = swap_ != nullptr || model_->param_swap() != nullptr;
  if (nvme && steps_ % 2 == 1) std::reverse(order.begin(), order.end());
  // Read up to buffer_count - 2 units ahead (one buffer steps, one writes behind).
  const size_t ahead = swap_ != nullptr ? static_cast<size_t>(std::max(1, swap_->buffer_count() - 2)) : 1;
  for (size_t k = 0; k < order.size(); ++k) {
    auto read_ahead = [&] {
      for (size_t j = k + 1; j < order.size() && j <= k + ahead; ++j) {
        if (units[order[j]]->frozen()) continue;  // nothing to step
        model_->PrefetchShard(units[order[j]]);
        if (swap_ != nullptr && !swap_->Prefetch(state_region_[order[j]])) break;
      }
    };
    if (units[order[k]]->frozen()) continue;  // Note [Frozen parameters]: never changes
    ZS_RETURN_IF_ERROR(StepUnit(order[k], *units[order[k]], lr, grad_scale, read_ahead));
  }
  ++steps_;
  model_->PrefetchForward();  // the next forward's first master shards, while the writes finish
  return absl::OkStatus();
}

}  // namespace zeroshard::optim
