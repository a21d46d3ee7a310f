// Part of ShardedModel (sharded_model.h): gradient shards. Where they live
// (InitGradShard, GradStorage; Note [Replicated gradients]), how a unit's
// flat gradient is reduced into them (ReduceUnit, FinishBackward, and no_sync:
// NoSync() keeps the flat gradients instead), and what a step does to them
// (ZeroGrad, GradientsOverflowed, ScaleGradients, ClipGradNorm).
#include "zeroshard/sharding/sharded_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/device_scalar.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

// ================================================================ where gradient shards live

absl::Status ShardedModel::InitGradShard(ShardedUnit& unit, Allocator* grad_home) {
  const FlatParameter& flat = unit.flat;
  unit.grad_dtype = options_.mixed_precision.keep_low_precision_grads ? unit.reduce_dtype : DType::kF32;
  if (!options_.ReplicatesGradients()) {
    ZS_ASSIGN_OR_RETURN(unit.grad_shard, Tensor::Zeros({flat.shard_numel()}, unit.grad_dtype, grad_home));
    return absl::OkStatus();
  }
  // Note [Replicated gradients]: the whole gradient, the shard a view of it.
  ZS_ASSIGN_OR_RETURN(unit.replicated_grad, Tensor::Zeros({flat.padded_numel()}, unit.grad_dtype, grad_home));
  ZS_ASSIGN_OR_RETURN(unit.grad_shard, unit.replicated_grad.Narrow(0, flat.shard_offset(), flat.shard_numel()));
  return absl::OkStatus();
}

const Tensor& ShardedModel::GradStorage(const ShardedUnit& unit) {
  return unit.replicated_grad.defined() ? unit.replicated_grad : unit.grad_shard;
}

// ================================================================ reduction

// Note [Gradients that land in their shard]
// With one rank in the shard group and one in the replica group (world 1, or
// every rank its own group), the reduction is the identity: the averaged
// gradient is the rank's own. Then, when the flat gradient would have the
// shard's dtype and place (reduce_dtype == grad_dtype, gradients not
// offloaded, no communication hook that wants to see the reduction) and
// gradients are synchronised (not inside NoSync()), the parameters' .grad
// views point into the gradient shard itself: gradients land (accumulate)
// there directly, and the zero fill of a separate flat gradient, the
// collective and the add into the shard - three passes over the unit's
// gradient bytes per backward - do not happen. The values are bitwise the
// same: the engine sums a leaf's contributions of one backward (two uses of
// GPT's tied embedding) before AccumulateGrad adds them into its .grad, so the
// shard gets s + g either way (before: 0 + g into the flat gradient, exact,
// then s + g into the shard).
bool ShardedModel::GradientsLandInShard(const ShardedUnit& unit) const {
  return shard_group_->size() == 1 && replica_group_->size() == 1 && sync_gradients_ && !unit.frozen() &&
         unit.reduce_dtype == unit.grad_dtype && !options_.offload.grads_on_host() &&
         GradStorage(unit).numel() == unit.flat.padded_numel() && comm_hook_->name() == "none";
}

