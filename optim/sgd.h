// SGD with momentum, dampening, nesterov and weight decay over one flat fp32
// parameter buffer (or one rank's shard of it), as torch.optim.SGD.
//
//   SgdOptions options{.momentum = 0.9, .nesterov = true};
//   ZS_ASSIGN_OR_RETURN(SgdState state, SgdState::Create(param.numel(), options));
//   std::vector<ParamGroup> groups = {ParamGroup::Whole(param.numel(), 0.1, 1e-4)};
//   ZS_RETURN_IF_ERROR(SgdStep(options, groups, param, grad, state));
//
// The first step initialises the momentum buffer with the gradient (no
// dampening), as PyTorch does; the per-element math is optim/sgd_math.h, run
// by the CPU kernel or, for CUDA tensors, the fused kernel of optim/cuda/sgd.cu
// (the same bits).
// maximize is off. Zero-grad semantics: see Note [Zero grad] in optim/step_options.h.
#ifndef ZEROSHARD_OPTIM_SGD_H_
#define ZEROSHARD_OPTIM_SGD_H_

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

struct SgdOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;

  // As torch: momentum and dampening finite and >= 0; nesterov needs
  // momentum > 0 and dampening == 0.
  absl::Status Validate() const;
  std::string ToString() const;
};

struct SgdState {
  Tensor momentum_buffer;  // (numel,) f32; undefined when momentum == 0
  int64_t step = 0;        // steps taken; step 0 initialises the buffer

  static absl::StatusOr<SgdState> Create(int64_t numel, const SgdOptions& options,
                                         Allocator* allocator = nullptr);
};

// One step over the groups' ranges (see AdamWStep in optim/adamw.h for the
// buffer rules): param f32, grad f32/bf16/f16, state.momentum_buffer f32 of the
// same element count when options.momentum != 0; all on the CPU, or all on
// the param's GPU. Increments state.step.
absl::Status SgdStep(const SgdOptions& options, absl::Span<const ParamGroup> groups,
                     const Tensor& param, const Tensor& grad, SgdState& state,
                     const StepOptions& step = {});

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_SGD_H_
