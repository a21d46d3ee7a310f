#include "zeroshard/kernels/conv2d.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/conv2d.h"
#include "zeroshard/kernels/cuda/conv2d_launch.h"
#include "zeroshard/kernels/cuda/conv_graph_desc.h"
#include "zeroshard/kernels/cuda/cudnn_ops.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/kernels/nchw.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::string Conv2dOptions::ToString() const {
  return absl::StrCat("stride (", stride[0], ", ", stride[1], "), padding (", padding[0], ", ",
                      padding[1], "), dilation (", dilation[0], ", ", dilation[1], "), groups ",
                      groups);
}

namespace {

absl::StatusOr<Conv2dGeometry> Geometry(absl::string_view op, const Shape& x, const Shape& w,
                                        const Conv2dOptions& o) {
  if (x.size() != 4 || w.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x ", ShapeToString(x), " and weight ",
                                                   ShapeToString(w),
                                                   ", expected 4 dimensions each ([N, C, H, W] and "
                                                   "[O, C / groups, KH, KW])"));
  }
  for (int i = 0; i < 2; ++i) {
    if (o.stride[i] < 1 || o.dilation[i] < 1 || o.padding[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", o.ToString(),
                                                     ", expected stride and dilation >= 1, padding >= 0"));
    }
  }
  if (o.groups < 1 || x[1] % o.groups != 0 || w[0] % o.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": groups = ", o.groups, " with ", x[1],
                                                   " input and ", w[0],
                                                   " output channels, expected a divisor of both"));
  }
  if (w[1] != x[1] / o.groups) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": weight ", ShapeToString(w), " for x ", ShapeToString(x), " with groups = ", o.groups,
        ", expected weight.size(1) == C / groups = ", x[1] / o.groups));
  }
  if (w[2] < 1 || w[3] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": weight ", ShapeToString(w),
                                                   ", expected a kernel of at least 1x1"));
  }
  Conv2dGeometry g{};
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  g.sh = o.stride[0], g.sw = o.stride[1], g.ph = o.padding[0], g.pw = o.padding[1];
  g.dh = o.dilation[0], g.dw = o.dilation[1], g.groups = o.groups;
  g.oh = ConvOutputSize(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = ConvOutputSize(g.w, g.kw, g.sw, g.pw, g.dw);
  if (g.oh < 1 || g.ow < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": a ", g.kh, "x", g.kw, " kernel with ", o.ToString(), " does not fit the ", g.h, "x",
        g.w, " input (output would be ", g.oh, "x", g.ow, "); expected an output of at least 1x1"));
  }
  return g;
}

Shape OutShape(const Conv2dGeometry& g) { return {g.n, g.o, g.oh, g.ow}; }

absl::Status CheckBias(absl::string_view op, absl::string_view name, const Tensor& b, int64_t o) {
  if (!b.defined()) return absl::OkStatus();
  return CheckFloatShape(op, name, b, {o}, "O, the output channels of weight");
}

// ---------------------------------------------------------------- our CUDA kernels
// Where cuDNN does not run (cuda::UseOwnImageKernels): the kernels of
// kernels/cuda/conv2d_launch.h on contiguous f32 copies of the operands.

absl::Status OwnCudaForward(absl::string_view op, const Conv2dGeometry& g, const Tensor& x, const Tensor& weight,
                            const Tensor& bias, const Tensor& y) {
  cuda::CountOwnConvPass();
  if (y.numel() == 0) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(Tensor xf, cuda::ContiguousOnDevice(op, x, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor wf, cuda::ContiguousOnDevice(op, weight, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor bf, cuda::ContiguousOnDevice(op, bias, DType::kF32));
  ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput yo, cuda::F32DeviceOutput::For(op, y));
  ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
      cuda::LaunchConv2dForward(g, F32Data(xf), F32Data(wf), F32Data(bf), yo.data(), cuda::kOpStream),
      cuda::LaunchWhat(op, x)));
  return yo.Finish(op);
}