absl::Status ShardedModel::ReduceUnit(ShardedUnit& unit) {
  if (unit.reduced) return absl::OkStatus();
  unit.reduced = true;
  CollectiveOptions opts = schedule_->Collective();
  unit.reduce_issue_us = -1;  // issued untraced: no "issued" span
  if (trace_ != nullptr) {
    GpuEnd(unit.backward_gpu, "backward " + unit.name, "gpu compute");  // inside the host span
    unit.reduce_issue_us = trace_->NowUs();  // before issuing (Note [Trace layout])
    trace_->AddSpan("backward " + unit.name, "compute", {world_.rank(), TraceRow::kCompute}, unit.backward_start_us,
                    unit.reduce_issue_us);
    opts.trace_label = (options_.ReplicatesGradients() ? "all-reduce " : "reduce-scatter ") + unit.name;
  }
  if (sync_gradients_ && !unit.frozen() && unit.full_grad.raw_data() == GradStorage(unit).raw_data()) {
    // Note [Gradients that land in their shard]: nothing to reduce or add.
    unit.reduce_scatter_numel += unit.full_grad.numel();
    unit.full_grad = Tensor();
    for (const FlatParamSlot& p : unit.flat.params()) p.var.reset_grad();
  } else if (sync_gradients_ && !unit.frozen() && options_.ReplicatesGradients()) {
    // Note [Replicated gradients]: every rank gets the whole averaged gradient.
    unit.reduce_scatter_numel += unit.full_grad.numel();
    ZS_ASSIGN_OR_RETURN(unit.reduce_work,
                        shard_group_->AllReduceAsync(unit.full_grad, unit.full_grad, ReduceOp::kAvg, opts));
    reduce_order_.push_back(&unit);
  } else if (sync_gradients_ && !unit.frozen()) {
    unit.reduce_scatter_numel += unit.full_grad.numel();
    ZS_ASSIGN_OR_RETURN(Tensor mine, unit.full_grad.Narrow(0, unit.flat.shard_offset(),
                                                           unit.flat.shard_numel()));
    // Through the communication hook (comm_hook.h): the plain reduce-scatter by default.
    ZS_ASSIGN_OR_RETURN(unit.reduce_work,
                        comm_hook_->ReduceScatter(*shard_group_, ReduceCall{.unit = unit.index,
                                                                            .full_grad = unit.full_grad,
                                                                            .mine = mine,
                                                                            .op = ReduceOp::kAvg,
                                                                            .opts = opts}));
    reduce_order_.push_back(&unit);
  }
  // Note [Unsharded gradients are freed as their reductions finish]
  while (reduce_order_.size() > kReductionsInFlight) {
    ZS_RETURN_IF_ERROR(CompleteReduction(*reduce_order_.front()));
    reduce_order_.erase(reduce_order_.begin());
  }
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPost) {
    ZS_RETURN_IF_ERROR(Prefetch(NextInBackwardOrder(unit)));
  }
  // Every parameter gradient has landed, so nothing in this backward reads the
  // unit's (trainable) parameters again. Frozen ones may still be read: a frozen
  // part and a unit with nothing to train wait for the end (Note [Frozen parameters]).
  if (!unit.is_root && !unit.frozen()) {
    ZS_RETURN_IF_ERROR(ReshardOne(unit));
  }
  return MaybeFreeFrozen(unit);
}

// Note [Unsharded gradients are freed as their reductions finish]
// A unit's unsharded flat gradient (full_grad, padded_numel elements) exists
// from its pre-backward until its reduction has been consumed. Were every
// reduction awaited only at the end of backward, a rank would hold every
// unit's full gradient at once: Psi elements, the very memory ZeRO-2/3 shards
// away. So at most kReductionsInFlight reductions are outstanding: launching
// one more completes the oldest (waits for it, adds this rank's slice into its
// gradient shard, frees the unsharded gradient and the parameters' gradient
// views of it), and backward's peak holds a few units' gradients, as
// FSDP's post-backward stream does. Each unit's shard receives the same
// values in the same order either way, so the bits do not change. Inside
// NoSync() nothing is reduced and the unsharded gradients stay.
absl::Status ShardedModel::CompleteReduction(ShardedUnit& unit) {
  ShardedUnit* u = &unit;
  const double wait_start = trace_ ? trace_->NowUs() : 0;
  const char* const what = options_.ReplicatesGradients() ? "all-reduce " : "reduce-scatter ";
  GpuMark wait_gpu;  // on the GPU: how long compute stalled for the reduction
  if (gpu_ != nullptr) wait_gpu = GpuBegin(absl::StrCat("wait ", what, u->name));
  ZS_RETURN_IF_ERROR(schedule_->Await(*u->reduce_work));
  u->reduce_work.reset();
  if (trace_ != nullptr) {
    GpuEnd(wait_gpu, absl::StrCat("wait ", what, u->name), "gpu wait");  // inside the host span
    const double now = trace_->NowUs();
    trace_->AddSpan(absl::StrCat("wait ", what, u->name), "wait", {world_.rank(), TraceRow::kCompute}, wait_start,
                    now);
    if (u->reduce_issue_us >= 0) {
      trace_->AddSpan(absl::StrCat(what, u->name), "issued", {world_.rank(), TraceRow::kIssued}, u->reduce_issue_us,
                      now);
    }
  }
  if (replica_group_->size() > 1) {
    // Second stage (Note [Replica all-reduces run beside backward]): started now,
    // finished when two more have started or at the end of backward.
    ZS_ASSIGN_OR_RETURN(Tensor mine, ReducedPart(*u));
    CollectiveOptions opts = schedule_->Collective();
    u->replica_issue_us = -1;
    if (trace_ != nullptr) {
      u->replica_issue_us = trace_->NowUs();
      opts.trace_label = "replica all-reduce " + u->name;
    }
    ZS_ASSIGN_OR_RETURN(u->replica_work, replica_group_->AllReduceAsync(mine, mine, ReduceOp::kAvg, opts));
    replica_order_.push_back(u);
    while (replica_order_.size() > kReductionsInFlight) {
      ZS_RETURN_IF_ERROR(CompleteReplicaReduction(*replica_order_.front()));
      replica_order_.erase(replica_order_.begin());
    }
    return absl::OkStatus();
  }
  return AccumulateReduced(*u);
}

