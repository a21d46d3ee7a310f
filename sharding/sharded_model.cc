// ShardedModel (sharded_model.h): the class itself. Create and the
// lifecycle, SummonFullParams, AverageBuffers and ToString; the rest of its
// member functions live by question in the files the header lists.
#include "zeroshard/sharding/sharded_model.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

// ================================================================ construction

ShardedModel::ShardedModel(std::shared_ptr<nn::Module> root, Communicator& world,
                           ShardingOptions options, Allocator* allocator, Allocator* host_allocator)
    : root_(std::move(root)),
      world_(world),
      options_(std::move(options)),
      allocator_(allocator != nullptr ? allocator : DefaultCpuAllocator()),
      host_allocator_(host_allocator != nullptr ? host_allocator : DefaultCpuAllocator()) {}

ShardedModel::~ShardedModel() {
  for (auto& [module, handle] : module_hooks_) module->RemoveHook(handle);
  for (auto& [var, handle] : param_hooks_) var.RemoveHook(handle);
  // Leave the module usable: parameters point at nothing once the buffers go.
  for (auto& unit : units_) {
    for (const FlatParamSlot& p : unit->flat.params()) {
      (void)p.var.set_value(Tensor());
      p.var.reset_grad();
    }
  }
}

absl::StatusOr<std::unique_ptr<ShardedModel>> ShardedModel::Create(std::shared_ptr<nn::Module> root,
                                                                   Communicator& world,
                                                                   const ShardingOptions& options,
                                                                   Allocator* allocator,
                                                                   Allocator* host_allocator) {
  if (root == nullptr) return absl::InvalidArgumentError("ShardedModel::Create: null module");
  ZS_RETURN_IF_ERROR(options.Validate(world.size()));
  ShardingOptions resolved = options;
  std::optional<NodeLayout> nodes;
  if (options.strategy == ShardingStrategy::kHybridShard && options.hybrid_shard_size == 0) {
    // A shard group per node (Note [Hybrid shard groups]).
    ZS_ASSIGN_OR_RETURN(nodes, GatherNodeLayout(world, allocator));
    resolved.hybrid_shard_size = nodes->ConsecutiveRanksPerNode();
    if (resolved.hybrid_shard_size == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "HYBRID_SHARD with hybrid_shard_size 0 makes a shard group of each node's ranks, which needs every node "
          "to hold the same number of consecutive ranks; found ", nodes->ToString(),
          "; set strategy.hybrid_shard_size (or launch the ranks of a node consecutively)"));
    }
    ZS_RETURN_IF_ERROR(resolved.Validate(world.size()));
  }
  std::unique_ptr<ShardedModel> m(
      new ShardedModel(std::move(root), world, resolved, allocator, host_allocator));
  m->nodes_ = std::move(nodes);
  ZS_RETURN_IF_ERROR(m->Build());
  return m;
}

std::string ShardedModel::GroupMapping() const {
  const int n = world_.size();
  const int s = options_.ShardGroupSize(n);
  const std::string strategy(ShardingStrategyName(options_.strategy));
  if (s == n) {
    return absl::StrCat(strategy, ": one shard group of all ", n, n == 1 ? " rank" : " ranks",
                        nodes_ ? absl::StrCat(" (", nodes_->ToString(), ")") : "");
  }
  std::string out = absl::StrCat(strategy, ": ", n / s, " shard groups of ", s, s == 1 ? " rank" : " ranks",
                                 nodes_ ? " (a group per node: hybrid_shard_size 0)" : "",
                                 ", each parameter replicated across the groups");
  for (int g = 0; g < n / s; ++g) {
    std::vector<int> ranks(static_cast<size_t>(s));
    for (int i = 0; i < s; ++i) ranks[i] = g * s + i;
    absl::StrAppend(&out, "\n  shard group ", g, s == 1 ? ": rank " : ": ranks ", RankRanges(ranks));
    if (nodes_) absl::StrAppend(&out, " on node ", nodes_->names[nodes_->node_of_rank[g * s]]);
  }
  if (s == 1) {
    absl::StrAppend(&out, "\n  replica group: every rank");
  } else {
    absl::StrAppend(&out, "\n  replica groups: ranks {r, r + ", s, ", ...} for r in 0..", s - 1);
  }
  if (nodes_) absl::StrAppend(&out, " (one rank per node)");
  return out;
}

bool ShardedModel::Aliased(const ShardedUnit& u, const ShardingOptions& o) {
  return u.flat.shard_group_size() == 1 && u.param_dtype == DType::kF32 &&
         !o.offload.params_on_host();
}