absl::Status OwnCudaBackward(absl::string_view op, const Conv2dGeometry& g, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                             bool accumulate) {
  ZS_ASSIGN_OR_RETURN(Tensor dyf, cuda::ContiguousOnDevice(op, dy, DType::kF32));
  if (dx.defined()) {
    cuda::CountOwnConvPass();
    if (dx.numel() > 0) {
      ZS_ASSIGN_OR_RETURN(Tensor wf, cuda::ContiguousOnDevice(op, weight, DType::kF32));
      ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput dxo, cuda::F32DeviceOutput::For(op, dx));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchConv2dBackwardData(g, F32Data(dyf), F32Data(wf), dxo.data(), cuda::kOpStream),
          cuda::LaunchWhat(op, dx)));
      ZS_RETURN_IF_ERROR(dxo.Finish(op));
    }
  }
  if (dweight.defined()) {
    cuda::CountOwnConvPass();
    if (dweight.numel() > 0) {
      ZS_ASSIGN_OR_RETURN(Tensor xf, cuda::ContiguousOnDevice(op, x, DType::kF32));
      ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput dwo, cuda::F32DeviceOutput::For(op, dweight, accumulate));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchConv2dBackwardWeight(g, F32Data(dyf), F32Data(xf), dwo.data(), accumulate, cuda::kOpStream),
          cuda::LaunchWhat(op, dweight)));
      ZS_RETURN_IF_ERROR(dwo.Finish(op));
    }
  }
  if (dbias.defined() && dbias.numel() > 0) {
    ZS_ASSIGN_OR_RETURN(cuda::F32DeviceOutput dbo, cuda::F32DeviceOutput::For(op, dbias, accumulate));
    ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
        cuda::LaunchConv2dBackwardBias(g, F32Data(dyf), dbo.data(), accumulate, cuda::kOpStream),
        cuda::LaunchWhat(op, dbias)));
    ZS_RETURN_IF_ERROR(dbo.Finish(op));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Shape> Conv2dOutputShape(const Shape& x, const Shape& weight, const Conv2dOptions& o) {
  ZS_ASSIGN_OR_RETURN(Conv2dGeometry g, Geometry("Conv2d", x, weight, o));
  return OutShape(g);
}

absl::Status Conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Conv2dOptions& o, const Tensor& y) {
  constexpr absl::string_view op = "Conv2dForward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckImage(op, "weight", weight));
  ZS_ASSIGN_OR_RETURN(const Conv2dGeometry g, Geometry(op, x.shape(), weight.shape(), o));
  ZS_RETURN_IF_ERROR(CheckBias(op, "bias", bias, g.o));
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "y", y, OutShape(g), "from x, weight and the options"));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "y", y, {&x, &weight, &bias}, false));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &weight, &bias, &y}, op));
  switch (x.device().type) {
    case DeviceType::kVirtual:  // an implicit GEMM: [N Ho Wo] x [C/g kh kw] x [O]
      return ChargeGemm(op, x.device(), 1, y.numel() / std::max<int64_t>(g.o, 1), g.o,
                        weight.numel() / std::max<int64_t>(g.o, 1), x.dtype(),
                        TrafficBytes(x) + TrafficBytes(weight) + TrafficBytes(y));
    case DeviceType::kCpu: {
      if (y.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(x));
      ZS_ASSIGN_OR_RETURN(Tensor wf, F32Input(weight));
      ZS_ASSIGN_OR_RETURN(Tensor bf, F32Input(bias));
      ZS_ASSIGN_OR_RETURN(F32Output yo, F32Output::For(y));
      cpu::Conv2dForward(g, F32Data(xf), F32Data(wf), F32Data(bf), yo.data());
      return yo.Finish();
    }
    case DeviceType::kCuda:
      if (cuda::UseOwnImageKernels(x.device().index)) return OwnCudaForward(op, g, x, weight, bias, y);
      return cuda::CudnnConv2dForward(g, x, weight, bias, y);
  }
  return NoDeviceKernel(op, x.device());
}

