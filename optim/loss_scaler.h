// Dynamic loss scaling for fp16 training, with DeepSpeed's semantics
// (deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler, configured as its
// "fp16" section: initial_scale_power, loss_scale_window, hysteresis,
// consecutive_hysteresis, min_loss_scale).
//
//   ZS_ASSIGN_OR_RETURN(DynamicLossScaler scaler, DynamicLossScaler::Create({}));
//   loss_seed = scaler.scale();                              // backward of loss * scale
//   ZS_ASSIGN_OR_RETURN(bool overflow, HasNonFinite(grad));  // optim/grad_clip.h
//   overflow = AllReduceOr(overflow);                        // one flag for every rank
//   if (!overflow) {
//     step.grad_scale = scaler.inv_scale();                  // unscale inside the step
//     ZS_RETURN_IF_ERROR(AdamWStep(options, groups, param, grad, state, step));
//   }
//   ZS_RETURN_IF_ERROR(scaler.Update(overflow));             // skipped steps are counted
//
// Update(overflow):
//   overflow: when hysteresis == 1 or the hysteresis left is 1, scale =
//             max(scale / scale_factor, min_scale) (an overflow already at min_scale
//             is an error when raise_error_at_min_scale); otherwise the hysteresis
//             left drops by one and the scale stays. The step counts as skipped.
//   clean:    with consecutive_hysteresis the hysteresis left is reset; every
//             scale_window-th iteration since the last overflow (the first one
//             after scale_window clean iterations from the start) multiplies the
//             scale by scale_factor and resets the hysteresis left.
#ifndef ZEROSHARD_OPTIM_LOSS_SCALER_H_
#define ZEROSHARD_OPTIM_LOSS_SCALER_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard::optim {

struct LossScalerOptions {
  int initial_scale_power = 16;   // initial scale 2^initial_scale_power
  double scale_factor = 2.0;
  int64_t scale_window = 1000;    // DeepSpeed's loss_scale_window
  int hysteresis = 2;             // DeepSpeed's hysteresis (delayed_shift)
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;         // DeepSpeed's min_loss_scale
  bool raise_error_at_min_scale = true;

  absl::Status Validate() const;
  std::string ToString() const;
};

class DynamicLossScaler {
 public:
  static absl::StatusOr<DynamicLossScaler> Create(const LossScalerOptions& options);

  // Multiply the loss by scale() before backward; gradients are then scaled by it.
  double scale() const { return scale_; }
  // 1 / scale(): StepOptions::grad_scale (times a clip coefficient) unscales them.
  double inv_scale() const { return 1.0 / scale_; }
  // After each iteration, with the overflow flag every rank agrees on.
  absl::Status Update(bool overflow);

  int64_t iteration() const { return iteration_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  int hysteresis_left() const { return hysteresis_left_; }
  const LossScalerOptions& options() const { return options_; }
  // "loss scale 32768, hysteresis left 1, 3 of 120 steps skipped".
  std::string ToString() const;

  // Keys: scale, iteration, last_overflow_iteration, hysteresis_left,
  // skipped_steps (the options are configuration and are not saved).
  std::map<std::string, std::string> StateDict() const;
  absl::Status LoadStateDict(const std::map<std::string, std::string>& state);

 private:
  explicit DynamicLossScaler(const LossScalerOptions& options);

  LossScalerOptions options_;
  double scale_ = 1;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
  int hysteresis_left_ = 1;
  int64_t skipped_steps_ = 0;
};

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_LOSS_SCALER_H_
