// Argument checks shared by the optimizer step entries (optim/adamw.cc,
// optim/sgd.cc). Internal to optim/.
#ifndef ZEROSHARD_OPTIM_STEP_CHECKS_H_
#define ZEROSHARD_OPTIM_STEP_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "zeroshard/optim/cpu/optim_kernels.h"
#include "zeroshard/optim/param_group.h"
#include "zeroshard/optim/step_options.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::optim::internal {

// `t` is a defined, contiguous CPU tensor of `numel` elements whose dtype is
// one of `dtypes`; the error names `op` and `what`.
absl::Status CheckFlatBuffer(absl::string_view op, absl::string_view what, const Tensor& t,
                             int64_t numel, std::initializer_list<DType> dtypes);
// The same on `device` (a step's CUDA path: every buffer on the param's device).
absl::Status CheckFlatBufferOn(absl::string_view op, absl::string_view what, const Tensor& t, Device device,
                               int64_t numel, std::initializer_list<DType> dtypes);

// No two of the named tensors share memory.
absl::Status CheckDisjoint(absl::string_view op,
                           std::initializer_list<std::pair<absl::string_view, const Tensor*>> tensors);

// grad_scale is finite and >= 0; param_copy (when defined) is a flat float buffer of `numel`.
absl::Status CheckStepOptions(absl::string_view op, const StepOptions& step, int64_t numel);

// The groups' ranges as kernel segments (segment.scalars = group index).
std::vector<cpu::Segment> Segments(absl::Span<const ParamGroup> groups);

}  // namespace zeroshard::optim::internal

#endif  // ZEROSHARD_OPTIM_STEP_CHECKS_H_
