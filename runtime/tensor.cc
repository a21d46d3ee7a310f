// Tensor (tensor.h): shape helpers, construction, properties, views, printing
// and argument checks. What moves values between tensors (CopyFrom, To, Fill,
// Item, ToVector) is in tensor_copy.cc.
#include "zeroshard/runtime/tensor.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

// ================================================================ shape helpers

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape ContiguousStrides(absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", ShapeToString(a), " and ", ShapeToString(b),
          " do not broadcast: dimension ", i, " (aligned from the right) is ", da, " vs ", db,
          ", expected equal sizes or a 1"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ================================================================ construction

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
               DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(NumElements(shape_)),
      dtype_(dtype) {}

Tensor Tensor::WithLayout(Shape shape, Shape strides, int64_t offset) const {
  return Tensor(storage_, std::move(shape), std::move(strides), offset, dtype_);
}

static absl::Status CheckShapeArg(absl::Span<const int64_t> shape, absl::string_view op) {
  for (int64_t s : shape) {
    if (s < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": negative size in shape ",
                                                     ShapeToString(shape)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Tensor::Empty(absl::Span<const int64_t> shape, DType dtype,
                                     Allocator* allocator) {
  ZS_RETURN_IF_ERROR(CheckShapeArg(shape, "Tensor::Empty"));
  const int64_t n = NumElements(shape);
  ZS_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage,
                      Storage::Allocate(static_cast<size_t>(n) * DTypeSize(dtype), allocator));
  return Tensor(std::move(storage), Shape(shape.begin(), shape.end()), ContiguousStrides(shape), 0,
                dtype);
}

absl::StatusOr<Tensor> Tensor::Zeros(absl::Span<const int64_t> shape, DType dtype,
                                     Allocator* allocator) {
  return Full(shape, 0.0, dtype, allocator);
}

absl::StatusOr<Tensor> Tensor::Full(absl::Span<const int64_t> shape, double value, DType dtype,
                                    Allocator* allocator) {
  ZS_ASSIGN_OR_RETURN(Tensor t, Empty(shape, dtype, allocator));
  ZS_RETURN_IF_ERROR(t.Fill(value));
  return t;
}

absl::StatusOr<Tensor> Tensor::EmptyLike(const Tensor& like) {
  if (!like.defined()) return absl::InvalidArgumentError("EmptyLike of an undefined tensor");
  Allocator* allocator = like.allocator();
  if (allocator == nullptr && !like.device().is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "EmptyLike: the ", like.device().ToString(),
        " tensor wraps external memory and has no allocator to allocate from"));
  }
  return Empty(like.shape(), like.dtype(), allocator);
}

Tensor Tensor::Wrap(void* data, absl::Span<const int64_t> shape, DType dtype, Device device) {
  const size_t nbytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  return Tensor(Storage::Wrap(data, nbytes, device), Shape(shape.begin(), shape.end()),
                ContiguousStrides(shape), 0, dtype);
}

absl::StatusOr<Tensor> Tensor::FromStorage(std::shared_ptr<Storage> storage,
                                           absl::Span<const int64_t> shape,
                                           absl::Span<const int64_t> strides, int64_t offset,
                                           DType dtype) {
  if (storage == nullptr) return absl::InvalidArgumentError("FromStorage: null storage");
  ZS_RETURN_IF_ERROR(CheckShapeArg(shape, "FromStorage"));
  if (shape.size() != strides.size()) {
    return absl::InvalidArgumentError(absl::StrCat("FromStorage: shape ", ShapeToString(shape),
                                                   " has ", shape.size(), " dims but strides ",
                                                   ShapeToString(strides), " have ",
                                                   strides.size()));
  }
  if (offset < 0) return absl::InvalidArgumentError("FromStorage: negative offset");
  // The furthest element reachable must lie inside the storage.
  int64_t last = offset;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (strides[i] < 0) return absl::InvalidArgumentError("FromStorage: negative stride");
    if (shape[i] == 0) empty = true;
    last += (shape[i] - 1) * strides[i];
  }
  const int64_t capacity = static_cast<int64_t>(storage->nbytes() / DTypeSize(dtype));
  if (!empty && last >= capacity) {
    return absl::OutOfRangeError(absl::StrCat(
        "FromStorage: a ", DTypeName(dtype), " view of shape ", ShapeToString(shape),
        ", strides ", ShapeToString(strides), " at offset ", offset, " reaches element ", last,
        " but the storage holds ", capacity, " elements (", storage->nbytes(), " bytes)"));
  }
  return Tensor(std::move(storage), Shape(shape.begin(), shape.end()),
                Shape(strides.begin(), strides.end()), offset, dtype);
}

