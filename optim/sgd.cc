#include "zeroshard/optim/sgd.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/optim/cpu/optim_kernels.h"
#include "zeroshard/optim/sgd_math.h"
#include "zeroshard/optim/step_checks.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::optim {

absl::Status SgdOptions::Validate() const {
  if (!std::isfinite(momentum) || momentum < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SGD: momentum must be finite and >= 0, got ", momentum));
  }
  if (!std::isfinite(dampening) || dampening < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SGD: dampening must be finite and >= 0, got ", dampening));
  }
  if (nesterov && (momentum <= 0 || dampening != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum ", momentum,
        " and dampening ", dampening));
  }
  return absl::OkStatus();
}

std::string SgdOptions::ToString() const {
  return absl::StrCat("SGD(momentum=", momentum, ", dampening=", dampening,
                      ", nesterov=", nesterov ? "true" : "false", ")");
}

absl::StatusOr<SgdState> SgdState::Create(int64_t numel, const SgdOptions& options,
                                          Allocator* allocator) {
  ZS_RETURN_IF_ERROR(options.Validate());
  if (numel < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SgdState: numel must be >= 0, got ", numel));
  }
  SgdState state;
  if (options.momentum != 0) {
    ZS_ASSIGN_OR_RETURN(state.momentum_buffer, Tensor::Zeros({numel}, DType::kF32, allocator));
  }
  return state;
}

absl::Status SgdStep(const SgdOptions& options, absl::Span<const ParamGroup> groups,
                     const Tensor& param, const Tensor& grad, SgdState& state,
                     const StepOptions& step) {
  constexpr absl::string_view kOp = "SgdStep";
  ZS_RETURN_IF_ERROR(options.Validate());
  if (!param.defined()) return absl::InvalidArgumentError("SgdStep: param is undefined");
  const int64_t n = param.numel();
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(kOp, "param", param, n, {DType::kF32}));
  ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(kOp, "grad", grad, n,
                                               {DType::kF32, DType::kBF16, DType::kF16}));
  const bool use_momentum = options.momentum != 0;
  if (use_momentum) {
    ZS_RETURN_IF_ERROR(internal::CheckFlatBuffer(kOp, "state.momentum_buffer",
                                                 state.momentum_buffer, n, {DType::kF32}));
  }
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SgdStep: state.step is ", state.step, " (< 0)"));
  }
  ZS_RETURN_IF_ERROR(internal::CheckStepOptions(kOp, step, n));
  const Tensor no_buffer;
  ZS_RETURN_IF_ERROR(internal::CheckDisjoint(
      kOp, {{"param", &param},
            {"grad", &grad},
            {"state.momentum_buffer", use_momentum ? &state.momentum_buffer : &no_buffer},
            {"param_copy", &step.param_copy}}));
  ZS_RETURN_IF_ERROR(ValidateParamGroups(groups, n));

  const SgdHyper hyper{options.momentum, options.dampening, options.nesterov};
  std::vector<SgdScalars> scalars;
  scalars.reserve(groups.size());
  for (const ParamGroup& g : groups) {
    scalars.push_back(MakeSgdScalars(hyper, state.step == 0, g.lr, g.weight_decay, step.grad_scale));
  }
  cpu::SgdBuffers buffers;
  buffers.param = param.data<float>();
  buffers.grad = grad.raw_data();
  buffers.momentum_buffer = use_momentum ? state.momentum_buffer.data<float>() : nullptr;
  buffers.param_copy = step.param_copy.defined() ? step.param_copy.raw_data() : nullptr;
  const std::optional<DType> copy_dtype =
      step.param_copy.defined() ? std::optional<DType>(step.param_copy.dtype()) : std::nullopt;
  cpu::SgdStepCpu(scalars, internal::Segments(groups), buffers, grad.dtype(), copy_dtype,
                  step.num_threads);
  state.step += 1;
  return absl::OkStatus();
}

}  // namespace zeroshard::optim
