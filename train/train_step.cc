#include "zeroshard/train/train_step.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using autograd::Variable;

absl::StatusOr<TrainStep> TrainStep::Create(ShardedModel& model, const optim::OptimWrapperOptions& options,
                                            Communicator* host) {
  ZS_ASSIGN_OR_RETURN(optim::OptimWrapper ow, optim::OptimWrapper::Create(model, options));
  return TrainStep(std::move(ow), model, host != nullptr ? *host : model.world());
}

absl::StatusOr<StepResult> TrainStep::Run(const Forward& forward) {
  StepResult r;
  r.step = optim_.step();
  const int a = optim_.options().accumulative_counts;
  const bool on_device = optim_.options().device_scalars && model_->world().device().is_cuda();
  double loss_sum = 0;
  Tensor device_sum;  // on_device: the micro-batch losses added in f32
  optim::OptimWrapper::Update update;
  for (int64_t m = 0; m < a; ++m) {
    ZS_ASSIGN_OR_RETURN(Variable loss, forward(m));
    if (on_device && loss.value().device().is_cuda()) {
      if (!device_sum.defined()) {
        ZS_ASSIGN_OR_RETURN(device_sum, loss.value().Reshape({1}));
        ZS_ASSIGN_OR_RETURN(device_sum, device_sum.Clone());
      } else {
        ZS_ASSIGN_OR_RETURN(Tensor l, loss.value().Reshape({1}));
        ZS_RETURN_IF_ERROR(Binary(BinaryOp::kAdd, device_sum, l, device_sum));
      }
    } else {
      ZS_ASSIGN_OR_RETURN(double l, loss.value().Item());
      loss_sum += l;
    }
    ZS_ASSIGN_OR_RETURN(update, optim_.UpdateParams(loss));
  }
  r.lr = update.lr;
  r.skipped = update.skipped;
  r.grad_norm = update.skipped ? 0 : update.grad_norm;
  if (!update.skipped) r.grad_norm_on_device = update.grad_norm_on_device;
  r.loss_scale = optim_.loss_scaling() ? optim_.loss_scaler().scale() : 0;
  if (device_sum.defined()) {
    // The mean over micro-batches and the world's ranks, on the device.
    if (a > 1) ZS_RETURN_IF_ERROR(Affine(device_sum, 1.0 / a, 0.0, device_sum));
    const Stream compute = Stream::Default(device_sum.device());
    ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work,
                        model_->world().AllReduceAsync(device_sum, device_sum, ReduceOp::kAvg, {.stream = &compute}));
    ZS_RETURN_IF_ERROR(work->Block(compute));
    r.loss_on_device = device_sum;
    r.loss = std::nan("");
    return r;
  }
  // The global mean: one f32 all-reduce of each rank's mean over its micro-batches.
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, loss_sum / a, DType::kF32));
  ZS_RETURN_IF_ERROR(host_->AllReduce(t, ReduceOp::kAvg));
  ZS_ASSIGN_OR_RETURN(r.loss, t.Item());
  return r;
}

absl::StatusOr<double> ReadLoss(const StepResult& r) {
  if (!r.loss_on_device.defined()) return r.loss;
  return r.loss_on_device.Item();
}

absl::StatusOr<double> ReadGradNorm(const StepResult& r) {
  if (!r.grad_norm_on_device.defined()) return r.grad_norm;
  double norm = 0;
  const Tensor& t = r.grad_norm_on_device;
  if (t.device().is_cpu()) {
    std::memcpy(&norm, t.raw_data(), sizeof(norm));
  } else {
    ZS_RETURN_IF_ERROR(t.allocator()->CopyToHost(&norm, t.raw_data(), sizeof(norm)));
  }
  return norm;
}

namespace {

// The 0-d entries of `outputs` as (name, value).
absl::StatusOr<optim::LogVars> Scalars(const optim::Losses& outputs) {
  optim::LogVars logs;
  for (const auto& [name, v] : outputs) {
    if (v.defined() && v.numel() == 1) {
      ZS_ASSIGN_OR_RETURN(double x, v.value().Item());
      logs.emplace_back(name, x);
    }
  }
  return logs;
}

absl::StatusOr<optim::Losses> EvalForward(ShardedModel& model,
                                          const std::function<absl::StatusOr<optim::Losses>()>& forward,
                                          optim::LogVars* logs) {
  nn::Module& m = model.module();
  const bool was_training = m.is_training();
  m.Eval();
  absl::StatusOr<optim::Losses> out;
  {
    autograd::NoGradGuard no_grad;
    out = forward();
  }
  m.Train(was_training);
  if (!out.ok()) return out.status();
  if (logs != nullptr) {
    ZS_ASSIGN_OR_RETURN(optim::LogVars local, Scalars(*out));
    ZS_ASSIGN_OR_RETURN(*logs, optim::MeanOverRanks(model.world(), std::move(local)));
  }
  return out;
}

}  // namespace

absl::StatusOr<optim::Losses> ValStep(ShardedModel& model,
                                      const std::function<absl::StatusOr<optim::Losses>()>& forward,
                                      optim::LogVars* logs) {
  return EvalForward(model, forward, logs);
}

absl::StatusOr<optim::Losses> TestStep(ShardedModel& model,
                                       const std::function<absl::StatusOr<optim::Losses>()>& forward,
                                       optim::LogVars* logs) {
  return EvalForward(model, forward, logs);
}

}  // namespace zeroshard