// Note [Replica all-reduces run beside backward]
// HYBRID_SHARD (and NO_SHARD, whose shard groups are single ranks) averages
// each unit's reduced shard across the replica group after the shard group's
// reduce-scatter. Waited for at once, that all-reduce stalled the compute
// stream for its whole duration after every unit (the simulator showed 155 ms
// of a 2.1 s Llama 8B step on 64 H100s). Like the reduce-scatters it is now
// a pipeline stage: started when the reduce-scatter is consumed, completed -
// awaited, added into the shard, the unsharded gradient freed - when
// kReductionsInFlight more have started, or at the end of backward. The same
// operations on the same values in the same order: the bits do not change.
absl::StatusOr<Tensor> ShardedModel::ReducedPart(const ShardedUnit& u) {
  // SHARD_OPTIMIZER: the whole reduced gradient; else this rank's slice.
  if (options_.ReplicatesGradients()) return u.full_grad;
  return u.full_grad.Narrow(0, u.flat.shard_offset(), u.flat.shard_numel());
}

absl::Status ShardedModel::CompleteReplicaReduction(ShardedUnit& unit) {
  ShardedUnit* u = &unit;
  const double wait_start = trace_ ? trace_->NowUs() : 0;
  GpuMark wait_gpu;
  if (gpu_ != nullptr) wait_gpu = GpuBegin("wait replica all-reduce " + u->name);
  ZS_RETURN_IF_ERROR(schedule_->Await(*u->replica_work));
  u->replica_work.reset();
  if (trace_ != nullptr) {
    GpuEnd(wait_gpu, "wait replica all-reduce " + u->name, "gpu wait");  // inside the host span
    const double now = trace_->NowUs();
    trace_->AddSpan("wait replica all-reduce " + u->name, "wait", {world_.rank(), TraceRow::kCompute}, wait_start,
                    now);
    if (u->replica_issue_us >= 0) {
      trace_->AddSpan("replica all-reduce " + u->name, "issued", {world_.rank(), TraceRow::kIssued},
                      u->replica_issue_us, now);
    }
  }
  return AccumulateReduced(*u);
}

