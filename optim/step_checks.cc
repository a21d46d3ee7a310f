#include "zeroshard/optim/step_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard::optim::internal {

namespace {

// Dtype, element count and contiguity of a defined flat buffer.
absl::Status CheckFlatLayout(absl::string_view op, absl::string_view what, const Tensor& t, int64_t numel,
                             std::initializer_list<DType> dtypes) {
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || t.dtype() == d;
  if (!dtype_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " has dtype ", DTypeName(t.dtype()), ", expected ",
        absl::StrJoin(dtypes, " or ",
                      [](std::string* out, DType d) { absl::StrAppend(out, DTypeName(d)); })));
  }
  if (t.numel() != numel) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has ", t.numel(),
                                                   " elements (shape ",
                                                   ShapeToString(t.shape()), "), expected ",
                                                   numel, " (the param's)"));
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be contiguous, got ",
                                                   t.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFlatBuffer(absl::string_view op, absl::string_view what, const Tensor& t,
                             int64_t numel, std::initializer_list<DType> dtypes) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is undefined"));
  }
  if (!t.device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(op, ": ", what, " is on ",
                                                 t.device().ToString(),
                                                 "; this build steps cpu tensors only"));
  }
  return CheckFlatLayout(op, what, t, numel, dtypes);
}

absl::Status CheckFlatBufferOn(absl::string_view op, absl::string_view what, const Tensor& t, Device device,
                               int64_t numel, std::initializer_list<DType> dtypes) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is undefined"));
  }
  if (t.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is on ", t.device().ToString(), ", expected ",
                                                   device.ToString(), " (the param's device)"));
  }
  return CheckFlatLayout(op, what, t, numel, dtypes);
}

absl::Status CheckDisjoint(
    absl::string_view op,
    std::initializer_list<std::pair<absl::string_view, const Tensor*>> tensors) {
  const std::vector<std::pair<absl::string_view, const Tensor*>> v(tensors);
  for (size_t i = 0; i < v.size(); ++i) {
    for (size_t j = i + 1; j < v.size(); ++j) {
      if (v[i].second->defined() && v[j].second->defined() &&
          v[i].second->numel() > 0 && v[j].second->numel() > 0 &&
          MemoryOverlaps(*v[i].second, *v[j].second)) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": ", v[i].first, " and ",
                                                       v[j].first,
                                                       " share memory; they must be distinct "
                                                       "buffers"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStepOptions(absl::string_view op, const StepOptions& step, int64_t numel) {
  if (!std::isfinite(step.grad_scale) || step.grad_scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": grad_scale must be finite and >= 0, got ", step.grad_scale));
  }
  if (step.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": num_threads must be >= 0 (0: OpenMP default), got ", step.num_threads));
  }
  if (step.param_copy.defined()) {
    return CheckFlatBuffer(op, "param_copy", step.param_copy, numel,
                           {DType::kF32, DType::kBF16, DType::kF16});
  }
  return absl::OkStatus();
}

std::vector<cpu::Segment> Segments(absl::Span<const ParamGroup> groups) {
  std::vector<cpu::Segment> segments;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const FlatRange& r : groups[g].ranges) {
      if (r.numel > 0) segments.push_back({r.offset, r.numel, static_cast<int>(g)});
    }
  }
  return segments;
}

}  // namespace zeroshard::optim::internal
