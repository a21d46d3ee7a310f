#include "optim/adamw.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/adamw_math.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/step_checks.h"
#include "runtime/status.h"

namespace zeroshard::optim {

absl::Status AdamWOptions::Validate() const {
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW: betas must be in [0, 1), got (", beta1, ", ", beta2, ")"));
  }
  if (!std::isfinite(eps) || eps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW: eps must be finite and >= 0, got ", eps));
  }
  return absl::OkStatus();
}

std::string AdamWOptions::ToString() const {
  return absl::StrCat(decoupled_weight_decay ? "AdamW" : "Adam", "(betas=(", beta1, ", ", beta2,
                      "), eps=", eps, ")");
}

absl::StatusOr<AdamWState> AdamWState::Create(int64_t numel, Allocator* allocator) {
  if (numel < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWState: numel must be >= 0, got ", numel));
  }
  AdamWState state;
  ZS_ASSIGN_OR_RETURN(state.exp_avg, Tensor::Zeros({numel}, DType::kF32, allocator));
  ZS_ASSIGN_OR_RETURN(state.exp_avg_sq, Tensor::Zeros({numel}, DType::kF32, allocator));
  return state;
}

absl::Status AdamWStep(const AdamWOptions& options, absl::Span<const ParamGroup> groups,
                       const Tensor& param, const Tensor& grad, AdamWState& state,
                       const StepOptions& step) {
  constexpr absl::string_view kOp = "AdamWStep";
  ZS_RETURN_IF_ERROR(options.Validate());
  if (!param.defined()) return absl::InvalidArgumentError("AdamWStep: param is undefined");
  const int64_t n = param.numel();
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(kOp, "param", param, n, {DType::kF32}));
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(kOp, "grad", grad, n,
                                               {DType::kF32, DType::kBF16, DType::kF16}));
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(kOp, "state.exp_avg", state.exp_avg, n, {DType::kF32}));
  ZS_RETURN_IF_ERROR(
      internal::CheckFlatBuffer(kOp, "state.exp_avg_sq", state.exp_avg_sq, n, {DType::kF32}));
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWStep: state.step is ", state.step, " (< 0)"));
  }
  ZS_RETURN_IF_ERROR(internal::CheckStepOptions(kOp, step, n));
  ZS_RETURN_IF_ERROR(internal::CheckDisjoint(kOp, {{"param", &param},
                                                   {"grad", &grad},
                                                   {"state.exp_avg", &state.exp_avg},
                                                   {"state.exp_avg_sq", &state.exp_avg_sq},
                                                   {"param_copy", &step.param_copy}}));
  ZS_RETURN_IF_ERROR(ValidateParamGroups(groups, n));

  const int64_t t = state.step + 1;
  const AdamHyper hyper{options.beta1, options.beta2, options.eps};
  std::vector<AdamScalars> scalars;
  scalars.reserve(groups.size());
  for (const ParamGroup& g : groups) {
    scalars.push_back(MakeAdamScalars(hyper, t, g.lr, g.weight_decay, step.grad_scale));
  }
  cpu::AdamBuffers buffers;
  buffers.param = param.data<float>();
  buffers.grad = grad.raw_data();
  buffers.exp_avg = state.exp_avg.data<float>();
  buffers.exp_avg_sq = state.exp_avg_sq.data<float>();
  buffers.param_copy = step.param_copy.defined() ? step.param_copy.raw_data() : nullptr;
  const std::optional<DType> copy_dtype =
      step.param_copy.defined() ? std::optional<DType>(step.param_copy.dtype()) : std::nullopt;
  cpu::AdamStepCpu(options.decoupled_weight_decay, scalars, internal::Segments(groups), buffers,
                   grad.dtype(), copy_dtype, step.num_threads);
  state.step = t;
  return absl::OkStatus();
}

}  // namespace zeroshard::optim
