#include "zeroshard/kernels/device_scalar.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/device_scalar_launch.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/reduce_launch.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Status Expect(absl::string_view op, absl::string_view name, const Tensor& t, bool ok,
                    absl::string_view want) {
  if (t.defined() && t.device().is_cuda() && t.is_contiguous() && ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is ", t.defined() ? t.DebugString() : "undefined",
                                                 ", expected a contiguous CUDA tensor, ", want));
}

bool IsScalar(const Tensor& t, DType d) { return t.defined() && t.numel() == 1 && t.dtype() == d; }

}  // namespace

absl::Status MeanOfValidRows(const Tensor& row_loss, const Tensor& targets, int64_t ignore_index,
                             const Tensor& mean, const Tensor& weight) {
  constexpr absl::string_view op = "MeanOfValidRows";
  ZS_RETURN_IF_ERROR(Expect(op, "row_loss", row_loss, row_loss.defined() && row_loss.dtype() == DType::kF32, "f32"));
  ZS_RETURN_IF_ERROR(Expect(op, "targets", targets,
                            targets.defined() && (targets.dtype() == DType::kI32 || targets.dtype() == DType::kI64) &&
                                targets.numel() == row_loss.numel(),
                            "i32 or i64 with one target per row"));
  ZS_RETURN_IF_ERROR(Expect(op, "mean", mean, IsScalar(mean, DType::kF32), "f32 of one element"));
  ZS_RETURN_IF_ERROR(Expect(op, "weight", weight, IsScalar(weight, DType::kF32), "f32 of one element"));
  return cuda::CudaLaunchStatus(
      cuda::LaunchMeanOfValidRows(static_cast<const float*>(row_loss.raw_data()), static_cast<int>(targets.dtype()),
                                  targets.raw_data(), row_loss.numel(), ignore_index,
                                  static_cast<float*>(mean.raw_data()), static_cast<float*>(weight.raw_data()),
                                  cuda::kOpStream),
      cuda::LaunchWhat(op, row_loss));
}

absl::Status SumOfSquaresOnDevice(const Tensor& x, const Tensor& parts, int64_t index) {
  constexpr absl::string_view op = "SumOfSquaresOnDevice";
  ZS_RETURN_IF_ERROR(Expect(op, "x", x, x.defined() && IsFloatingPoint(x.dtype()), "f32, bf16 or f16"));
  ZS_RETURN_IF_ERROR(Expect(op, "parts", parts,
                            parts.defined() && parts.dtype() == DType::kI64 && index >= 0 && index < parts.numel(),
                            absl::StrCat("i64 (doubles' storage) with an element ", index)));
  const int64_t n = x.numel();
  ZS_ASSIGN_OR_RETURN(Tensor scratch, cuda::DeviceEmpty(op, x, {cuda::SumAllPartials(n)}, DType::kF32));
  return cuda::CudaLaunchStatus(
      cuda::LaunchSumAll(static_cast<int>(x.dtype()), x.raw_data(), n, /*square=*/true,
                         static_cast<float*>(scratch.raw_data()), static_cast<double*>(parts.raw_data()) + index,
                         cuda::kOpStream),
      cuda::LaunchWhat(op, x));
}

absl::Status SumInOrder(const Tensor& parts, const Tensor& out) {
  constexpr absl::string_view op = "SumInOrder";
  ZS_RETURN_IF_ERROR(Expect(op, "parts", parts, parts.defined() && parts.dtype() == DType::kI64, "i64 (doubles' storage)"));
  ZS_RETURN_IF_ERROR(Expect(op, "out", out, IsScalar(out, DType::kF32), "f32 of one element"));
  return cuda::CudaLaunchStatus(cuda::LaunchSumInOrder(static_cast<const double*>(parts.raw_data()), parts.numel(),
                                                       static_cast<float*>(out.raw_data()), cuda::kOpStream),
                                cuda::LaunchWhat(op, out));
}

absl::Status ClipFactor(const Tensor& total, double max_norm, const Tensor& norm, const Tensor& factor) {
  constexpr absl::string_view op = "ClipFactor";
  ZS_RETURN_IF_ERROR(Expect(op, "total", total, IsScalar(total, DType::kF32), "f32 of one element"));
  ZS_RETURN_IF_ERROR(Expect(op, "norm", norm, IsScalar(norm, DType::kI64), "i64 (a double's storage) of one element"));
  ZS_RETURN_IF_ERROR(Expect(op, "factor", factor, IsScalar(factor, DType::kF32), "f32 of one element"));
  return cuda::CudaLaunchStatus(
      cuda::LaunchClipFactor(static_cast<const float*>(total.raw_data()), /*inf_norm=*/false, max_norm,
                             static_cast<double*>(norm.raw_data()), static_cast<float*>(factor.raw_data()),
                             cuda::kOpStream),
      cuda::LaunchWhat(op, total));
}

absl::Status ScaleByDeviceScalar(const Tensor& x, const Tensor& factor) {
  constexpr absl::string_view op = "ScaleByDeviceScalar";
  ZS_RETURN_IF_ERROR(Expect(op, "x", x, x.defined() && IsFloatingPoint(x.dtype()), "f32, bf16 or f16"));
  ZS_RETURN_IF_ERROR(Expect(op, "factor", factor, IsScalar(factor, DType::kF32), "f32 of one element"));
  return cuda::CudaLaunchStatus(
      cuda::LaunchScaleByDeviceScalar(static_cast<int>(x.dtype()), x.raw_data(), x.numel(),
                                      static_cast<const float*>(factor.raw_data()), cuda::kOpStream),
      cuda::LaunchWhat(op, x));
}

}  // namespace zeroshard
