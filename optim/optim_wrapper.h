// OptimWrapper: MMEngine's OptimWrapper.update_params for a ShardedModel:
// one micro-batch's loss in, the optimizer step out every
// `accumulative_counts` calls, with accumulation, no_sync, clipping, fp16
// loss scaling and the LR schedule. The one training step of every job,
// TrainStep (train/train_step.h), runs the user's forward on each micro-batch
// and calls UpdateParams; use it rather than this class directly.
//
//   ZS_ASSIGN_OR_RETURN(OptimWrapper ow, OptimWrapper::Create(*sharded, {
//       .optimizer = {.kind = OptimizerKind::kAdamW, .weight_decay = 0.1},
//       .lr = {.kind = LrScheduleKind::kCosine, .lr = 1e-3, .warmup_steps = 10, .decay_steps = 200},
//       .accumulative_counts = 2, .clip_grad_max_norm = 1.0}));
//   ZS_ASSIGN_OR_RETURN(OptimWrapper::Update u, ow.UpdateParams(loss));   // per micro-batch
//
// With accumulative_counts = A the optimizer steps on every A-th call (the
// last micro-batch of a step), as MMEngine's update_params does. What a call
// does, in order:
//   1. backward of loss / A, times the loss scale when fp16 loss scaling is on;
//      inside ShardedModel::NoSync() for all but the last micro-batch when
//      `no_sync` is set (otherwise gradient shards accumulate after each
//      micro-batch's reduce-scatter);
//   2. on the last micro-batch: one all-reduced overflow flag (loss scaling),
//      skip the step on every rank if any rank overflowed, else unscale, clip
//      to `clip_grad_max_norm`, optimizer step at the scheduled lr, schedule
//      step; then zero the gradients either way.
// SumLosses (MMEngine's parse_losses) and MeanOverRanks are the helpers of a
// forward that returns named losses.
#ifndef ZEROSHARD_OPTIM_OPTIM_WRAPPER_H_
#define ZEROSHARD_OPTIM_OPTIM_WRAPPER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/optim/loss_scaler.h"
#include "zeroshard/optim/lr_schedule.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard::optim {

struct OptimWrapperOptions {
  OptimizerOptions optimizer;  // its lr is ignored: the schedule's lr rules
  LrSchedule lr;
  int accumulative_counts = 1;      // micro-batches per optimizer step
  bool no_sync = false;             // accumulate unsharded (NoSync) instead of in shards
  double clip_grad_max_norm = 0;    // 0: no clipping (the norm is still reported)
  bool loss_scaling = false;        // fp16 dynamic loss scaling (DeepSpeed's rules)
  LossScalerOptions loss_scaler;
  // Keep the step's scalars on a GPU (no host synchronisation): clipping runs
  // through ShardedModel::ClipGradNormOnDevice, and TrainStep leaves the
  // mean loss on the device (train/train_step.h). Ignored on CPU ranks.
  bool device_scalars = false;
  // Fault injection for tests: on this optimizer step, rank 0's gradients
  // become inf (the loss is multiplied by inf before backward).
  int64_t inject_inf_at_step = -1;
};

// Named scalar values averaged over ranks, in the order they were produced.
using LogVars = std::vector<std::pair<std::string, double>>;
// Named loss terms (or outputs) as a user's forward returns them.
using Losses = std::vector<std::pair<std::string, autograd::Variable>>;

class OptimWrapper {
 public:
  static absl::StatusOr<OptimWrapper> Create(ShardedModel& model, const OptimWrapperOptions& options);

  // Steps 1 and 2 above for one micro-batch's loss. `grad_norm` and
  // `skipped` are set when this was the last micro-batch of a step.
  struct Update {
    bool stepped = false;  // this call ended a step (optimizer stepped or skipped)
    bool skipped = false;  // loss scaling found an overflow: no parameter changed
    double grad_norm = 0;  // total norm before clipping (when stepped and not skipped)
    // With device_scalars on a GPU: grad_norm is NaN and this holds it (one
    // double in an i64 tensor; ReadGradNorm in train/train_step.h).
    Tensor grad_norm_on_device;
    double lr = 0;         // the lr of this step
  };
  absl::StatusOr<Update> UpdateParams(const autograd::Variable& loss);

  // Optimizer steps taken (skipped ones included), i.e. the schedule's position.
  int64_t step() const { return step_; }
  int micro_step() const { return micro_; }
  double lr() const { return scheduler_.lr(); }
  bool loss_scaling() const { return options_.loss_scaling; }

  ShardedOptimizer& optimizer() { return optimizer_; }
  LrScheduler& scheduler() { return scheduler_; }
  DynamicLossScaler& loss_scaler() { return scaler_; }
  const OptimWrapperOptions& options() const { return options_; }
  // Restores the position after a checkpoint load (the optimizer's own step
  // count is restored by the checkpoint).
  void set_step(int64_t step) { step_ = step; }

 private:
  OptimWrapper(ShardedModel& model, const OptimWrapperOptions& options, ShardedOptimizer optimizer,
               DynamicLossScaler scaler);

  ShardedModel* model_;
  OptimWrapperOptions options_;
  ShardedOptimizer optimizer_;
  LrScheduler scheduler_;
  DynamicLossScaler scaler_;
  int64_t step_ = 0;
  int micro_ = 0;              // micro-batches done in the current step
  double scale_in_step_ = 1;   // the loss scale this step's micro-batches used
};

// MMEngine's parse_losses: the sum of every entry whose name contains "loss"
// (each a 0-d Variable); an error if there is none.
absl::StatusOr<autograd::Variable> SumLosses(const Losses& losses);

// Averages scalar values over the ranks of `comm` with one all-reduce.
absl::StatusOr<LogVars> MeanOverRanks(Communicator& comm, LogVars values);

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_OPTIM_WRAPPER_H_