absl::Status ShardedModel::AccumulateReduced(ShardedUnit& unit) {
  ShardedUnit* u = &unit;
  // SHARD_OPTIMIZER: the whole reduced gradient into replicated_grad
  // (Note [Replicated gradients]); else this rank's slice into grad_shard.
  ZS_ASSIGN_OR_RETURN(Tensor mine, ReducedPart(*u));
  const Tensor& dst = GradStorage(*u);
  if (dst.device() != mine.device()) {  // gradients offloaded to the host
    ZS_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty({mine.numel()}, mine.dtype(), dst.allocator()));
    ZS_RETURN_IF_ERROR(schedule_->Copy(host, mine));
    mine = host;
  }
  ZS_RETURN_IF_ERROR(Add(dst, mine, dst));
  // The unsharded gradient is consumed: free it (the parameters' .grad are views of it).
  u->full_grad = Tensor();
  for (const FlatParamSlot& p : u->flat.params()) p.var.reset_grad();
  return absl::OkStatus();
}

absl::Status ShardedModel::FinishBackward() {
  callback_queued_ = false;
  for (auto& u : units_) {
    if (u->backward_started && !u->reduced) ZS_RETURN_IF_ERROR(ReduceUnit(*u));  // unused parameters
  }
  for (ShardedUnit* u : reduce_order_) ZS_RETURN_IF_ERROR(CompleteReduction(*u));
  reduce_order_.clear();
  for (ShardedUnit* u : replica_order_) ZS_RETURN_IF_ERROR(CompleteReplicaReduction(*u));
  replica_order_.clear();
  comm_hook_->EndBackward();
  for (auto& u : units_) {
    if (!u->backward_started) continue;
    if (sync_gradients_) {
      u->full_grad = Tensor();
      for (const FlatParamSlot& p : u->flat.params()) p.var.reset_grad();
    }
    ZS_RETURN_IF_ERROR(Reshard(*u));
    u->backward_started = false;
    u->reduced = false;
    u->recomputed = false;
    u->landed = 0;
  }
  return absl::OkStatus();
}

// ================================================================ what a step does to them

