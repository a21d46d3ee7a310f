#include "zeroshard/kernels/rope.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/rope.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/rope_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Status CheckOptions(const RopeOptions& o, int64_t head_dim) {
  constexpr absl::string_view op = "MakeRopeTables";
  if (!(o.theta > 0) || !std::isfinite(o.theta)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": theta = ", o.theta, ", expected a finite value > 0"));
  }
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": head_dim = ", head_dim, ", expected an even value > 0"));
  }
  if (!o.llama3) return absl::OkStatus();
  const Llama3RopeScaling& s = *o.llama3;
  if (!(s.factor > 0) || !std::isfinite(s.factor)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": llama3.factor = ", s.factor, ", expected a finite value > 0"));
  }
  if (!(s.low_freq_factor > 0 && s.low_freq_factor < s.high_freq_factor) || !std::isfinite(s.high_freq_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": llama3.low_freq_factor = ", s.low_freq_factor,
                                                   " and high_freq_factor = ", s.high_freq_factor,
                                                   ", expected 0 < low < high (finite)"));
  }
  if (s.original_max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": llama3.original_max_position_embeddings = ",
                                                   s.original_max_position_embeddings, ", expected > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> RopeInverseFrequencies(const RopeOptions& options, int64_t head_dim) {
  ZS_RETURN_IF_ERROR(CheckOptions(options, head_dim));
  const int64_t half = head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv[i] = 1.0 / std::pow(options.theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  if (!options.llama3) return inv;
  // transformers' _compute_llama3_parameters.
  const Llama3RopeScaling& s = *options.llama3;
  const double original = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = original / s.low_freq_factor;
  const double high_freq_wavelen = original / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen > low_freq_wavelen) {
      f = f / s.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

absl::StatusOr<RopeTables> MakeRopeTables(const RopeOptions& options, int64_t max_positions,
                                          int64_t head_dim, Allocator* allocator) {
  ZS_ASSIGN_OR_RETURN(const std::vector<double> inv, RopeInverseFrequencies(options, head_dim));
  if (max_positions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("MakeRopeTables: max_positions = ", max_positions, ", expected >= 1"));
  }
  const int64_t half = head_dim / 2;
  std::vector<float> c(static_cast<size_t>(max_positions * half)), s(c.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(p) * inv[i];
      c[p * half + i] = static_cast<float>(std::cos(a));
      s[p * half + i] = static_cast<float>(std::sin(a));
    }
  }
  RopeTables t;
  ZS_ASSIGN_OR_RETURN(t.cos, Tensor::FromVector(c, {max_positions, half}));
  ZS_ASSIGN_OR_RETURN(t.sin, Tensor::FromVector(s, {max_positions, half}));
  if (allocator != nullptr) {
    ZS_ASSIGN_OR_RETURN(t.cos, t.cos.To(allocator));
    ZS_ASSIGN_OR_RETURN(t.sin, t.sin.To(allocator));
  }
  return t;
}

absl::Status RopeApply(const Tensor& x, const RopeTables& tables, const Tensor& out, bool inverse) {
  constexpr absl::string_view op = "RopeApply";
  for (const auto& [t, name] : {std::pair{&x, "x"}, std::pair{&out, "out"}}) {
    if (!t->defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
    if (!IsFloatingPoint(t->dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t->dtype()),
                                                     ", expected f32, bf16 or f16"));
    }
  }
  if (x.dim() != 4 || x.size(3) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x has shape ", ShapeToString(x.shape()),
                                                   ", expected [B, T, H, D] with D even"));
  }
  if (out.shape() != x.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": out has shape ", ShapeToString(out.shape()),
                                                   ", expected ", ShapeToString(x.shape()), " (the shape of x)"));
  }
  const int64_t seq = x.size(1), half = x.size(3) / 2;
  for (const auto& [t, name] : {std::pair{&tables.cos, "cos"}, std::pair{&tables.sin, "sin"}}) {
    if (!t->defined() || t->dtype() != DType::kF32 || t->dim() != 2 || !t->is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": the table ", name, " is ", t->defined() ? t->DebugString() : "undefined",
          ", expected a contiguous f32 [max_positions, D/2] from MakeRopeTables"));
    }
    if (t->size(1) != half || t->size(0) < seq) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": the table ", name, " has shape ", ShapeToString(t->shape()), ", expected [>= ", seq, ", ", half,
          "] for x of shape ", ShapeToString(x.shape()), " (T positions, D/2 frequencies)"));
    }
  }
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the output ", out.DebugString(), " has a broadcast (stride 0) dimension"));
  }
  if (MemoryOverlaps(out, x) && !IsSameView(out, x)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the output ", out.DebugString(),
                                                   " partially overlaps the input ", x.DebugString(),
                                                   " (only exact in-place is allowed)"));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out, &tables.cos, &tables.sin}, op));
  if (x.numel() == 0) return absl::OkStatus();
  const float* const c = static_cast<const float*>(tables.cos.raw_data());
  const float* const s = static_cast<const float*>(tables.sin.raw_data());
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(op, out, {&x}, 3);
    case DeviceType::kCpu:
      cpu::RopeApply(x, c, s, out, inverse);
      return absl::OkStatus();
    case DeviceType::kCuda: {
      cuda::RopeGeometry g{.batch = x.size(0), .seq = seq, .heads = x.size(2), .half = half};
      for (int d = 0; d < 4; ++d) {
        g.x_strides[d] = x.stride(d);
        g.out_strides[d] = out.stride(d);
      }
      return cuda::CudaLaunchStatus(
          cuda::LaunchRopeApply(static_cast<int>(x.dtype()), static_cast<int>(out.dtype()), x.raw_data(),
                                out.raw_data(), c, s, g, inverse, cuda::kOpStream),
          cuda::LaunchWhat(op, x));
    }
  }
  return NoDeviceKernel(op, x.device());
}

}  // namespace zeroshard
