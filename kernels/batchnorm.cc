#include "zeroshard/kernels/batchnorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/batchnorm.h"
#include "zeroshard/kernels/cuda/batchnorm_launch.h"
#include "zeroshard/kernels/cuda/cudnn_ops.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/math/batchnorm_ops.h"
#include "zeroshard/kernels/nchw.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::string BatchNormOptions::ToString() const {
  return absl::StrCat(training ? "training" : "eval", ", momentum ", momentum, ", eps ", eps);
}

namespace {

absl::Status CheckData(absl::string_view op, absl::string_view name, const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()),
                                                   ", expected at least 2 dimensions [N, C, ...]"));
  }
  return absl::OkStatus();
}

absl::Status CheckParam(absl::string_view op, absl::string_view name, const Tensor& t, int64_t c) {
  if (!t.defined()) return absl::OkStatus();
  return CheckFloatShape(op, name, t, {c}, "C, dimension 1 of x");
}

// A statistics tensor: f32 [C].
absl::Status CheckStat(absl::string_view op, absl::string_view name, const Tensor& t, int64_t c) {
  if (!t.defined()) return absl::OkStatus();
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, name, t, {c}, "C, dimension 1 of x"));
  if (t.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32 (BatchNorm statistics are fp32)"));
  }
  return absl::OkStatus();
}

cpu::BatchNormShape ShapeOf(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1);
  return {n, c, c == 0 || n == 0 ? 0 : x.numel() / (n * c)};
}

absl::StatusOr<std::vector<float>> Values(const Tensor& t, int64_t c, float fill) {
  if (!t.defined()) return std::vector<float>(static_cast<size_t>(c), fill);
  return t.ToVector<float>();
}

absl::Status Store(const std::vector<float>& v, const Tensor& t) {
  if (!t.defined()) return absl::OkStatus();
  return t.CopyFrom(Tensor::Wrap(const_cast<float*>(v.data()), t.shape(), DType::kF32));
}

// ---------------------------------------------------------------- our CUDA kernels
// Where cuDNN does not run (cuda::UseOwnImageKernels): the kernels of
// kernels/cuda/batchnorm_launch.h on contiguous f32 copies of the operands.

cuda::BatchNormDims DimsOf(const Tensor& x) {
  const cpu::BatchNormShape s = ShapeOf(x);
  return {s.n, s.c, s.l};
}

// A [C] statistics output: `t` itself (through F32DeviceOutput), or scratch when undefined.
absl::StatusOr<cuda::F32DeviceOutput> StatOutput(absl::string_view op, const Tensor& t, const Tensor& like,
                                                 int64_t c, bool keep_values) {
  if (t.defined()) return cuda::F32DeviceOutput::For(op, t, keep_values);
  ZS_ASSIGN_OR_RETURN(Tensor scratch, cuda::DeviceEmpty(op, like, {c}, DType::kF32));
  return cuda::F32DeviceOutput::For(op, scratch);
}

absl::Status OwnCudaForward(absl::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, const BatchNormOptions& o,
                            const Tensor& y, const Tensor& save_mean, const Tensor& save_rstd) {
  if (x.numel() == 0) return absl::OkStatus();
  const int64_t c = x.size(1);
  const cuda::BatchNormDims dims = DimsOf(x);
  const std::string what = cuda::LaunchWhat(op, x);
  ZS_ASSIGN_OR_RETURN(Tensor xf, cuda::ContiguousOnDevice(op, x, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor wf, cuda::ContiguousOnDevice(op, weight, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor bf, cuda::ContiguousOnDevice(op, bias, DType::kF32));
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput mean, StatOutput(op, save_mean, x, c, false));
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput rstd, StatOutput(op, save_rstd, x, c, false));
  const float eps = static_cast<float>(o.eps);
  if (o.training) {
    ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput rm, cuda::F32DeviceOutput::For(op, running_mean, true));
    ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput rv, cuda::F32DeviceOutput::For(op, running_var, true));
    ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
        cuda::LaunchBatchNormTrainStats(dims, F32Data(xf), eps, static_cast<float>(o.momentum), mean.data(),
                                        rstd.data(), rm.data(), rv.data(), cuda::kOpStream),
        what));
    ZS_RETURN_IF_ERROR(rm.Finish(op));
    ZS_RETURN_IF_ERROR(rv.Finish(op));
  } else {
    ZS_ASSIGN_OR_RETURN(Tensor rm, cuda::ContiguousOnDevice(op, running_mean, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor rv, cuda::ContiguousOnDevice(op, running_var, DType::kF32));
    ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
        cuda::LaunchBatchNormEvalStats(c, F32Data(rm), F32Data(rv), eps, mean.data(), rstd.data(), cuda::kOpStream),
        what));
  }
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput yo, cuda::F32DeviceOutput::For(op, y));
  ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
      cuda::LaunchBatchNormApply(dims, F32Data(xf), mean.data(), rstd.data(), F32Data(wf), F32Data(bf), yo.data(),
                                 cuda::kOpStream),
      what));
  ZS_RETURN_IF_ERROR(yo.Finish(op));
  ZS_RETURN_IF_ERROR(mean.Finish(op));
  return rstd.Finish(op);
}