absl::Status ShardedModel::ZeroGrad() {
  for (auto& u : units_) {
    if (u->frozen()) continue;
    ZS_RETURN_IF_ERROR(GradStorage(*u).Fill(0.0));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ShardedModel::GradientsOverflowed() {
  double bad = 0;
  for (auto& u : units_) {
    if (u->frozen()) continue;
    // An Inf or NaN anywhere makes the (double) sum non-finite.
    ZS_ASSIGN_OR_RETURN(double sum, SumAll(u->grad_shard));
    if (!std::isfinite(sum)) bad = 1;
  }
  ZS_ASSIGN_OR_RETURN(Tensor flag, Tensor::Full({1}, bad, DType::kF32, CommAllocator()));
  ZS_RETURN_IF_ERROR(world_.AllReduce(flag, ReduceOp::kMax));
  ZS_ASSIGN_OR_RETURN(double any, flag.Item());
  return any > 0;
}

absl::Status ShardedModel::ScaleGradients(double factor) {
  for (auto& u : units_) {
    if (!u->frozen()) ZS_RETURN_IF_ERROR(Affine(GradStorage(*u), factor, 0.0, GradStorage(*u)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ShardedModel::ClipGradNormOnDevice(double max_norm) {
  Allocator* alloc = CommAllocator();
  bool all_on_device = alloc->device().is_cuda();
  for (auto& u : units_) {
    if (u->frozen()) continue;
    all_on_device = all_on_device && u->grad_shard.device().is_cuda() && GradStorage(*u).device().is_cuda();
  }
  if (!all_on_device) {  // CPU ranks, or gradient shards offloaded to the host
    ZS_ASSIGN_OR_RETURN(const double norm, ClipGradNorm(max_norm));
    ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({1}, DType::kI64));
    std::memcpy(t.raw_data(), &norm, sizeof(norm));
    return t;
  }
  int64_t units = 0;
  for (auto& u : units_) units += u->frozen() ? 0 : 1;
  ZS_ASSIGN_OR_RETURN(Tensor parts, Tensor::Empty({std::max<int64_t>(units, 1)}, DType::kI64, alloc));
  ZS_RETURN_IF_ERROR(parts.Fill(0.0));  // zero bits: 0.0 as doubles
  int64_t index = 0;
  for (auto& u : units_) {
    if (u->frozen()) continue;
    ZS_RETURN_IF_ERROR(SumOfSquaresOnDevice(u->grad_shard, parts, index++));
  }
  ZS_ASSIGN_OR_RETURN(Tensor total, Tensor::Empty({1}, DType::kF32, alloc));
  ZS_RETURN_IF_ERROR(SumInOrder(parts, total));
  CollectiveOptions norm_opts = schedule_->Collective();
  if (trace_ != nullptr) norm_opts.trace_label = "grad-norm all-reduce";
  const double norm_start = trace_ ? trace_->NowUs() : 0;
  ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, shard_group_->AllReduceAsync(total, total, ReduceOp::kSum, norm_opts));
  const double wait_start = trace_ ? trace_->NowUs() : 0;
  ZS_RETURN_IF_ERROR(work->Block(schedule_->compute()));  // the compute stream waits, not the host
  if (trace_ != nullptr) {  // as the host path's spans (below), here the host's share: issue and enqueue
    const double now = trace_->NowUs();
    trace_->AddSpan("wait grad-norm all-reduce", "wait", {world_.rank(), TraceRow::kCompute}, wait_start, now);
    trace_->AddSpan("grad-norm all-reduce", "issued", {world_.rank(), TraceRow::kIssued}, norm_start, now);
  }
  ZS_ASSIGN_OR_RETURN(Tensor norm, Tensor::Empty({1}, DType::kI64, alloc));
  ZS_ASSIGN_OR_RETURN(Tensor factor, Tensor::Empty({1}, DType::kF32, alloc));
  ZS_RETURN_IF_ERROR(ClipFactor(total, max_norm, norm, factor));
  for (auto& u : units_) {
    if (u->frozen()) continue;
    const Tensor& g = GradStorage(*u);
    if (!g.is_contiguous()) return absl::InternalError("ClipGradNormOnDevice: a non-contiguous gradient shard");
    ZS_RETURN_IF_ERROR(ScaleByDeviceScalar(g, factor));
  }
  return norm;
}

absl::StatusOr<double> ShardedModel::ClipGradNorm(double max_norm, double norm_type) {
  const bool inf = std::isinf(norm_type);
  if (!inf && norm_type != 2.0) {
    return absl::InvalidArgumentError(absl::StrCat("ClipGradNorm: norm_type ", norm_type,
                                                   ", expected 2 or infinity"));
  }
  double local = 0;
  for (auto& u : units_) {
    if (u->frozen()) continue;
    if (inf) {
      ZS_ASSIGN_OR_RETURN(Tensor a, Unary(UnaryOp::kAbs, u->grad_shard));
      ZS_ASSIGN_OR_RETURN(Tensor m, Max(a, 0));
      local = std::max(local, m.Item().value());
    } else {
      ZS_ASSIGN_OR_RETURN(double ss, SumOfSquares(u->grad_shard));
      local += ss;
    }
  }
  // The shard group holds the whole gradient between its ranks (replicas hold copies).
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, local, DType::kF32, CommAllocator()));
  const double norm_start = trace_ ? trace_->NowUs() : 0;
  CollectiveOptions norm_opts;
  if (trace_ != nullptr) norm_opts.trace_label = "grad-norm all-reduce";
  ZS_RETURN_IF_ERROR(shard_group_->AllReduce(t, inf ? ReduceOp::kMax : ReduceOp::kSum, norm_opts));
  if (trace_ != nullptr) {
    const double now = trace_->NowUs();
    trace_->AddSpan("wait grad-norm all-reduce", "wait", {world_.rank(), TraceRow::kCompute}, norm_start, now);
    trace_->AddSpan("grad-norm all-reduce", "issued", {world_.rank(), TraceRow::kIssued}, norm_start, now);
  }
  ZS_ASSIGN_OR_RETURN(double total, t.Item());
  const double norm = inf ? total : std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (auto& u : units_) {
      if (!u->frozen()) ZS_RETURN_IF_ERROR(Affine(GradStorage(*u), coef, 0.0, GradStorage(*u)));
    }
  }
  return norm;
}

}  // namespace zeroshard
