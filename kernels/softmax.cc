#include "zeroshard/kernels/softmax.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/softmax.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/softmax_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Status CheckSameShape(absl::string_view op, const Tensor& t, absl::string_view name,
                            const Tensor& like, absl::string_view like_name) {
  if (t.shape() != like.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape()), ", expected ",
                                                   ShapeToString(like.shape()), " (the shape of ",
                                                   like_name, ")"));
  }
  return absl::OkStatus();
}

absl::Status SoftmaxForward(absl::string_view op, bool log, const Tensor& x, const Tensor& out) {
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, "out", out));
  ZS_RETURN_IF_ERROR(CheckSameShape(op, out, "out", x, "x"));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "out", out, {&x}, /*allow_in_place=*/true));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out}, op));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(op, out, {&x}, 5);
    case DeviceType::kCpu: {
      if (out.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor xr, RowMajorInput(x, x.dtype()));
      ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(out));
      cpu::Softmax(xr, o.tensor(), log);
      return o.Finish();
    }
    case DeviceType::kCuda: {
      if (out.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "x", x));
      ZS_ASSIGN_OR_RETURN(const int64_t os, cuda::UniformRowStride(op, "out", out));
      const RowLayout l = RowLayout::Of(x);
      return cuda::CudaLaunchStatus(
          cuda::LaunchSoftmax(log, static_cast<int>(x.dtype()), static_cast<int>(out.dtype()),
                              x.raw_data(), xs, out.raw_data(), os, l.rows, l.cols,
                              cuda::kOpStream),
          cuda::LaunchWhat(op, out));
    }
  }
  return NoDeviceKernel(op, out.device());
}

absl::Status SoftmaxBackwardImpl(absl::string_view op, bool log, const Tensor& y, const Tensor& dy,
                                 const Tensor& dx) {
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, "y", y));
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, "dy", dy));
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, "dx", dx));
  ZS_RETURN_IF_ERROR(CheckSameShape(op, dy, "dy", y, "y"));
  ZS_RETURN_IF_ERROR(CheckSameShape(op, dx, "dx", y, "y"));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&y, &dy}, /*allow_in_place=*/true));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&y, &dy, &dx}, op));
  switch (dx.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(op, dx, {&y, &dy}, 4);
    case DeviceType::kCpu: {
      if (dx.numel() == 0) return absl::OkStatus();
      const DType in = y.dtype() == dy.dtype() ? y.dtype() : DType::kF32;
      ZS_ASSIGN_OR_RETURN(Tensor yr, RowMajorInput(y, in));
      ZS_ASSIGN_OR_RETURN(Tensor dyr, RowMajorInput(dy, in));
      ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(dx));
      cpu::SoftmaxBackward(yr, dyr, o.tensor(), log);
      return o.Finish();
    }
    case DeviceType::kCuda: {
      if (dx.numel() == 0) return absl::OkStatus();
      // y and dy of different dtypes: both widened to f32 on the device first.
      const DType in = y.dtype() == dy.dtype() ? y.dtype() : DType::kF32;
      Tensor yr = y, dyr = dy;
      if (y.dtype() != in) {
        ZS_ASSIGN_OR_RETURN(yr, cuda::ContiguousOnDevice(op, y, in));
      }
      if (dy.dtype() != in) {
        ZS_ASSIGN_OR_RETURN(dyr, cuda::ContiguousOnDevice(op, dy, in));
      }
      ZS_ASSIGN_OR_RETURN(const int64_t ys, cuda::UniformRowStride(op, "y", yr));
      ZS_ASSIGN_OR_RETURN(const int64_t ds, cuda::UniformRowStride(op, "dy", dyr));
      ZS_ASSIGN_OR_RETURN(const int64_t os, cuda::UniformRowStride(op, "dx", dx));
      const RowLayout l = RowLayout::Of(dx);
      return cuda::CudaLaunchStatus(
          cuda::LaunchSoftmaxBackward(log, static_cast<int>(in), static_cast<int>(dx.dtype()),
                                      yr.raw_data(), ys, dyr.raw_data(), ds, dx.raw_data(), os,
                                      l.rows, l.cols, cuda::kOpStream),
          cuda::LaunchWhat(op, dx));
    }
  }
  return NoDeviceKernel(op, dx.device());
}

absl::StatusOr<Tensor> AllocLike(absl::string_view op, const Tensor& t, absl::string_view name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  return Tensor::EmptyLike(t);
}

}  // namespace

absl::Status Softmax(const Tensor& x, const Tensor& out) { return SoftmaxForward("Softmax", false, x, out); }

absl::Status LogSoftmax(const Tensor& x, const Tensor& out) {
  return SoftmaxForward("LogSoftmax", true, x, out);
}

absl::Status SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  return SoftmaxBackwardImpl("SoftmaxBackward", false, y, dy, dx);
}

absl::Status LogSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  return SoftmaxBackwardImpl("LogSoftmaxBackward", true, y, dy, dx);
}

absl::StatusOr<Tensor> Softmax(const Tensor& x) {
  ZS_ASSIGN_OR_RETURN(Tensor out, AllocLike("Softmax", x, "x"));
  ZS_RETURN_IF_ERROR(Softmax(x, out));
  return out;
}

absl::StatusOr<Tensor> LogSoftmax(const Tensor& x) {
  ZS_ASSIGN_OR_RETURN(Tensor out, AllocLike("LogSoftmax", x, "x"));
  ZS_RETURN_IF_ERROR(LogSoftmax(x, out));
  return out;
}

absl::StatusOr<Tensor> SoftmaxBackward(const Tensor& y, const Tensor& dy) {
  ZS_ASSIGN_OR_RETURN(Tensor dx, AllocLike("SoftmaxBackward", dy, "dy"));
  ZS_RETURN_IF_ERROR(SoftmaxBackward(y, dy, dx));
  return dx;
}

absl::StatusOr<Tensor> LogSoftmaxBackward(const Tensor& y, const Tensor& dy) {
  ZS_ASSIGN_OR_RETURN(Tensor dx, AllocLike("LogSoftmaxBackward", dy, "dy"));
  ZS_RETURN_IF_ERROR(LogSoftmaxBackward(y, dy, dx));
  return dx;
}

}  // namespace zeroshard