absl::Status OwnCudaBackward(absl::string_view op, const Tensor& dy, const Tensor& x, const Tensor& save_mean,
                             const Tensor& save_rstd, const Tensor& weight, bool training, const Tensor& dx,
                             const Tensor& dweight, const Tensor& dbias, bool accumulate) {
  if (x.size(1) == 0) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(Tensor dyf, cuda::ContiguousOnDevice(op, dy, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor xf, cuda::ContiguousOnDevice(op, x, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor mean, cuda::ContiguousOnDevice(op, save_mean, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor rstd, cuda::ContiguousOnDevice(op, save_rstd, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor wf, cuda::ContiguousOnDevice(op, weight, DType::kF32));
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput dxo, cuda::F32DeviceOutput::For(op, dx));
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput dwo, cuda::F32DeviceOutput::For(op, dweight, accumulate));
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput dbo, cuda::F32DeviceOutput::For(op, dbias, accumulate));
  // No values (N = 0): the kernel's sums are empty, dweight and dbias 0 (or kept).
  ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
      cuda::LaunchBatchNormBackward(DimsOf(x), F32Data(dyf), F32Data(xf), F32Data(mean), F32Data(rstd), F32Data(wf),
                                    training, x.numel() > 0 ? dxo.data() : nullptr, dwo.data(), dbo.data(),
                                    accumulate, cuda::kOpStream),
      cuda::LaunchWhat(op, x)));
  ZS_RETURN_IF_ERROR(dxo.Finish(op));
  ZS_RETURN_IF_ERROR(dwo.Finish(op));
  return dbo.Finish(op);
}

}  // namespace

absl::Status BatchNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var,
                              const BatchNormOptions& o, const Tensor& y, const Tensor& save_mean,
                              const Tensor& save_rstd) {
  constexpr absl::string_view op = "BatchNormForward";
  ZS_RETURN_IF_ERROR(CheckData(op, "x", x));
  const int64_t c = x.size(1);
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "y", y, x.shape(), "x's shape"));
  ZS_RETURN_IF_ERROR(CheckParam(op, "weight", weight, c));
  ZS_RETURN_IF_ERROR(CheckParam(op, "bias", bias, c));
  for (const auto& [t, name] : {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
                                std::pair{&save_mean, "save_mean"}, std::pair{&save_rstd, "save_rstd"}}) {
    ZS_RETURN_IF_ERROR(CheckStat(op, name, *t, c));
  }
  if (!(o.eps > 0) || !std::isfinite(o.eps) || !(o.momentum >= 0 && o.momentum <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", o.ToString(),
                                                   ", expected eps > 0 (finite) and momentum in [0, 1]"));
  }
  if (!o.training && (!running_mean.defined() || !running_var.defined())) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": eval mode normalises with the running statistics; expected running_mean and running_var, found ",
        running_mean.defined() ? "" : "no running_mean ", running_var.defined() ? "" : "no running_var"));
  }
  const cpu::BatchNormShape s = ShapeOf(x);
  if (o.training && s.count() < 2 && x.numel() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x ", ShapeToString(x.shape()),
                                                   " has ", s.count(),
                                                   " value per channel; expected more than 1 when training"));
  }
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "y", y, {&x}, /*allow_in_place=*/true));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "y", y, {&weight, &bias, &running_mean, &running_var}, false));
  for (const Tensor* t : {&running_mean, &running_var, &save_mean, &save_rstd}) {
    if (!t->defined()) continue;
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "a statistics tensor", *t, {&x, &weight, &bias, &y}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &weight, &bias, &running_mean, &running_var, &y, &save_mean, &save_rstd}, op));
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&y, &save_mean, &save_rstd}, {&x, &x, &weight, &bias}, 8);
    case DeviceType::kCpu: {
      if (x.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(x));
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, Values(weight, c, 1.0f));
      ZS_ASSIGN_OR_RETURN(std::vector<float> b, Values(bias, c, 0.0f));
      std::vector<float> mean(c), rstd(c);
      if (o.training) {
        std::vector<float> var(c);
        cpu::BatchNormStats(s, F32Data(xf), mean.data(), var.data());
        for (int64_t i = 0; i < c; ++i) rstd[i] = LayerNormRstd(var[i], static_cast<float>(o.eps));
        if (running_mean.defined()) {
          ZS_ASSIGN_OR_RETURN(std::vector<float> rm, running_mean.ToVector<float>());
          for (int64_t i = 0; i < c; ++i) {
            rm[i] = BatchNormRunningUpdate(rm[i], mean[i], static_cast<float>(o.momentum));
          }
          ZS_RETURN_IF_ERROR(Store(rm, running_mean));
        }
        if (running_var.defined()) {
          ZS_ASSIGN_OR_RETURN(std::vector<float> rv, running_var.ToVector<float>());
          for (int64_t i = 0; i < c; ++i) {
            rv[i] = BatchNormRunningUpdate(rv[i], UnbiasedVariance(var[i], s.count()),
                                           static_cast<float>(o.momentum));
          }
          ZS_RETURN_IF_ERROR(Store(rv, running_var));
        }
      } else {
        ZS_ASSIGN_OR_RETURN(mean, running_mean.ToVector<float>());
        ZS_ASSIGN_OR_RETURN(std::vector<float> rv, running_var.ToVector<float>());
        for (int64_t i = 0; i < c; ++i) rstd[i] = LayerNormRstd(rv[i], static_cast<float>(o.eps));
      }
      ZS_ASSIGN_OR_RETURN(F32Output yo, F32Output::For(y));
      cpu::BatchNormApply(s, F32Data(xf), mean.data(), rstd.data(), w.data(), b.data(), yo.data());
      ZS_RETURN_IF_ERROR(yo.Finish());
      ZS_RETURN_IF_ERROR(Store(mean, save_mean));
      return Store(rstd, save_rstd);
    }
    case DeviceType::kCuda:
      if (cuda::UseOwnImageKernels(x.device().index)) {
        return OwnCudaForward(op, x, weight, bias, running_mean, running_var, o, y, save_mean, save_rstd);
      }
      return cuda::CudnnBatchNormForward(x, weight, bias, running_mean, running_var, o.training,
                                         o.momentum, o.eps, y, save_mean, save_rstd);
  }
  return NoDeviceKernel(op, x.device());
}

