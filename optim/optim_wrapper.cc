#include "zeroshard/optim/optim_wrapper.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/ops.h"

namespace zeroshard::optim {

using autograd::Variable;

OptimWrapper::OptimWrapper(ShardedModel& model, const OptimWrapperOptions& options, ShardedOptimizer optimizer,
                           DynamicLossScaler scaler)
    : model_(&model),
      options_(options),
      optimizer_(std::move(optimizer)),
      scheduler_(options.lr),
      scaler_(std::move(scaler)) {}

absl::StatusOr<OptimWrapper> OptimWrapper::Create(ShardedModel& model, const OptimWrapperOptions& options) {
  if (options.accumulative_counts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("OptimWrapper: accumulative_counts must be >= 1, found ", options.accumulative_counts));
  }
  if (options.clip_grad_max_norm < 0 || !std::isfinite(options.clip_grad_max_norm)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OptimWrapper: clip_grad_max_norm must be finite and >= 0 (0: no clipping), found ",
        options.clip_grad_max_norm));
  }
  ZS_RETURN_IF_ERROR(options.lr.Validate());
  OptimizerOptions o = options.optimizer;
  o.lr = options.lr.lr;
  ZS_ASSIGN_OR_RETURN(ShardedOptimizer optimizer, ShardedOptimizer::Create(model, o));
  ZS_ASSIGN_OR_RETURN(DynamicLossScaler scaler, DynamicLossScaler::Create(options.loss_scaler));
  return OptimWrapper(model, options, std::move(optimizer), std::move(scaler));
}

absl::StatusOr<OptimWrapper::Update> OptimWrapper::UpdateParams(const Variable& loss) {
  const int a = options_.accumulative_counts;
  const bool last = micro_ + 1 == a;
  if (micro_ == 0) scale_in_step_ = scaler_.scale();
  double factor = 1.0 / a;
  if (options_.loss_scaling) factor *= scale_in_step_;
  if (step_ == options_.inject_inf_at_step && model_->world().rank() == 0) factor = INFINITY;
  ZS_ASSIGN_OR_RETURN(Variable scaled, zeroshard::ops::Scale(loss, factor));
  if (options_.no_sync && !last) {
    auto scope = model_->NoSync();
    ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
  } else {
    ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
  }
  Update u;
  u.lr = scheduler_.lr();
  if (!last) {
    ++micro_;
    return u;
  }
  micro_ = 0;
  u.stepped = true;
  if (options_.loss_scaling || options_.inject_inf_at_step >= 0) {
    // One flag for every rank: an overflow anywhere skips the step everywhere.
    ZS_ASSIGN_OR_RETURN(u.skipped, model_->GradientsOverflowed());
    if (options_.loss_scaling) {
      ZS_RETURN_IF_ERROR(scaler_.Update(u.skipped));
      if (!u.skipped) {
        ZS_RETURN_IF_ERROR(model_->ScaleGradients(1.0 / scale_in_step_));
      }
    }
  }
  if (!u.skipped) {
    if (options_.clip_grad_max_norm > 0) {
      if (options_.device_scalars && model_->world().device().is_cuda()) {
        ZS_ASSIGN_OR_RETURN(u.grad_norm_on_device, model_->ClipGradNormOnDevice(options_.clip_grad_max_norm));
        u.grad_norm = std::nan("");
      } else {
        ZS_ASSIGN_OR_RETURN(u.grad_norm, model_->ClipGradNorm(options_.clip_grad_max_norm));
      }
    }
    ZS_RETURN_IF_ERROR(optimizer_.Step(u.lr));
    scheduler_.Step();
  }
  ZS_RETURN_IF_ERROR(model_->ZeroGrad());
  ++step_;
  return u;
}

absl::StatusOr<Variable> SumLosses(const Losses& losses) {
  Variable total;
  std::string names;
  for (const auto& [name, v] : losses) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
    if (name.find("loss") == std::string::npos) continue;
    if (v.numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("loss \"", name, "\" must be a scalar, found ",
                                                     v.numel(), " elements"));
    }
    if (!total.defined()) {
      total = v;
    } else {
      ZS_ASSIGN_OR_RETURN(total, zeroshard::ops::Add(total, v));
    }
  }
  if (!total.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the forward returned no entry whose name contains \"loss\"; found: [", names, "]"));
  }
  return total;
}

absl::StatusOr<LogVars> MeanOverRanks(Communicator& comm, LogVars values) {
  if (values.empty()) return values;
  std::vector<float> v;
  v.reserve(values.size());
  for (const auto& [name, x] : values) v.push_back(static_cast<float>(x));
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector(v, {static_cast<int64_t>(v.size())}));
  ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kAvg));
  ZS_ASSIGN_OR_RETURN(std::vector<double> mean, t.ToVector<double>());
  for (size_t i = 0; i < values.size(); ++i) values[i].second = mean[i];
  return values;
}

}  // namespace zeroshard::optim
