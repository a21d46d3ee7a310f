#include "zeroshard/optim/adamw.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/optim/adamw_math.h"
#include "zeroshard/optim/cpu/optim_kernels.h"
#include "zeroshard/optim/cuda/adamw_launch.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/optim/step_checks.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/virtual_device.h"

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

namespace {

// Every argument of the step, for the CPU kernel or the CUDA one (the param's
// device): param, grad and the state are flat buffers of the param's numel
// (param and state f32, grad any float dtype), the step count and options are
// valid, no two buffers share memory, the groups lie inside the buffer.
absl::Status CheckStepArguments(absl::Span<const ParamGroup> groups, const Tensor& param,
                                const Tensor& grad, const AdamWState& state,
                                const StepOptions& step) {
  constexpr absl::string_view kOp = "AdamWStep";
  const int64_t n = param.numel();
  const bool cuda = param.device().is_accelerator();  // CUDA or virtual: the CUDA kernel's rules
  // The CUDA kernel's buffers on the param's device, the CPU one's on the CPU.
  auto check_in = [&](absl::string_view what, const Tensor& t, std::initializer_list<DType> dtypes) {
    return cuda ? internal::CheckFlatBufferOn(kOp, what, t, param.device(), n, dtypes)
                : internal::CheckFlatBuffer(kOp, what, t, n, dtypes);
  };
  auto check_buffer = [&](absl::string_view what, const Tensor& t, bool f32_only) {
    return f32_only ? check_in(what, t, {DType::kF32}) : check_in(what, t, {DType::kF32, DType::kBF16, DType::kF16});
  };
  ZS_RETURN_IF_ERROR(check_buffer("param", param, true));
  ZS_RETURN_IF_ERROR(check_buffer("grad", grad, false));
  ZS_RETURN_IF_ERROR(check_buffer("state.exp_avg", state.exp_avg, true));
  ZS_RETURN_IF_ERROR(check_buffer("state.exp_avg_sq", state.exp_avg_sq, true));
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWStep: state.step is ", state.step, " (< 0)"));
  }
  if (cuda) {
    // CheckStepOptions takes param_copy on the CPU only; on CUDA it is checked
    // as the other buffers.
    StepOptions scalars = step;
    scalars.param_copy = Tensor();
    ZS_RETURN_IF_ERROR(internal::CheckStepOptions(kOp, scalars, n));
    if (step.param_copy.defined()) {
      ZS_RETURN_IF_ERROR(check_buffer("param_copy", step.param_copy, false));
    }
  } else {
    ZS_RETURN_IF_ERROR(internal::CheckStepOptions(kOp, step, n));
  }
  ZS_RETURN_IF_ERROR(internal::CheckDisjoint(kOp, {{"param", &param},
                                                   {"grad", &grad},
                                                   {"state.exp_avg", &state.exp_avg},
                                                   {"state.exp_avg_sq", &state.exp_avg_sq},
                                                   {"param_copy", &step.param_copy}}));
  return ValidateParamGroups(groups, n);
}

// The step on CUDA tensors (checked by CheckStepArguments): the fused kernel
// of optim/cuda/adamw.cu once per group segment, on the legacy default stream
// (as the op entries of kernels/).
absl::Status AdamWStepCuda(const AdamWOptions& options, absl::Span<const ParamGroup> groups,
                           const Tensor& param, const Tensor& grad, AdamWState& state,
                           const StepOptions& step) {
  constexpr absl::string_view kOp = "AdamWStep";
  const Device device = param.device();
  const int64_t t = state.step + 1;
  const AdamHyper hyper{options.beta1, options.beta2, options.eps};
  const bool copy = step.param_copy.defined();
  const size_t grad_item = grad.itemsize();
  const size_t copy_item = copy ? step.param_copy.itemsize() : 0;
  for (const cpu::Segment& seg : internal::Segments(groups)) {
    const ParamGroup& g = groups[seg.scalars];
    const AdamScalars scalars = MakeAdamScalars(hyper, t, g.lr, g.weight_decay, step.grad_scale);
    ZS_RETURN_IF_ERROR(::zeroshard::cuda::CudaLaunchStatus(
        cuda::LaunchAdamStep(
            options.decoupled_weight_decay, scalars, param.data<float>() + seg.offset,
            static_cast<const char*>(grad.raw_data()) + seg.offset * grad_item,
            static_cast<int>(grad.dtype()), state.exp_avg.data<float>() + seg.offset,
            state.exp_avg_sq.data<float>() + seg.offset,
            copy ? static_cast<char*>(step.param_copy.raw_data()) + seg.offset * copy_item
                 : nullptr,
            copy ? static_cast<int>(step.param_copy.dtype()) : 0, seg.numel, /*stream=*/nullptr),
        absl::StrCat(kOp, " on ", device.ToString())));
  }
  state.step = t;
  return absl::OkStatus();
}

// The CUDA path's launches on a virtual device: one fused kernel per segment,
// reading and writing param, exp_avg and exp_avg_sq (f32), reading the grad
// and writing the low-precision param copy.
absl::Status AdamWStepVirtual(absl::Span<const ParamGroup> groups, const Tensor& param,
                              const Tensor& grad, AdamWState& state, const StepOptions& step) {
  const double per_element = 3 * 2 * sizeof(float) + static_cast<double>(grad.itemsize()) +
                             (step.param_copy.defined() ? static_cast<double>(step.param_copy.itemsize()) : 0);
  for (const cpu::Segment& seg : internal::Segments(groups)) {
    ZS_RETURN_IF_ERROR(ChargeVirtual(param.device(),
                                     OpCost{.op = "AdamWStep",
                                            .flops = 16.0 * static_cast<double>(seg.numel),
                                            .bytes = per_element * static_cast<double>(seg.numel)}));
  }
  state.step += 1;
  return absl::OkStatus();
}

}  // namespace

absl::Status AdamWStep(const AdamWOptions& options, absl::Span<const ParamGroup> groups,
                       const Tensor& param, const Tensor& grad, AdamWState& state,
                       const StepOptions& step) {
  ZS_RETURN_IF_ERROR(options.Validate());
  if (!param.defined()) return absl::InvalidArgumentError("AdamWStep: param is undefined");
  ZS_RETURN_IF_ERROR(CheckStepArguments(groups, param, grad, state, step));
  if (param.device().is_cuda()) return AdamWStepCuda(options, groups, param, grad, state, step);
  if (param.device().is_virtual()) return AdamWStepVirtual(groups, param, grad, state, step);

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
