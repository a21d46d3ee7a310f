// AdamW and Adam over one flat fp32 parameter buffer (or one rank's shard of it):
// the state, and a fused step that reads and writes each byte once.
//
//   ZS_ASSIGN_OR_RETURN(AdamWState state, AdamWState::Create(param.numel()));
//   AdamWOptions options;                       // betas (0.9, 0.999), eps 1e-8, AdamW
//   std::vector<ParamGroup> groups = {ParamGroup::Whole(param.numel(), 6e-4, 0.1)};
//   for (int64_t it = 0; it < steps; ++it) {
//     ... backward fills `grad` (f32, bf16 or f16, same element count) ...
//     groups[0].lr = LrAt(schedule, state.step);          // optim/lr_schedule.h
//     ZS_RETURN_IF_ERROR(AdamWStep(options, groups, param, grad, state));
//   }
//
// Semantics are torch.optim.AdamW (decoupled_weight_decay = true) and
// torch.optim.Adam (false: weight decay added to the gradient), amsgrad and
// maximize off; the per-element math is optim/adamw_math.h. One step counter
// per state: every group steps together (the bias corrections use it).
//
// Sharding: the state of a shard is exactly the slice of the unsharded state,
// so a rank creates AdamWState::Create(shard_numel) and steps its shard with
// ShardParamGroups(groups, shard_offset, shard_numel) (optim/param_group.h).
// Zero-grad semantics: see Note [Zero grad] in optim/step_options.h.
#ifndef ZEROSHARD_OPTIM_ADAMW_H_
#define ZEROSHARD_OPTIM_ADAMW_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "zeroshard/optim/param_group.h"
#include "zeroshard/optim/step_options.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // true: AdamW (p *= 1 - lr * wd before the Adam update); false: Adam (g += wd * p).
  bool decoupled_weight_decay = true;

  // OK when 0 <= beta1, beta2 < 1 and eps is finite and >= 0.
  absl::Status Validate() const;
  std::string ToString() const;
};

// The Adam state of one flat buffer: fp32 moments of the param's element count
// and the number of steps taken (torch's state['step']).
struct AdamWState {
  Tensor exp_avg;     // (numel,) f32, first moment
  Tensor exp_avg_sq;  // (numel,) f32, second moment
  int64_t step = 0;

  // Zero moments and step 0 (allocator == nullptr: the default CPU allocator).
  static absl::StatusOr<AdamWState> Create(int64_t numel, Allocator* allocator = nullptr);
};

// One step over the groups' ranges: increments state.step, then for every
// element of every group updates param, exp_avg and exp_avg_sq in place with
// that group's lr and weight_decay; elements outside all groups are untouched.
//   param: contiguous f32 CPU tensor (any shape; treated as flat);
//   grad:  contiguous f32, bf16 or f16 tensor of the same element count;
//   state: moments of the same element count.
// Fails with InvalidArgument / OutOfRange (and changes nothing) on mismatched
// sizes or dtypes, non-contiguous or aliased buffers, invalid options or groups.
absl::Status AdamWStep(const AdamWOptions& options, absl::Span<const ParamGroup> groups,
                       const Tensor& param, const Tensor& grad, AdamWState& state,
                       const StepOptions& step = {});

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_ADAMW_H_