absl::Status BatchNormBackward(const Tensor& dy, const Tensor& x, const Tensor& save_mean,
                               const Tensor& save_rstd, const Tensor& weight, bool training,
                               const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                               GradMode param_grad) {
  constexpr absl::string_view op = "BatchNormBackward";
  ZS_RETURN_IF_ERROR(CheckData(op, "x", x));
  const int64_t c = x.size(1);
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dy", dy, x.shape(), "x's shape"));
  for (const auto& [t, name] : {std::pair{&save_mean, "save_mean"}, std::pair{&save_rstd, "save_rstd"}}) {
    if (!t->defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", name, " is undefined; expected the one BatchNormForward saved"));
    }
    ZS_RETURN_IF_ERROR(CheckStat(op, name, *t, c));
  }
  ZS_RETURN_IF_ERROR(CheckParam(op, "weight", weight, c));
  ZS_RETURN_IF_ERROR(CheckParam(op, "dweight", dweight, c));
  ZS_RETURN_IF_ERROR(CheckParam(op, "dbias", dbias, c));
  if (dx.defined()) {
    ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dx", dx, x.shape(), "x's shape"));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&dy, &x, &save_mean, &save_rstd, &weight}, false));
  }
  if (dweight.defined()) {
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dweight", dweight, {&dy, &x, &save_mean, &save_rstd, &weight, &dx}, false));
  }
  if (dbias.defined()) {
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dbias", dbias, {&dy, &x, &save_mean, &save_rstd, &weight, &dx, &dweight}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dy, &x, &save_mean, &save_rstd, &weight, &dx, &dweight, &dbias}, op));
  const bool accumulate = param_grad == GradMode::kAccumulate;
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dx, &dweight, &dbias}, {&dy, &x, &dy, &x}, 10);
    case DeviceType::kCpu: {
      ZS_ASSIGN_OR_RETURN(Tensor dyf, F32Input(dy));
      ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(x));
      ZS_ASSIGN_OR_RETURN(std::vector<float> mean, save_mean.ToVector<float>());
      ZS_ASSIGN_OR_RETURN(std::vector<float> rstd, save_rstd.ToVector<float>());
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, Values(weight, c, 1.0f));
      ZS_ASSIGN_OR_RETURN(F32Output dxo, F32Output::For(dx));
      ZS_ASSIGN_OR_RETURN(F32Output dwo, F32Output::For(dweight, accumulate));
      ZS_ASSIGN_OR_RETURN(F32Output dbo, F32Output::For(dbias, accumulate));
      const cpu::BatchNormShape s = ShapeOf(x);
      if (x.numel() == 0) {  // no values: the parameter gradients are empty sums
        if (!accumulate) {
          if (dwo.data() != nullptr) std::fill(dwo.data(), dwo.data() + c, 0.0f);
          if (dbo.data() != nullptr) std::fill(dbo.data(), dbo.data() + c, 0.0f);
        }
      } else {
        cpu::BatchNormBackward(s, F32Data(dyf), F32Data(xf), mean.data(), rstd.data(), w.data(),
                               training, dxo.data(), dwo.data(), dbo.data(), accumulate);
      }
      ZS_RETURN_IF_ERROR(dxo.Finish());
      ZS_RETURN_IF_ERROR(dwo.Finish());
      return dbo.Finish();
    }
    case DeviceType::kCuda:
      if (cuda::UseOwnImageKernels(x.device().index)) {
        return OwnCudaBackward(op, dy, x, save_mean, save_rstd, weight, training, dx, dweight, dbias, accumulate);
      }
      return cuda::CudnnBatchNormBackward(dy, x, save_mean, save_rstd, weight, training, dx,
                                          dweight, dbias, accumulate);
  }
  return NoDeviceKernel(op, x.device());
}

}  // namespace zeroshard
