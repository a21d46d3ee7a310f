// Learning-rate schedules: constant, and linear warmup followed by cosine or
// linear decay to min_lr, as nanoGPT's get_lr.
//
//   LrSchedule schedule{.kind = LrScheduleKind::kCosine, .lr = 6e-4, .min_lr = 6e-5,
//                       .warmup_steps = 2000, .decay_steps = 600000};
//   ZS_RETURN_IF_ERROR(schedule.Validate());
//   double lr = LrAt(schedule, it);      // it = 0, 1, ... (optimizer steps taken so far)
//
//   LrScheduler scheduler(schedule);     // the same, with its position, for checkpoints
//   groups[0].lr = scheduler.lr();  ... step ...  scheduler.Step();
//   std::map<std::string, std::string> saved = scheduler.StateDict();
//
// Convention (nanoGPT's train.py get_lr, as of 2023), for step it = 0, 1, ...:
//   it <  warmup_steps:  lr * (it + 1) / (warmup_steps + 1)   (never 0: step 0 already learns)
//   it >  decay_steps:   min_lr
//   otherwise, with r = (it - warmup_steps) / (decay_steps - warmup_steps) in [0, 1]:
//     cosine: min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr)
//     linear: min_lr + (1 - r) * (lr - min_lr)
//     constant: lr (warmup still applies when warmup_steps > 0)
// decay_steps is the step at which decay ends (nanoGPT's lr_decay_iters), counted
// from 0 like `it`, not from the end of warmup; when decay_steps == warmup_steps
// the decay is a step down to min_lr at it = warmup_steps.
#ifndef ZEROSHARD_OPTIM_LR_SCHEDULE_H_
#define ZEROSHARD_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard::optim {

enum class LrScheduleKind { kConstant, kCosine, kLinear };

// "constant", "cosine", "linear".
absl::string_view LrScheduleKindName(LrScheduleKind kind);
absl::StatusOr<LrScheduleKind> ParseLrScheduleKind(absl::string_view name);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double lr = 1e-3;           // peak (after warmup)
  double min_lr = 0.0;        // end of decay; unused by kConstant
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;    // the step at which decay reaches min_lr; unused by kConstant

  // lr and min_lr finite, 0 <= min_lr <= lr; warmup_steps >= 0; for decaying
  // kinds decay_steps >= warmup_steps.
  absl::Status Validate() const;
  // "cosine(lr=0.0006, min_lr=6e-05, warmup_steps=2000, decay_steps=600000)".
  std::string ToString() const;
};

// The learning rate for step `it` (>= 0), a pure function of (schedule, it).
double LrAt(const LrSchedule& schedule, int64_t it);

// A schedule and its position: the serialisable state a checkpoint keeps.
class LrScheduler {
 public:
  explicit LrScheduler(const LrSchedule& schedule, int64_t step = 0)
      : schedule_(schedule), step_(step) {}

  // LrAt(schedule(), step()).
  double lr() const { return LrAt(schedule_, step_); }
  void Step() { ++step_; }
  int64_t step() const { return step_; }
  const LrSchedule& schedule() const { return schedule_; }

  // Keys: kind, lr, min_lr, warmup_steps, decay_steps, step; doubles written
  // with 17 significant digits, so a load gives back the same bits.
  std::map<std::string, std::string> StateDict() const;
  // The inverse of StateDict; missing, unknown or malformed keys and invalid
  // schedules are errors.
  static absl::StatusOr<LrScheduler> FromStateDict(const std::map<std::string, std::string>& state);

 private:
  LrSchedule schedule_;
  int64_t step_ = 0;
};

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_LR_SCHEDULE_H_
