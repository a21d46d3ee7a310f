// TrainStep: the one training step of every job (the GPT loop of
// train/trainer.h, the vision loop of train/resnet_trainer.h) and of a program
// that embeds the library (examples/embed/spiral.cc). One Run is one
// optimizer step over `accumulative_counts` micro-batches; the caller's
// forward runs one micro-batch and returns its loss.
//
//   ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, sharding));
//   ZS_ASSIGN_OR_RETURN(TrainStep step, TrainStep::Create(*sharded, {
//       .optimizer = {.kind = optim::OptimizerKind::kAdamW, .weight_decay = 0.1},
//       .lr = {.kind = optim::LrScheduleKind::kCosine, .lr = 1e-3, .warmup_steps = 10, .decay_steps = 200},
//       .accumulative_counts = 2, .clip_grad_max_norm = 1.0}));
//   for (int64_t s = 0; s < 200; ++s) {
//     ZS_ASSIGN_OR_RETURN(StepResult r, step.Run([&](int64_t micro_step) -> absl::StatusOr<Variable> {
//       return MyLoss(*model, Batch(s, micro_step));   // the user's forward on one micro-batch
//     }));
//     // r.loss: the global mean loss; r.lr, r.grad_norm, r.skipped, r.loss_scale
//   }
//
// What a Run does, in order (the order of the floating-point operations is
// part of the contract: a job's losses are compared bit for bit with
// recorded runs):
//   for each micro-batch m = 0 .. A-1:
//     1. loss_m = forward(m); its value is read (Item) and added, in double,
//        to this rank's sum;
//     2. OptimWrapper::UpdateParams(loss_m) (optim/optim_wrapper.h): backward
//        of loss_m / A (times the loss scale under fp16 loss scaling; inside
//        ShardedModel::NoSync() for m < A-1 when `no_sync`, otherwise the
//        gradient shards accumulate after each micro-batch's reduce-scatter);
//        after the last micro-batch: one all-reduced overflow flag, skip the
//        step on every rank if any rank overflowed, else unscale, clip to
//        `clip_grad_max_norm`, optimizer step at the scheduled lr, schedule
//        step; zero the gradients either way;
//   3. the global mean loss: this rank's sum / A, rounded to f32 and averaged
//      over the ranks of `host` with one all-reduce (kAvg, in f32).
// With device_scalars on GPUs (the main job's GPU runs) step 1 reads nothing:
// the micro-batch losses are added on the device (f32), scaled by 1 / A, and
// averaged over the model's world by an all-reduce on the device (NCCL,
// ordered on the compute stream); StepResult::loss_on_device holds the result
// and no host synchronisation happens inside Run (docs/gpu.md).
//
// ValStep / TestStep run a forward under no-grad with the model in eval mode
// (restored after): MMEngine's val_step / test_step.
#ifndef ZEROSHARD_TRAIN_TRAIN_STEP_H_
#define ZEROSHARD_TRAIN_TRAIN_STEP_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/optim/optim_wrapper.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard {

// What one optimizer step did (every rank gets the same).
struct StepResult {
  int64_t step = 0;       // the step's index: optimizer steps before it, skipped ones included
  double loss = 0;        // mean over the step's micro-batches and all ranks (3. above)
  double lr = 0;          // the scheduled lr of this step (used unless skipped)
  double grad_norm = 0;   // total norm before clipping; 0 without clipping or when skipped
  bool skipped = false;   // loss scaling (or an injected inf) found an overflow: no parameter changed
  double loss_scale = 0;  // the loss scale after this step (the next step's); 0 without loss scaling
  // With OptimWrapperOptions::device_scalars on GPUs nothing above is read
  // from the device inside Run: `loss` and `grad_norm` are NaN and these hold
  // them on the device until the caller reads them (ReadLoss, ReadGradNorm;
  // each read is one host synchronisation).
  Tensor loss_on_device;       // f32 [1]: the mean over micro-batches and ranks
  Tensor grad_norm_on_device;  // one double (i64 storage); undefined without clipping or when skipped
};

// The step's loss and grad norm, read from the device when they were left
// there (a host synchronisation), else the values already in `r`.
absl::StatusOr<double> ReadLoss(const StepResult& r);
absl::StatusOr<double> ReadGradNorm(const StepResult& r);

class TrainStep {
 public:
  // The user's forward on micro-batch `micro_step` (0 .. A-1) of the step;
  // returns the loss, a 0-d Variable.
  using Forward = std::function<absl::StatusOr<autograd::Variable>(int64_t micro_step)>;

  // `host` carries the step's host-side numbers (the mean loss): the model's
  // world when null; on GPUs the in-process communicator beside NCCL.
  static absl::StatusOr<TrainStep> Create(ShardedModel& model, const optim::OptimWrapperOptions& options,
                                          Communicator* host = nullptr);

  absl::StatusOr<StepResult> Run(const Forward& forward);

  // The optimizer, schedule and loss scaler (checkpoints save and restore them).
  optim::OptimWrapper& optim() { return optim_; }
  // Optimizer steps taken (skipped ones included); set on resume.
  int64_t step() const { return optim_.step(); }
  void set_step(int64_t step) { optim_.set_step(step); }
  int64_t accumulative_counts() const { return optim_.options().accumulative_counts; }

 private:
  TrainStep(optim::OptimWrapper optim, ShardedModel& model, Communicator& host)
      : optim_(std::move(optim)), model_(&model), host_(&host) {}

  optim::OptimWrapper optim_;
  ShardedModel* model_;
  Communicator* host_;
};

// The user's forward under no-grad with the model in eval mode (restored
// after); returns its outputs as they are (per rank) and fills `logs` (when
// not null) with the 0-d ones averaged over ranks.
absl::StatusOr<optim::Losses> ValStep(ShardedModel& model,
                                      const std::function<absl::StatusOr<optim::Losses>()>& forward,
                                      optim::LogVars* logs = nullptr);
absl::StatusOr<optim::Losses> TestStep(ShardedModel& model,
                                       const std::function<absl::StatusOr<optim::Losses>()>& forward,
                                       optim::LogVars* logs = nullptr);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_TRAIN_STEP_H_
