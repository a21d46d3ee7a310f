#include "zeroshard/kernels/dropout.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/dropout.h"
#include "zeroshard/kernels/cuda/dropout_launch.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/math/dropout_math.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Status CheckProbability(absl::string_view op, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {  // also refuses NaN
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": drop probability p must be in [0, 1], got ", p));
  }
  return absl::OkStatus();
}

absl::Status CheckFloat(absl::string_view op, const Tensor& t, absl::string_view what) {
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has dtype ",
                                                   DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  return absl::OkStatus();
}

// Runs fn(x_contiguous, out_contiguous), going through contiguous copies when
// x or out is strided (element i is always the row-major index).
template <typename Fn>
absl::Status WithContiguous(const Tensor& x, const Tensor& out, Fn&& fn) {
  ZS_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  if (out.is_contiguous() && (IsSameView(out, xc) || !MemoryOverlaps(out, xc))) {
    fn(xc, out);
    return absl::OkStatus();
  }
  ZS_ASSIGN_OR_RETURN(Tensor tmp, Tensor::Empty(out.shape(), out.dtype(), DefaultCpuAllocator()));
  fn(xc, tmp);
  return out.CopyFrom(tmp);
}

// The shared body of Dropout and DropoutBackward: out = in * mask / (1 - p).
absl::Status ApplyDropout(absl::string_view op, const char* in_name, const char* out_name,
                          const Tensor& in, double p, const PhiloxStream& stream,
                          const Tensor& out) {
  ZS_RETURN_IF_ERROR(CheckProbability(op, p));
  if (!in.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined ", in_name));
  if (!out.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined ", out_name));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&in, &out}, op));
  ZS_RETURN_IF_ERROR(CheckFloat(op, in, in_name));
  if (out.dtype() != in.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", out_name, " has dtype ",
                                                   DTypeName(out.dtype()), ", expected ",
                                                   DTypeName(in.dtype()), " (the dtype of ",
                                                   in_name, ")"));
  }
  if (out.shape() != in.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", out_name, " has shape ",
                                                   ShapeToString(out.shape()), ", expected ",
                                                   ShapeToString(in.shape()), " (the shape of ",
                                                   in_name, ")"));
  }
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", out_name, " ", out.DebugString(),
                                                   " has a broadcast (stride 0) dimension"));
  }
  if (MemoryOverlaps(out, in) && !IsSameView(out, in)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", out_name, " ", out.DebugString(),
                                                   " partially overlaps ", in_name, " ",
                                                   in.DebugString(),
                                                   " (only exact in-place is allowed)"));
  }
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(op, out, {&in}, 12);  // Philox bits and a select
    case DeviceType::kCpu: {
      if (p == 0.0) return IsSameView(out, in) ? absl::OkStatus() : out.CopyFrom(in);  // identity
      const DropoutParams dp = MakeDropoutParams(p);
      return WithContiguous(in, out, [&](const Tensor& ic, const Tensor& oc) {
        cpu::Dropout(ic, dp, stream, oc);
      });
    }
    case DeviceType::kCuda: {
      if (p == 0.0) return IsSameView(out, in) ? absl::OkStatus() : out.CopyFrom(in);  // identity
      const DropoutParams dp = MakeDropoutParams(p);
      ZS_ASSIGN_OR_RETURN(Tensor ic, in.Contiguous());
      if (!out.is_contiguous()) {
        return absl::UnimplementedError(absl::StrCat(op, " on ", out.device().ToString(), ": ",
                                                     out_name, " ", out.DebugString(),
                                                     " must be contiguous for the CUDA kernel"));
      }
      return cuda::CudaLaunchStatus(
          cuda::LaunchDropout(static_cast<int>(in.dtype()), ic.raw_data(), out.raw_data(),
                              out.numel(), stream.seed, stream.offset, dp.keep_prob, dp.scale,
                              /*mask_only=*/false, cuda::kOpStream),
          cuda::LaunchWhat(op, out));
    }
  }
  return NoDeviceKernel(op, out.device());
}

}  // namespace

absl::Status Dropout(const Tensor& x, double p, const PhiloxStream& stream, const Tensor& out) {
  return ApplyDropout("Dropout", "x", "out", x, p, stream, out);
}

absl::StatusOr<Tensor> Dropout(const Tensor& x, double p, const PhiloxStream& stream) {
  if (!x.defined()) return absl::InvalidArgumentError("Dropout: undefined x");
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::EmptyLike(x));
  ZS_RETURN_IF_ERROR(Dropout(x, p, stream, out));
  return out;
}

absl::Status DropoutBackward(const Tensor& dy, double p, const PhiloxStream& stream,
                             const Tensor& dx) {
  return ApplyDropout("DropoutBackward", "dy", "dx", dy, p, stream, dx);
}

absl::Status DropoutMask(double p, const PhiloxStream& stream, const Tensor& mask) {
  ZS_RETURN_IF_ERROR(CheckProbability("DropoutMask", p));
  if (!mask.defined()) return absl::InvalidArgumentError("DropoutMask: undefined mask");
  ZS_RETURN_IF_ERROR(CheckFloat("DropoutMask", mask, "mask"));
  if (mask.has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat("DropoutMask: mask ", mask.DebugString(),
                                                   " has a broadcast (stride 0) dimension"));
  }
  switch (mask.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise("DropoutMask", mask, {}, 12);
    case DeviceType::kCpu: {
      const DropoutParams dp = MakeDropoutParams(p);
      if (mask.is_contiguous()) {
        cpu::DropoutMask(dp, stream, mask);
        return absl::OkStatus();
      }
      ZS_ASSIGN_OR_RETURN(Tensor tmp, Tensor::Empty(mask.shape(), mask.dtype(), DefaultCpuAllocator()));
      cpu::DropoutMask(dp, stream, tmp);
      return mask.CopyFrom(tmp);
    }
    case DeviceType::kCuda: {
      if (!mask.is_contiguous()) {
        return absl::UnimplementedError(absl::StrCat("DropoutMask on ", mask.device().ToString(),
                                                     ": mask ", mask.DebugString(),
                                                     " must be contiguous for the CUDA kernel"));
      }
      const DropoutParams dp = MakeDropoutParams(p);
      return cuda::CudaLaunchStatus(
          cuda::LaunchDropout(static_cast<int>(mask.dtype()), nullptr, mask.raw_data(),
                              mask.numel(), stream.seed, stream.offset, dp.keep_prob, dp.scale,
                              /*mask_only=*/true, cuda::kOpStream),
          cuda::LaunchWhat("DropoutMask", mask));
    }
  }
  return NoDeviceKernel("DropoutMask", mask.device());
}

}  // namespace zeroshard