// ================================================================ properties

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

bool Tensor::has_internal_overlap() const {
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] > 1 && strides_[i] == 0) return true;
  }
  return false;
}

absl::StatusOr<int64_t> Tensor::CheckDim(int64_t d, absl::string_view op) const {
  const int64_t n = dim();
  const int64_t w = d < 0 ? d + n : d;
  if (w < 0 || w >= n) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dimension ", d, " is out of range for a ",
                                                   n, "-d tensor of shape ",
                                                   ShapeToString(shape_), " (expected ", -n,
                                                   " <= dim < ", n, ")"));
  }
  return w;
}

// ================================================================ views

// Infers a single -1 entry and checks the element count.
static absl::StatusOr<Shape> ResolveShape(absl::Span<const int64_t> shape, int64_t numel,
                                          absl::Span<const int64_t> from, absl::string_view op) {
  Shape out(shape.begin(), shape.end());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": shape ", ShapeToString(shape),
                                                       " has more than one -1"));
      }
      infer = static_cast<int>(i);
    } else if (out[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": invalid size ", out[i], " in shape ",
                                                     ShapeToString(shape)));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": cannot infer -1 in shape ",
                                                     ShapeToString(shape), " for ", numel,
                                                     " elements of shape ", ShapeToString(from)));
    }
    out[infer] = numel / known;
    known *= out[infer];
  }
  if (known != numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": shape ", ShapeToString(shape), " holds ", known, " elements but the tensor of shape ",
        ShapeToString(from), " has ", numel));
  }
  return out;
}

