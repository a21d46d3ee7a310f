#include "zeroshard/kernels/cuda/op_util.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/cast_launch.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::cuda {

std::string LaunchWhat(absl::string_view op, const Tensor& t) {
  return absl::StrCat(op, " on ", t.device().ToString());
}

absl::StatusOr<int64_t> UniformRowStride(absl::string_view op, absl::string_view name,
                                         const Tensor& t) {
  const RowLayout l = RowLayout::Of(t);
  if (!HasContiguousRows(t) || !l.uniform) {
    return absl::UnimplementedError(absl::StrCat(
        op, " on ", t.device().ToString(), ": ", name, " ", t.DebugString(),
        " needs contiguous, equally spaced rows for the CUDA kernel; make it contiguous first"));
  }
  return l.rows > 1 ? l.row_stride : l.cols;
}

absl::StatusOr<Tensor> DeviceEmpty(absl::string_view op, const Tensor& like,
                                   absl::Span<const int64_t> shape, DType dtype) {
  if (like.allocator() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": the ", like.device().ToString(),
        " tensor wraps external memory; no allocator to take scratch memory from"));
  }
  return Tensor::Empty(shape, dtype, like.allocator());
}

absl::Status CastInto(absl::string_view op, const Tensor& src, const Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous() || src.numel() != dst.numel()) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", dst.device().ToString(),
                                                 ": a device dtype conversion needs contiguous "
                                                 "tensors of one size; got ",
                                                 src.DebugString(), " -> ", dst.DebugString()));
  }
  if (src.dtype() == dst.dtype()) {
    if (src.raw_data() == dst.raw_data() || src.numel() == 0) return absl::OkStatus();
    return CudaMemcpy(dst.raw_data(), src.raw_data(), src.nbytes(), CopyKind::kDeviceToDevice,
                      kOpStream);
  }
  return CudaLaunchStatus(LaunchCast(static_cast<int>(src.dtype()), static_cast<int>(dst.dtype()),
                                     src.raw_data(), dst.raw_data(), src.numel(), kOpStream),
                          LaunchWhat(absl::StrCat(op, " (cast)"), dst));
}

absl::StatusOr<Tensor> ContiguousOnDevice(absl::string_view op, const Tensor& t, DType dtype) {
  if (!t.defined()) return t;  // undefined in, undefined out
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  if (!t.is_contiguous()) {
    if (t.dtype() != dtype) {
      return absl::UnimplementedError(absl::StrCat(op, " on ", t.device().ToString(), ": ",
                                                   t.DebugString(),
                                                   " is strided and of another dtype than the "
                                                   "CUDA kernel takes; make it contiguous first"));
    }
    return t.Contiguous();  // a device copy when the layout allows, else a clear error
  }
  ZS_ASSIGN_OR_RETURN(Tensor out, DeviceEmpty(op, t, t.shape(), dtype));
  ZS_RETURN_IF_ERROR(CastInto(op, t, out));
  return out;
}

absl::StatusOr<F32DeviceOutput> F32DeviceOutput::For(absl::string_view op, const Tensor& t, bool keep_values) {
  F32DeviceOutput out;
  out.target_ = t;
  if (!t.defined() || (t.dtype() == DType::kF32 && t.is_contiguous())) {
    out.buffer_ = t;
    return out;
  }
  if (!t.is_contiguous()) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", t.device().ToString(), ": the output ",
                                                 t.DebugString(), " must be contiguous for the CUDA kernel"));
  }
  if (keep_values) {
    ZS_ASSIGN_OR_RETURN(out.buffer_, ContiguousOnDevice(op, t, DType::kF32));
  } else {
    ZS_ASSIGN_OR_RETURN(out.buffer_, DeviceEmpty(op, t, t.shape(), DType::kF32));
  }
  return out;
}

absl::Status F32DeviceOutput::Finish(absl::string_view op) const {
  if (!target_.defined() || IsSameView(buffer_, target_)) return absl::OkStatus();
  return CastInto(op, buffer_, target_);
}

}  // namespace zeroshard::cuda
