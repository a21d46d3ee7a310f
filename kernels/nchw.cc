#include "zeroshard/kernels/nchw.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::Status CheckImage(absl::string_view op, absl::string_view name, const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape()),
                                                   ", expected 4 dimensions [N, C, H, W]"));
  }
  return absl::OkStatus();
}

absl::Status CheckFloatShape(absl::string_view op, absl::string_view name, const Tensor& t,
                             const Shape& want, absl::string_view why) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape()), ", expected ",
                                                   ShapeToString(want), " (", why, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> F32Input(const Tensor& t) {
  if (!t.defined()) return Tensor();
  if (t.dtype() == DType::kF32 && t.is_contiguous()) return t;
  if (t.dtype() != DType::kF32) {
    ZS_ASSIGN_OR_RETURN(Tensor f, t.To(DType::kF32));
    return f.Contiguous();
  }
  return t.Contiguous();
}

absl::StatusOr<F32Output> F32Output::For(const Tensor& out, bool load) {
  F32Output o;
  o.out_ = out;
  if (!out.defined() || (out.dtype() == DType::kF32 && out.is_contiguous())) {
    o.work_ = out;
    return o;
  }
  ZS_ASSIGN_OR_RETURN(o.work_, Tensor::Empty(out.shape(), DType::kF32, DefaultCpuAllocator()));
  if (load) ZS_RETURN_IF_ERROR(o.work_.CopyFrom(out));
  return o;
}

absl::Status F32Output::Finish() const {
  if (!out_.defined() || IsSameView(out_, work_)) return absl::OkStatus();
  return out_.CopyFrom(work_);
}

}  // namespace zeroshard
