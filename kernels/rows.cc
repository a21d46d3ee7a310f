#include "zeroshard/kernels/rows.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

RowLayout RowLayout::Of(const Tensor& t) {
  RowLayout l;
  l.cols = t.dim() == 0 ? 1 : t.size(-1);
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    l.rows *= t.size(d);
    l.lead_shape.push_back(t.size(d));
    l.lead_strides.push_back(t.stride(d));
  }
  // Rows are equally spaced when the leading dimensions of size > 1 nest
  // like a row-major array of some row stride.
  int64_t inner = -1;  // index of the innermost leading dim of size > 1 seen so far
  l.row_stride = l.cols;
  for (int64_t d = static_cast<int64_t>(l.lead_shape.size()) - 1; d >= 0; --d) {
    if (l.lead_shape[d] == 1) continue;
    if (inner < 0) {
      l.row_stride = l.lead_strides[d];
    } else if (l.lead_strides[d] != l.lead_strides[inner] * l.lead_shape[inner]) {
      l.uniform = false;
    }
    inner = d;
  }
  return l;
}

bool HasContiguousRows(const Tensor& t) { return t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1; }

absl::StatusOr<Tensor> RowMajorInput(const Tensor& t, DType dtype) {
  if (t.dtype() != dtype) return t.To(dtype);
  if (HasContiguousRows(t)) return t;
  return t.Contiguous();
}

absl::StatusOr<RowOutput> RowOutput::For(const Tensor& out) {
  RowOutput o;
  o.out_ = out;
  if (HasContiguousRows(out)) {
    o.work_ = out;
  } else {
    ZS_ASSIGN_OR_RETURN(o.work_, Tensor::Empty(out.shape(), out.dtype(), DefaultCpuAllocator()));
  }
  return o;
}

absl::Status RowOutput::Finish() const {
  if (IsSameView(out_, work_)) return absl::OkStatus();
  return out_.CopyFrom(work_);
}

absl::Status CheckRowOutput(absl::string_view op, absl::string_view name, const Tensor& out,
                            std::initializer_list<const Tensor*> inputs, bool allow_in_place) {
  if (!out.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the output ", name, " is undefined"));
  }
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the output ", name, " ", out.DebugString(),
                                                   " has a broadcast (stride 0) dimension"));
  }
  for (const Tensor* in : inputs) {
    if (in == nullptr || !in->defined() || !MemoryOverlaps(out, *in)) continue;
    if (allow_in_place && IsSameView(out, *in)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the output ", name, " ", out.DebugString(), " overlaps the input ",
        in->DebugString(), allow_in_place ? " (only exact in-place is allowed)" : ""));
  }
  return absl::OkStatus();
}

absl::Status CheckFloatRows(absl::string_view op, absl::string_view name, const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.dim() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " is 0-dimensional, expected at least 1 dimension [..., C]"));
  }
  return absl::OkStatus();
}

Shape LeadingShape(const Tensor& t) {
  return t.dim() == 0 ? Shape{} : Shape(t.shape().begin(), t.shape().end() - 1);
}

absl::Status CheckPerRowShape(absl::string_view op, absl::string_view name, const Tensor& t,
                              const Tensor& x) {
  const Shape lead = LeadingShape(x);
  const int64_t rows = NumElements(lead);
  if (t.shape() == lead || (t.dim() == 1 && t.size(0) == rows)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " has shape ", ShapeToString(t.shape()), ", expected ", ShapeToString(lead),
      lead.size() == 1 ? "" : absl::StrCat(" or [", rows, "]"), " (one value per row of ",
      ShapeToString(x.shape()), ")"));
}

std::string IndexToString(absl::Span<const int64_t> shape, int64_t flat) {
  Shape index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return ShapeToString(index);
}


// ---------------------------------------------------------------- normalisation entries

absl::StatusOr<int64_t> CheckNormRows(absl::string_view op, absl::string_view name, const Tensor& t) {
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, name, t));
  if (t.size(-1) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape()),
                                                   ", expected a last dimension C >= 1"));
  }
  return t.size(-1);
}

absl::Status CheckNormLike(absl::string_view op, absl::string_view name, const Tensor& t,
                           const Tensor& like, absl::string_view like_name) {
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, name, t));
  if (t.shape() != like.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape()), ", expected ",
                                                   ShapeToString(like.shape()), " (the shape of ",
                                                   like_name, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckNormParam(absl::string_view op, absl::string_view name, const Tensor& t, int64_t c) {
  if (!t.defined()) return absl::OkStatus();
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.dim() != 1 || t.size(0) != c) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape()), ", expected [", c,
                                                   "] (C, the last dimension of x)"));
  }
  return absl::OkStatus();
}

absl::Status CheckNormStat(absl::string_view op, absl::string_view name, const Tensor& t,
                           const Tensor& x) {
  if (t.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32"));
  }
  return CheckPerRowShape(op, name, t, x);
}

absl::StatusOr<std::vector<float>> NormParamValues(const Tensor& t, int64_t c, float fill) {
  if (!t.defined()) return std::vector<float>(static_cast<size_t>(c), fill);
  return t.ToVector<float>();
}

absl::StatusOr<Tensor> NormContiguousF32(const Tensor& t) {
  ZS_ASSIGN_OR_RETURN(Tensor f, t.To(DType::kF32));
  return f.Contiguous();
}

absl::StatusOr<NormStatOutput> NormStatOutput::For(const Tensor& t) {
  NormStatOutput s;
  s.out_ = s.work_ = t;
  if (t.defined() && !t.is_contiguous()) {
    ZS_ASSIGN_OR_RETURN(s.work_, Tensor::Empty(t.shape(), DType::kF32, DefaultCpuAllocator()));
  }
  return s;
}

float* NormStatOutput::data() const {
  return work_.defined() ? static_cast<float*>(work_.raw_data()) : nullptr;
}

absl::Status NormStatOutput::Finish() const {
  if (!out_.defined() || IsSameView(out_, work_)) return absl::OkStatus();
  return out_.CopyFrom(work_);
}

absl::StatusOr<float*> CudaNormStat(absl::string_view op, absl::string_view name, const Tensor& t) {
  if (!t.defined()) return nullptr;
  if (!t.is_contiguous()) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", t.device().ToString(), ": ", name,
                                                 " ", t.DebugString(),
                                                 " must be contiguous for the CUDA kernel"));
  }
  return static_cast<float*>(t.raw_data());
}

const float* NormF32Data(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr;
}

}  // namespace zeroshard
