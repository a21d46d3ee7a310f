#include "zeroshard/optim/sgd.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/optim/cpu/optim_kernels.h"
#include "zeroshard/optim/cuda/sgd_launch.h"
#include "zeroshard/optim/sgd_math.h"
#include "zeroshard/optim/step_checks.h"
#include "zeroshard/runtime/cuda/device_api.h"
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

namespace {

// The step on CUDA tensors (checked by SgdStep): the fused kernel of
// optim/cuda/sgd.cu once per group segment, on the legacy default stream (as
// the op entries of kernels/).
absl::Status SgdStepCuda(const std::vector<SgdScalars>& scalars, absl::Span<const ParamGroup> groups,
                         const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                         const StepOptions& step) {
  const bool copy = step.param_copy.defined();
  const size_t grad_item = grad.itemsize();
  const size_t copy_item = copy ? step.param_copy.itemsize() : 0;
  for (const cpu::Segment& seg : internal::Segments(groups)) {
    ZS_RETURN_IF_ERROR(::zeroshard::cuda::CudaLaunchStatus(
        cuda::LaunchSgdStep(
            scalars[seg.scalars], param.data<float>() + seg.offset,
            static_cast<const char*>(grad.raw_data()) + seg.offset * grad_item, static_cast<int>(grad.dtype()),
            momentum_buffer.defined() ? momentum_buffer.data<float>() + seg.offset : nullptr,
            copy ? static_cast<char*>(step.param_copy.raw_data()) + seg.offset * copy_item : nullptr,
            copy ? static_cast<int>(step.param_copy.dtype()) : 0, seg.numel, /*stream=*/nullptr),
        absl::StrCat("SgdStep on ", param.device().ToString())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SgdStep(const SgdOptions& options, absl::Span<const ParamGroup> groups,
                     const Tensor& param, const Tensor& grad, SgdState& state,
                     const StepOptions& step) {
  constexpr absl::string_view kOp = "SgdStep";
  ZS_RETURN_IF_ERROR(options.Validate());
  if (!param.defined()) return absl::InvalidArgumentError("SgdStep: param is undefined");
  const int64_t n = param.numel();
  // CPU tensors, or (the CUDA kernel) every buffer on the param's GPU.
  const bool on_gpu = param.device().is_cuda();
  auto check_buffer = [&](absl::string_view what, const Tensor& t, std::initializer_list<DType> dtypes) {
    return on_gpu ? internal::CheckFlatBufferOn(kOp, what, t, param.device(), n, dtypes)
                  : internal::CheckFlatBuffer(kOp, what, t, n, dtypes);
  };
  ZS_RETURN_IF_ERROR(check_buffer("param", param, {DType::kF32}));
  ZS_RETURN_IF_ERROR(check_buffer("grad", grad, {DType::kF32, DType::kBF16, DType::kF16}));
  const bool use_momentum = options.momentum != 0;
  if (use_momentum) {
    ZS_RETURN_IF_ERROR(check_buffer("state.momentum_buffer", state.momentum_buffer, {DType::kF32}));
  }
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SgdStep: state.step is ", state.step, " (< 0)"));
  }
  if (on_gpu) {
    // CheckStepOptions takes param_copy on the CPU only; on CUDA it is checked as the other buffers.
    StepOptions scalars_only = step;
    scalars_only.param_copy = Tensor();
    ZS_RETURN_IF_ERROR(internal::CheckStepOptions(kOp, scalars_only, n));
    if (step.param_copy.defined()) {
      ZS_RETURN_IF_ERROR(check_buffer("param_copy", step.param_copy, {DType::kF32, DType::kBF16, DType::kF16}));
    }
  } else {
    ZS_RETURN_IF_ERROR(internal::CheckStepOptions(kOp, step, n));
  }
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
  if (on_gpu) {
    ZS_RETURN_IF_ERROR(SgdStepCuda(scalars, groups, param, grad,
                                   use_momentum ? state.momentum_buffer : Tensor(), step));
    state.step += 1;
    return absl::OkStatus();
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