absl::StatusOr<Tensor> Conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Conv2dOptions& o) {
  ZS_RETURN_IF_ERROR(CheckImage("Conv2dForward", "x", x));
  ZS_RETURN_IF_ERROR(CheckImage("Conv2dForward", "weight", weight));
  ZS_ASSIGN_OR_RETURN(const Shape shape, Conv2dOutputShape(x.shape(), weight.shape(), o));
  const DType dtype = x.dtype() == weight.dtype() ? x.dtype() : DType::kF32;
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(shape, dtype, x.allocator()));
  ZS_RETURN_IF_ERROR(Conv2dForward(x, weight, bias, o, y));
  return y;
}

absl::Status Conv2dBackward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Conv2dOptions& o, const Tensor& dx, const Tensor& dweight,
                            const Tensor& dbias, GradMode param_grad) {
  constexpr absl::string_view op = "Conv2dBackward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckImage(op, "weight", weight));
  ZS_ASSIGN_OR_RETURN(const Conv2dGeometry g, Geometry(op, x.shape(), weight.shape(), o));
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dy", dy, OutShape(g), "y's shape, from x, weight and the options"));
  if (dx.defined()) {
    ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dx", dx, x.shape(), "x's shape"));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&dy, &x, &weight}, false));
  }
  if (dweight.defined()) {
    ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dweight", dweight, weight.shape(), "weight's shape"));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dweight", dweight, {&dy, &x, &weight, &dx}, false));
  }
  if (dbias.defined()) {
    ZS_RETURN_IF_ERROR(CheckBias(op, "dbias", dbias, g.o));
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dbias", dbias, {&dy, &x, &weight, &dx, &dweight}, false));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dy, &x, &weight, &dx, &dweight, &dbias}, op));
  const bool accumulate = param_grad == GradMode::kAccumulate;
  switch (x.device().type) {
    case DeviceType::kVirtual: {  // dx and dweight: two GEMMs of the forward's size each
      const int64_t rows = dy.numel() / std::max<int64_t>(g.o, 1), inner = weight.numel() / std::max<int64_t>(g.o, 1);
      const int products = (dx.defined() ? 1 : 0) + (dweight.defined() ? 1 : 0);
      if (products == 0) return ChargeMemoryBound(op, {&dbias}, {&dy}, 1);
      return ChargeGemm(op, x.device(), products, rows, g.o, inner, x.dtype(),
                        TrafficBytes(dy) + TrafficBytes(x) + TrafficBytes(weight) + TrafficBytes(dx) + TrafficBytes(dweight));
    }
    case DeviceType::kCpu: {
      ZS_ASSIGN_OR_RETURN(Tensor dyf, F32Input(dy));
      ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(dweight.defined() ? x : Tensor()));
      ZS_ASSIGN_OR_RETURN(Tensor wf, F32Input(dx.defined() ? weight : Tensor()));
      ZS_ASSIGN_OR_RETURN(F32Output dxo, F32Output::For(dx));
      ZS_ASSIGN_OR_RETURN(F32Output dwo, F32Output::For(dweight, accumulate));
      ZS_ASSIGN_OR_RETURN(F32Output dbo, F32Output::For(dbias, accumulate));
      cpu::Conv2dBackward(g, F32Data(dyf), F32Data(xf), F32Data(wf), dxo.data(), dwo.data(),
                          dbo.data(), accumulate);
      ZS_RETURN_IF_ERROR(dxo.Finish());
      ZS_RETURN_IF_ERROR(dwo.Finish());
      return dbo.Finish();
    }
    case DeviceType::kCuda:
      if (cuda::UseOwnImageKernels(x.device().index)) {
        return OwnCudaBackward(op, g, dy, x, weight, dx, dweight, dbias, accumulate);
      }
      return cuda::CudnnConv2dBackward(g, dy, x, weight, dx, dweight, dbias, accumulate);
  }
  return NoDeviceKernel(op, x.device());
}

}  // namespace zeroshard