// Strides for viewing (old_shape, old_strides) as new_shape without copying,
// or false when the memory layout cannot express it (the rule PyTorch's view uses:
// each run of new dims must cover whole contiguous chunks of old dims).
static bool ViewStrides(absl::Span<const int64_t> old_shape, absl::Span<const int64_t> old_strides,
                        absl::Span<const int64_t> new_shape, Shape* new_strides) {
  new_strides->assign(new_shape.size(), 0);
  if (old_shape.empty() || NumElements(old_shape) == 0) {
    *new_strides = ContiguousStrides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        (*new_strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

absl::StatusOr<Tensor> Tensor::View(absl::Span<const int64_t> shape) const {
  ZS_ASSIGN_OR_RETURN(Shape resolved, ResolveShape(shape, numel_, shape_, "View"));
  Shape strides;
  if (!ViewStrides(shape_, strides_, resolved, &strides)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "View: a tensor of shape ", ShapeToString(shape_), " and strides ",
        ShapeToString(strides_), " cannot be viewed as ", ShapeToString(resolved),
        " without a copy (use Reshape, or Contiguous first)"));
  }
  return WithLayout(std::move(resolved), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Reshape(absl::Span<const int64_t> shape) const {
  ZS_ASSIGN_OR_RETURN(Shape resolved, ResolveShape(shape, numel_, shape_, "Reshape"));
  Shape strides;
  if (ViewStrides(shape_, strides_, resolved, &strides)) {
    return WithLayout(std::move(resolved), std::move(strides), offset_);
  }
  ZS_ASSIGN_OR_RETURN(Tensor c, Contiguous());
  return c.View(resolved);
}

absl::StatusOr<Tensor> Tensor::Narrow(int64_t dim, int64_t start, int64_t length) const {
  ZS_ASSIGN_OR_RETURN(int64_t d, CheckDim(dim, "Narrow"));
  if (start < 0 || length < 0 || start + length > shape_[d]) {
    return absl::OutOfRangeError(absl::StrCat(
        "Narrow: [", start, ", ", start + length, ") is outside dimension ", d, " of size ",
        shape_[d], " (tensor of shape ", ShapeToString(shape_), ")"));
  }
  Shape shape = shape_;
  shape[d] = length;
  return WithLayout(std::move(shape), strides_, offset_ + start * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  ZS_ASSIGN_OR_RETURN(int64_t d, CheckDim(dim, "Slice"));
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: step ", step, ", expected >= 1"));
  }
  if (start < 0 || end < start || end > shape_[d]) {
    return absl::OutOfRangeError(absl::StrCat("Slice: [", start, ", ", end,
                                              ") is outside dimension ", d, " of size ",
                                              shape_[d], " (expected 0 <= start <= end <= ",
                                              shape_[d], ")"));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  shape[d] = (end - start + step - 1) / step;
  strides[d] = strides_[d] * step;
  return WithLayout(std::move(shape), std::move(strides), offset_ + start * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::Select(int64_t dim, int64_t index) const {
  ZS_ASSIGN_OR_RETURN(int64_t d, CheckDim(dim, "Select"));
  const int64_t i = index < 0 ? index + shape_[d] : index;
  if (i < 0 || i >= shape_[d]) {
    return absl::OutOfRangeError(absl::StrCat("Select: index ", index, " is out of range for dimension ",
                                              d, " of size ", shape_[d]));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return WithLayout(std::move(shape), std::move(strides), offset_ + i * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::Transpose(int64_t dim0, int64_t dim1) const {
  ZS_ASSIGN_OR_RETURN(int64_t a, CheckDim(dim0, "Transpose"));
  ZS_ASSIGN_OR_RETURN(int64_t b, CheckDim(dim1, "Transpose"));
  Shape shape = shape_;
  Shape strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Permute(absl::Span<const int64_t> dims) const {
  if (static_cast<int64_t>(dims.size()) != dim()) {
    return absl::InvalidArgumentError(absl::StrCat("Permute: ", ShapeToString(dims), " has ",
                                                   dims.size(), " entries for a ", dim(),
                                                   "-d tensor"));
  }
  Shape shape(dims.size());
  Shape strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    ZS_ASSIGN_OR_RETURN(int64_t d, CheckDim(dims[i], "Permute"));
    if (seen[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Permute: ", ShapeToString(dims),
                                                     " is not a permutation (", d, " repeats)"));
    }
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Expand(absl::Span<const int64_t> shape) const {
  if (shape.size() < shape_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Expand: cannot expand ", ShapeToString(shape_),
                                                   " to fewer dimensions ", ShapeToString(shape)));
  }
  const size_t lead = shape.size() - shape_.size();
  Shape out_shape(shape.size());
  Shape out_strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      if (shape[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("Expand: size ", shape[i],
                                                       " for a new leading dimension in ",
                                                       ShapeToString(shape)));
      }
      out_shape[i] = shape[i];
      out_strides[i] = 0;
      continue;
    }
    const int64_t old = shape_[i - lead];
    const int64_t want = shape[i] == -1 ? old : shape[i];
    if (want == old) {
      out_shape[i] = old;
      out_strides[i] = strides_[i - lead];
    } else if (old == 1 && want >= 0) {
      out_shape[i] = want;
      out_strides[i] = 0;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "Expand: cannot broadcast ", ShapeToString(shape_), " to ", ShapeToString(shape),
          ": dimension ", i, " has size ", old, ", expected ", want, " or 1"));
    }
  }
  return WithLayout(std::move(out_shape), std::move(out_strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Unsqueeze(int64_t dim) const {
  const int64_t n = this->dim() + 1;
  const int64_t d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n) {
    return absl::InvalidArgumentError(absl::StrCat("Unsqueeze: dimension ", dim,
                                                   " is out of range for a result of ", n,
                                                   " dims"));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  const int64_t stride = d < this->dim() ? strides_[d] * shape_[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Squeeze(int64_t dim) const {
  ZS_ASSIGN_OR_RETURN(int64_t d, CheckDim(dim, "Squeeze"));
  if (shape_[d] != 1) {
    return absl::InvalidArgumentError(absl::StrCat("Squeeze: dimension ", d, " of ",
                                                   ShapeToString(shape_), " has size ",
                                                   shape_[d], ", expected 1"));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

// ================================================================ printing

namespace {

void PrintRecursive(std::ostringstream& os, const std::vector<double>& values, const Shape& shape,
                    size_t d, int64_t base, int64_t edge, bool integral, bool sci, int indent) {
  if (shape.empty()) {
    os << (integral ? absl::StrFormat("%.0f", values[0])
                    : (sci ? absl::StrFormat("%.4e", values[0]) : absl::StrFormat("%.4f", values[0])));
    return;
  }
  const int64_t n = shape[d];
  int64_t inner = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * edge && i == edge) {
      os << "...";
      i = n - edge - 1;
      os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (d + 1 == shape.size()) {
      const double v = values[base + i];
      if (integral) {
        os << absl::StrFormat("%.0f", v);
      } else {
        os << (sci ? absl::StrFormat("%.4e", v) : absl::StrFormat("%.4f", v));
      }
    } else {
      PrintRecursive(os, values, shape, d + 1, base + i * inner, edge, integral, sci, indent + 1);
    }
    if (i + 1 < n) os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::string Tensor::ToString(int64_t edge_items) const {
  if (!defined()) return "tensor(undefined)";
  auto values = ToVector<double>();
  if (!values.ok()) return absl::StrCat("tensor(<unreadable: ", values.status().message(), ">)");
  const bool integral = !IsFloatingPoint(dtype_);
  bool sci = false;
  for (double v : *values) {
    const double a = std::fabs(v);
    if (std::isfinite(a) && a != 0 && (a >= 1e5 || a < 1e-4)) sci = true;
  }
  std::ostringstream os;
  os << "tensor(";
  if (numel_ == 0) {
    os << "[]";
  } else {
    PrintRecursive(os, *values, shape_, 0, 0, edge_items, integral, sci, 7);
  }
  os << ", shape=" << ShapeToString(shape_) << ", dtype=" << DTypeName(dtype_)
     << ", device=" << device().ToString() << ")";
  return os.str();
}

std::string Tensor::DebugString() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor(shape=", ShapeToString(shape_), ", strides=", ShapeToString(strides_),
                      ", offset=", offset_, ", dtype=", DTypeName(dtype_),
                      ", device=", device().ToString(), ")");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.ToString(); }

// ================================================================ argument checks

absl::Status CheckDType(const Tensor& t, DType dtype, absl::string_view what) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(what, ": undefined tensor"));
  if (t.dtype() != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected dtype ", DTypeName(dtype),
                                                   ", got ", DTypeName(t.dtype())));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const Tensor& t, absl::Span<const int64_t> shape, absl::string_view what) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(what, ": undefined tensor"));
  if (absl::Span<const int64_t>(t.shape()) != shape) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected shape ", ShapeToString(shape),
                                                   ", got ", ShapeToString(t.shape())));
  }
  return absl::OkStatus();
}

absl::Status CheckSameDevice(std::initializer_list<const Tensor*> tensors, absl::string_view op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->device() != first->device()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": tensors on different devices: ",
                                                     first->device().ToString(), " and ",
                                                     t->device().ToString()));
    }
  }
  return first != nullptr ? CheckCurrentDevice(*first, op) : absl::OkStatus();
}

absl::Status CheckCurrentDevice(const Tensor& t, absl::string_view op) {
  if (!t.defined() || !t.device().is_cuda()) return absl::OkStatus();
  const int current = cuda::CudaCurrentDevice();
  if (current < 0 || current == t.device().index) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      op, ": tensors on ", t.device().ToString(), " but this thread's current CUDA device is cuda:", current,
      "; expected the thread to cudaSetDevice(", t.device().index,
      ") first (each rank's threads work on its own GPU)"));
}

}  // namespace zeroshard
