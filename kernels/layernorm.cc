#include "zeroshard/kernels/layernorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/layernorm.h"
#include "zeroshard/kernels/cuda/layernorm_launch.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::Status LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                              const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  constexpr absl::string_view op = "LayerNormForward";
  ZS_ASSIGN_OR_RETURN(const int64_t c, CheckNormRows(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckNormLike(op, "out", out, x, "x"));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "weight", weight, c));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "bias", bias, c));
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps = ", eps, ", expected a finite value >= 0"));
  }
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "out", out, {&x}, /*allow_in_place=*/true));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "out", out, {&weight, &bias}, false));
  if (mean.defined()) {
    ZS_RETURN_IF_ERROR(CheckNormStat(op, "mean", mean, x));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "mean", mean, {&x, &weight, &bias, &out}, false));
  }
  if (rstd.defined()) {
    ZS_RETURN_IF_ERROR(CheckNormStat(op, "rstd", rstd, x));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "rstd", rstd, {&x, &weight, &bias, &out, &mean}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &weight, &bias, &out, &mean, &rstd}, op));
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&out, &mean, &rstd}, {&x, &weight, &bias}, 8);
    case DeviceType::kCpu: {
      if (x.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor xr, RowMajorInput(x, x.dtype()));
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, NormParamValues(weight, c, 1.0f));
      ZS_ASSIGN_OR_RETURN(std::vector<float> b, NormParamValues(bias, c, 0.0f));
      ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(out));
      ZS_ASSIGN_OR_RETURN(NormStatOutput m, NormStatOutput::For(mean));
      ZS_ASSIGN_OR_RETURN(NormStatOutput r, NormStatOutput::For(rstd));
      cpu::LayerNormForward(xr, w.data(), b.data(), static_cast<float>(eps), o.tensor(), m.data(),
                            r.data());
      ZS_RETURN_IF_ERROR(o.Finish());
      ZS_RETURN_IF_ERROR(m.Finish());
      return r.Finish();
    }
    case DeviceType::kCuda: {
      if (x.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "x", x));
      ZS_ASSIGN_OR_RETURN(const int64_t os, cuda::UniformRowStride(op, "out", out));
      // weight and bias in their own dtype (the kernel widens them: no cast
      // kernel, no copy); only a strided one is made contiguous first.
      ZS_ASSIGN_OR_RETURN(Tensor w, cuda::ContiguousOnDevice(op, weight, weight.dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor b, cuda::ContiguousOnDevice(op, bias, bias.dtype()));
      ZS_ASSIGN_OR_RETURN(float* const m, CudaNormStat(op, "mean", mean));
      ZS_ASSIGN_OR_RETURN(float* const r, CudaNormStat(op, "rstd", rstd));
      const RowLayout l = RowLayout::Of(x);
      return cuda::CudaLaunchStatus(
          cuda::LaunchLayerNormForward(static_cast<int>(x.dtype()), static_cast<int>(out.dtype()),
                                       x.raw_data(), xs, static_cast<int>(w.dtype()), w.raw_data(),
                                       static_cast<int>(b.dtype()), b.raw_data(),
                                       static_cast<float>(eps), out.raw_data(), os, m, r, l.rows,
                                       l.cols, cuda::kOpStream),
          cuda::LaunchWhat(op, x));
    }
  }
  return NoDeviceKernel(op, x.device());
}

