#include "zeroshard/kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/rmsnorm.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/rmsnorm_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::Status RmsNormForward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                            const Tensor& rstd) {
  constexpr absl::string_view op = "RmsNormForward";
  ZS_ASSIGN_OR_RETURN(const int64_t c, CheckNormRows(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckNormLike(op, "out", out, x, "x"));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "weight", weight, c));
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps = ", eps, ", expected a finite value >= 0"));
  }
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "out", out, {&x}, /*allow_in_place=*/true));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "out", out, {&weight}, false));
  if (rstd.defined()) {
    ZS_RETURN_IF_ERROR(CheckNormStat(op, "rstd", rstd, x));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "rstd", rstd, {&x, &weight, &out}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &weight, &out, &rstd}, op));
  if (x.numel() == 0) return absl::OkStatus();
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&out, &rstd}, {&x, &weight}, 5);
    case DeviceType::kCpu: {
      ZS_ASSIGN_OR_RETURN(Tensor xr, RowMajorInput(x, x.dtype()));
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, NormParamValues(weight, c, 1.0f));
      ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(out));
      ZS_ASSIGN_OR_RETURN(NormStatOutput r, NormStatOutput::For(rstd));
      cpu::RmsNormForward(xr, w.data(), static_cast<float>(eps), o.tensor(), r.data());
      ZS_RETURN_IF_ERROR(o.Finish());
      return r.Finish();
    }
    case DeviceType::kCuda: {
      ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "x", x));
      ZS_ASSIGN_OR_RETURN(const int64_t os, cuda::UniformRowStride(op, "out", out));
      // weight in its own dtype (the kernel widens it: no cast kernel, no
      // copy); only a strided one is made contiguous first.
      ZS_ASSIGN_OR_RETURN(Tensor w, cuda::ContiguousOnDevice(op, weight, weight.dtype()));
      ZS_ASSIGN_OR_RETURN(float* const r, CudaNormStat(op, "rstd", rstd));
      const RowLayout l = RowLayout::Of(x);
      return cuda::CudaLaunchStatus(
          cuda::LaunchRmsNormForward(static_cast<int>(x.dtype()), static_cast<int>(out.dtype()),
                                     x.raw_data(), xs, static_cast<int>(w.dtype()), w.raw_data(),
                                     static_cast<float>(eps), out.raw_data(), os, r, l.rows,
                                     l.cols, cuda::kOpStream),
          cuda::LaunchWhat(op, x));
    }
  }
  return NoDeviceKernel(op, x.device());
}

absl::Status RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                             GradMode param_grad) {
  constexpr absl::string_view op = "RmsNormBackward";
  ZS_ASSIGN_OR_RETURN(const int64_t c, CheckNormRows(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckNormLike(op, "dy", dy, x, "x"));
  if (!rstd.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": rstd is undefined; expected the one RmsNormForward saved"));
  }
  ZS_RETURN_IF_ERROR(CheckNormStat(op, "rstd", rstd, x));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "weight", weight, c));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "dweight", dweight, c));
  if (dx.defined()) {
    ZS_RETURN_IF_ERROR(CheckNormLike(op, "dx", dx, x, "x"));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&dy, &x}, /*allow_in_place=*/true));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&rstd, &weight}, false));
  }
  if (dweight.defined()) {
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dweight", dweight, {&dy, &x, &rstd, &weight, &dx}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dy, &x, &rstd, &weight, &dx, &dweight}, op));
  if (x.numel() == 0) {  // no rows: dweight is an empty sum
    if (param_grad == GradMode::kOverwrite && dweight.defined()) return dweight.Fill(0.0);
    return absl::OkStatus();
  }
  // x and dy of different dtypes: both widened to f32 first.
  const DType in = x.dtype() == dy.dtype() ? x.dtype() : DType::kF32;
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dx, &dweight}, {&dy, &x, &rstd, &weight}, 8);
    case DeviceType::kCpu: {
      ZS_ASSIGN_OR_RETURN(Tensor xr, RowMajorInput(x, in));
      ZS_ASSIGN_OR_RETURN(Tensor dyr, RowMajorInput(dy, in));
      ZS_ASSIGN_OR_RETURN(Tensor r, NormContiguousF32(rstd));
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, NormParamValues(weight, c, 1.0f));
      RowOutput o;
      if (dx.defined()) {
        ZS_ASSIGN_OR_RETURN(o, RowOutput::For(dx));
      }
      cpu::RmsNormBackward(dyr, xr, static_cast<const float*>(r.raw_data()), w.data(), o.tensor(),
                           dweight, param_grad == GradMode::kAccumulate);
      return dx.defined() ? o.Finish() : absl::OkStatus();
    }
    case DeviceType::kCuda: {
      // A widened operand: made contiguous on the device first, then cast.
      auto widen = [&](const Tensor& t) -> absl::StatusOr<Tensor> {
        if (t.dtype() == in) return t;
        Tensor c = t;
        if (!c.is_contiguous()) {
          ZS_ASSIGN_OR_RETURN(c, c.Contiguous());
        }
        return cuda::ContiguousOnDevice(op, c, in);
      };
      ZS_ASSIGN_OR_RETURN(const Tensor xr, widen(x));
      ZS_ASSIGN_OR_RETURN(const Tensor dyr, widen(dy));
      ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "x", xr));
      ZS_ASSIGN_OR_RETURN(const int64_t ds, cuda::UniformRowStride(op, "dy", dyr));
      int64_t os = 0;
      if (dx.defined()) {
        ZS_ASSIGN_OR_RETURN(os, cuda::UniformRowStride(op, "dx", dx));
      }
      ZS_ASSIGN_OR_RETURN(Tensor r, cuda::ContiguousOnDevice(op, rstd, DType::kF32));
      ZS_ASSIGN_OR_RETURN(Tensor w, cuda::ContiguousOnDevice(op, weight, weight.dtype()));
      const RowLayout l = RowLayout::Of(x);
      const int64_t blocks = cuda::RmsNormBackwardBlocks(l.rows);
      Tensor partials;
      if (dweight.defined()) {
        ZS_ASSIGN_OR_RETURN(partials, cuda::DeviceEmpty(op, x, {blocks * l.cols}, DType::kF32));
      }
      float* const pp = dweight.defined() ? static_cast<float*>(partials.raw_data()) : nullptr;
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchRmsNormBackward(static_cast<int>(in), dx.defined() ? static_cast<int>(dx.dtype()) : 0,
                                      dyr.raw_data(), ds, xr.raw_data(), xs, NormF32Data(r),
                                      static_cast<int>(w.dtype()), w.raw_data(),
                                      dx.defined() ? dx.raw_data() : nullptr, os, pp,
                                      l.rows, l.cols, cuda::kOpStream),
          cuda::LaunchWhat(op, x)));
      if (!dweight.defined()) return absl::OkStatus();
      return cuda::CudaLaunchStatus(
          cuda::LaunchRmsNormParamGrad(pp, blocks, l.cols, static_cast<int>(dweight.dtype()),
                                       dweight.raw_data(), dweight.stride(0),
                                       param_grad == GradMode::kAccumulate, cuda::kOpStream),
          cuda::LaunchWhat(op, x));
    }
  }
  return NoDeviceKernel(op, x.device());
}

}  // namespace zeroshard