void ShardedModel::set_trace(TraceRecorder* trace, GpuTimeline* gpu) {
  trace_ = trace;
  gpu_ = trace != nullptr ? gpu : nullptr;
  const int pid = world_.rank();
  // The communicators' own spans: world, shard and replica groups and the
  // communication hook's groups are one family (Note [Communication spans]).
  world_.set_trace(trace, pid, gpu_);
  autograd::SetBackwardOpTrace(trace, {pid, TraceRow::kCompute}, gpu_);
  if (trace_ != nullptr) {
    trace_->NameProcess(pid, absl::StrCat("rank ", pid));
    trace_->NameRow({pid, TraceRow::kCompute}, "compute");
    if (gpu_ != nullptr && gpu_->records_events()) trace_->NameRow(TraceRow{pid, TraceRow::kCompute}.Gpu(), "gpu compute");
    trace_->NameRow({pid, TraceRow::kIssued}, "issued (issue to observed completion)");
    world_.set_trace_name(absl::StrCat("world (", world_.size(), " ranks)"));
    shard_group_->set_trace_name(absl::StrCat("shard group (", shard_group_->size(), " ranks)"));
    replica_group_->set_trace_name(absl::StrCat("replica group (", replica_group_->size(), " ranks)"));
  }
}

GpuMark ShardedModel::GpuBegin(const std::string& name) {
  return gpu_ != nullptr ? gpu_->Begin(schedule_->compute().native_handle(), name) : GpuMark{};
}

void ShardedModel::GpuEnd(GpuMark& mark, std::string name, const char* category) {
  if (gpu_ == nullptr) return;
  gpu_->End(mark, schedule_->compute().native_handle(), std::move(name), category,
            TraceRow{world_.rank(), TraceRow::kCompute}.Gpu());
}

std::vector<ShardedUnit*> ShardedModel::units() {
  std::vector<ShardedUnit*> out;
  for (auto& u : units_) out.push_back(u.get());
  return out;
}

// ================================================================ whole-model operations

absl::Status ShardedModel::SummonFullParams(const std::function<absl::Status()>& fn, bool writeback,
                                            bool rank0_only) {
  summoning_ = true;
  for (auto& u : units_) {
    if (absl::Status g = Gather(*u); !g.ok()) {
      summoning_ = false;
      return g;
    }
  }
  summoning_ = false;
  const bool hide = rank0_only && world_.rank() != 0;
  if (hide) {
    for (auto& u : units_) {
      for (const FlatParamSlot& p : u->flat.params()) {
        ZS_RETURN_IF_ERROR(p.var.set_value(Tensor()));
      }
    }
  }
  absl::Status status = fn();
  if (status.ok() && writeback && !hide) {
    for (auto& u : units_) {
      if (Aliased(*u, options_)) continue;  // the parameters are the shard
      ZS_ASSIGN_OR_RETURN(Tensor mine, u->full.Narrow(0, u->flat.shard_offset(), u->flat.shard_numel()));
      ZS_RETURN_IF_ERROR(
          WithShard(*u, /*write=*/true, [&](const Tensor& shard) { return schedule_->Copy(shard, mine); }));
    }
  }
  for (auto& u : units_) {
    if (hide) u->state = ShardedUnit::State::kGathered;  // views were dropped above
    ZS_RETURN_IF_ERROR(Reshard(*u));
  }
  return status;
}

absl::Status ShardedModel::AverageBuffers() {
  for (auto& [name, buffer] : root_->NamedBuffers()) {
    if (!IsFloatingPoint(buffer.dtype())) continue;
    ZS_ASSIGN_OR_RETURN(Tensor c, buffer.Contiguous());
    ZS_RETURN_IF_ERROR(world_.AllReduce(c, ReduceOp::kAvg));
    if (!IsSameView(c, buffer)) ZS_RETURN_IF_ERROR(buffer.CopyFrom(c));
  }
  return absl::OkStatus();
}

// ================================================================ reporting

std::string ShardedModel::ToString() const {
  std::string out = absl::StrFormat(
      "ShardedModel: %s, world %d, shard group %d (rank %d), replica group %d, %d units, "
      "device %s, allocator '%s'\n",
      options_.ToString(), world_.size(), shard_group_->size(), shard_group_->rank(),
      replica_group_->size(), units_.size(), allocator_->device().ToString(), allocator_->name());
  for (const auto& u : units_) {
    // Note [Frozen parameters]: which units hold no gradient or optimizer state.
    std::string role;
    if (u->owner != nullptr) {
      role = absl::StrFormat(", frozen part of unit %d (gathered and freed with it; no gradient, no optimizer state)",
                             u->owner->index);
    } else if (u->frozen()) {
      role = ", frozen (no gradient, no optimizer state)";
    } else if (u->frozen_part != nullptr) {
      role = absl::StrFormat(", frozen parameters in unit %d", u->frozen_part->index);
    }
    absl::StrAppend(&out, absl::StrFormat("  unit %d \"%s\" (%s)%s, gathered as %s: %s", u->index, u->name,
                                          u->module->type_name(), role, DTypeName(u->param_dtype),
                                          u->flat.ToString()));
  }
  for (const TiedPlacement& t : ties_) absl::StrAppend(&out, "  ", t.ToString(), "\n");
  absl::StrAppend(&out, "  memory plan per rank: ", Plan().ToString(), "\n");
  if (param_swap_ != nullptr) {
    absl::StrAppend(&out, "  NVMe ", param_swap_->ToString(), "\n");
    if (!param_swap_->note().empty()) absl::StrAppend(&out, "  note: ", param_swap_->note(), "\n");
  }
  return out;
}

}  // namespace zeroshard