absl::Status LayerNormBackward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& weight, const Tensor& dx,
                               const Tensor& dweight, const Tensor& dbias, GradMode param_grad) {
  constexpr absl::string_view op = "LayerNormBackward";
  ZS_ASSIGN_OR_RETURN(const int64_t c, CheckNormRows(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckNormLike(op, "dy", dy, x, "x"));
  for (const auto& [t, name] : {std::pair{&mean, "mean"}, std::pair{&rstd, "rstd"}}) {
    if (!t->defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", name, " is undefined; expected the one LayerNormForward saved"));
    }
    ZS_RETURN_IF_ERROR(CheckNormStat(op, name, *t, x));
  }
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "weight", weight, c));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "dweight", dweight, c));
  ZS_RETURN_IF_ERROR(CheckNormParam(op, "dbias", dbias, c));
  if (dx.defined()) {
    ZS_RETURN_IF_ERROR(CheckNormLike(op, "dx", dx, x, "x"));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&dy, &x}, /*allow_in_place=*/true));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&mean, &rstd, &weight}, false));
  }
  if (dweight.defined()) {
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dweight", dweight, {&dy, &x, &mean, &rstd, &weight, &dx}, false));
  }
  if (dbias.defined()) {
    ZS_RETURN_IF_ERROR(
        CheckRowOutput(op, "dbias", dbias, {&dy, &x, &mean, &rstd, &weight, &dx, &dweight}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dy, &x, &mean, &rstd, &weight, &dx, &dweight, &dbias}, op));
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dx, &dweight, &dbias}, {&dy, &x, &mean, &rstd, &weight}, 10);
    case DeviceType::kCpu: {
      if (x.numel() == 0) {  // no rows: the parameter gradients are empty sums
        if (param_grad == GradMode::kAccumulate) return absl::OkStatus();
        if (dweight.defined()) ZS_RETURN_IF_ERROR(dweight.Fill(0.0));
        if (dbias.defined()) ZS_RETURN_IF_ERROR(dbias.Fill(0.0));
        return absl::OkStatus();
      }
      const DType in = x.dtype() == dy.dtype() ? x.dtype() : DType::kF32;
      ZS_ASSIGN_OR_RETURN(Tensor xr, RowMajorInput(x, in));
      ZS_ASSIGN_OR_RETURN(Tensor dyr, RowMajorInput(dy, in));
      ZS_ASSIGN_OR_RETURN(Tensor m, NormContiguousF32(mean));
      ZS_ASSIGN_OR_RETURN(Tensor r, NormContiguousF32(rstd));
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, NormParamValues(weight, c, 1.0f));
      RowOutput o;
      if (dx.defined()) {
        ZS_ASSIGN_OR_RETURN(o, RowOutput::For(dx));
      }
      cpu::LayerNormBackward(dyr, xr, static_cast<const float*>(m.raw_data()),
                             static_cast<const float*>(r.raw_data()), w.data(), o.tensor(), dweight,
                             dbias, param_grad == GradMode::kAccumulate);
      return dx.defined() ? o.Finish() : absl::OkStatus();
    }
    case DeviceType::kCuda: {
      if (x.numel() == 0) {  // no rows: the parameter gradients are empty sums
        if (param_grad == GradMode::kAccumulate) return absl::OkStatus();
        if (dweight.defined()) ZS_RETURN_IF_ERROR(dweight.Fill(0.0));
        if (dbias.defined()) ZS_RETURN_IF_ERROR(dbias.Fill(0.0));
        return absl::OkStatus();
      }
      // x and dy of different dtypes: both widened to f32 on the device first.
      const DType in = x.dtype() == dy.dtype() ? x.dtype() : DType::kF32;
      Tensor xr = x, dyr = dy;
      if (x.dtype() != in) {
        ZS_ASSIGN_OR_RETURN(xr, cuda::ContiguousOnDevice(op, x, in));
      }
      if (dy.dtype() != in) {
        ZS_ASSIGN_OR_RETURN(dyr, cuda::ContiguousOnDevice(op, dy, in));
      }
      ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "x", xr));
      ZS_ASSIGN_OR_RETURN(const int64_t ds, cuda::UniformRowStride(op, "dy", dyr));
      int64_t os = 0;
      if (dx.defined()) {
        ZS_ASSIGN_OR_RETURN(os, cuda::UniformRowStride(op, "dx", dx));
      }
      ZS_ASSIGN_OR_RETURN(Tensor m, cuda::ContiguousOnDevice(op, mean, DType::kF32));
      ZS_ASSIGN_OR_RETURN(Tensor r, cuda::ContiguousOnDevice(op, rstd, DType::kF32));
      // weight in its own dtype, as in the forward.
      ZS_ASSIGN_OR_RETURN(Tensor w, cuda::ContiguousOnDevice(op, weight, weight.dtype()));
      const RowLayout l = RowLayout::Of(x);
      const bool want_params = dweight.defined() || dbias.defined();
      const int64_t blocks = cuda::LayerNormBackwardBlocks(l.rows);
      Tensor partials;
      if (want_params) {
        ZS_ASSIGN_OR_RETURN(partials, cuda::DeviceEmpty(op, x, {blocks * 2 * l.cols}, DType::kF32));
      }
      float* const pp = want_params ? static_cast<float*>(partials.raw_data()) : nullptr;
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchLayerNormBackward(
              static_cast<int>(in), dx.defined() ? static_cast<int>(dx.dtype()) : 0,
              dyr.raw_data(), ds, xr.raw_data(), xs, NormF32Data(m), NormF32Data(r),
              static_cast<int>(w.dtype()), w.raw_data(), dx.defined() ? dx.raw_data() : nullptr, os,
              pp, l.rows, l.cols, cuda::kOpStream),
          cuda::LaunchWhat(op, x)));
      if (!want_params) return absl::OkStatus();
      return cuda::CudaLaunchStatus(
          cuda::LaunchLayerNormParamGrads(
              pp, blocks, l.cols, dweight.defined() ? static_cast<int>(dweight.dtype()) : 0,
              dweight.defined() ? dweight.raw_data() : nullptr,
              dweight.defined() ? dweight.stride(0) : 0,
              dbias.defined() ? static_cast<int>(dbias.dtype()) : 0,
              dbias.defined() ? dbias.raw_data() : nullptr, dbias.defined() ? dbias.stride(0) : 0,
              param_grad == GradMode::kAccumulate, cuda::kOpStream),
          cuda::LaunchWhat(op, x));
    }
  }
  return NoDeviceKernel(op, x.device());
}

}  // namespace zeroshard
