// Tensor: a typed, strided view of a Storage. Storage + offset + shape +
// strides + dtype; the device is the storage's.
//
//   ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Zeros({2, 3}, DType::kF32));
//   ZS_ASSIGN_OR_RETURN(Tensor xt, x.Transpose(0, 1));     // a view: [3, 2], strides [1, 3]
//   ZS_ASSIGN_OR_RETURN(Tensor row, x.Narrow(0, 1, 1));    // shares x's bytes
//   ZS_RETURN_IF_ERROR(row.Fill(2.5));                     // writes into x
//   ZS_ASSIGN_OR_RETURN(Tensor h, x.To(DType::kBF16));     // a converted copy
//   std::cout << x;   // tensor([[0.0000, 0.0000, 0.0000],
//                     //         [2.5000, 2.5000, 2.5000]], dtype=f32, device=cpu)
//
// Views (View, Reshape when possible, Narrow, Slice, Select, Transpose,
// Permute, Expand, Unsqueeze, Squeeze) share storage; everything that could be
// asked with wrong arguments returns absl::StatusOr and says what was expected
// and what was found. Strides and offsets are in elements, not bytes. An
// expanded (broadcast) dimension has stride 0: it may be read, never written.
//
// A default-constructed Tensor is undefined (`defined()` is false); every
// other Tensor is valid. Copying a Tensor copies the handle, not the bytes
// (`Clone()` copies bytes). Kernels that write take the output as
// `const Tensor& out` and write into its storage, so a view of a larger buffer
// (a slice of a flat parameter) can be an output.
#ifndef ZEROSHARD_RUNTIME_TENSOR_H_
#define ZEROSHARD_RUNTIME_TENSOR_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/storage.h"

namespace zeroshard {

using Shape = absl::InlinedVector<int64_t, 6>;

// "[2, 3, 4]".
std::string ShapeToString(absl::Span<const int64_t> shape);
int64_t NumElements(absl::Span<const int64_t> shape);
// Row-major (C-contiguous) strides for `shape`.
Shape ContiguousStrides(absl::Span<const int64_t> shape);
// The broadcast of two shapes (numpy rules, aligned from the right), or an error.
absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b);

class Tensor {
 public:
  Tensor() = default;

  // ---------------------------------------------------------------- creation
  // `allocator` == nullptr means DefaultCpuAllocator(); the tensor lives on the
  // allocator's device. Allocation failure (e.g. a capacity limit) returns
  // ResourceExhausted.
  static absl::StatusOr<Tensor> Empty(absl::Span<const int64_t> shape, DType dtype,
                                      Allocator* allocator = nullptr);
  static absl::StatusOr<Tensor> Zeros(absl::Span<const int64_t> shape, DType dtype,
                                      Allocator* allocator = nullptr);
  static absl::StatusOr<Tensor> Full(absl::Span<const int64_t> shape, double value, DType dtype,
                                     Allocator* allocator = nullptr);
  // Same shape, dtype and allocator as `like` (contiguous).
  static absl::StatusOr<Tensor> EmptyLike(const Tensor& like);
  // Copies `values` (converted to `dtype`) into a new CPU tensor of `shape`.
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(absl::Span<const T> values,
                                           absl::Span<const int64_t> shape, DType dtype,
                                           Allocator* allocator = nullptr);
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(const std::vector<T>& values,
                                           absl::Span<const int64_t> shape,
                                           DType dtype = DTypeOf<T>(),
                                           Allocator* allocator = nullptr) {
    return FromVector<T>(absl::MakeConstSpan(values), shape, dtype, allocator);
  }
  // A contiguous tensor over caller-owned memory (not freed by the tensor).
  static Tensor Wrap(void* data, absl::Span<const int64_t> shape, DType dtype,
                     Device device = Device::Cpu());
  // A general view of `storage`; checks that every element is inside it.
  static absl::StatusOr<Tensor> FromStorage(std::shared_ptr<Storage> storage,
                                            absl::Span<const int64_t> shape,
                                            absl::Span<const int64_t> strides, int64_t offset,
                                            DType dtype);

  // ---------------------------------------------------------------- properties
  bool defined() const { return storage_ != nullptr; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  // Negative `d` counts from the end. `d` must be valid (an invariant).
  int64_t size(int64_t d) const { return shape_[WrapDim(d)]; }
  int64_t stride(int64_t d) const { return strides_[WrapDim(d)]; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t itemsize() const { return DTypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * itemsize(); }
  int64_t offset() const { return offset_; }
  Device device() const { return storage_ ? storage_->device() : Device::Cpu(); }
  // The allocator of the underlying storage, nullptr for wrapped memory.
  Allocator* allocator() const { return storage_ ? storage_->allocator() : nullptr; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;
  // True if some element is reachable from two indices (a stride-0 dimension).
  bool has_internal_overlap() const;

  // Pointer to element [0, ..., 0]. The typed form checks the dtype.
  void* raw_data() const {
    return storage_ ? static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize())
                    : nullptr;
  }
  template <typename T>
  T* data() const {
    ZS_CHECK(DTypeOf<T>() == dtype_, "data<", DTypeName(DTypeOf<T>()), ">() on a ",
             DTypeName(dtype_), " tensor");
    return static_cast<T*>(raw_data());
  }

  // Returns `d` wrapped into [0, dim()), or an error naming `op`.
  absl::StatusOr<int64_t> CheckDim(int64_t d, absl::string_view op) const;

  // ---------------------------------------------------------------- views
  // A view with a new shape (one entry may be -1); fails if the strides cannot express it.
  absl::StatusOr<Tensor> View(absl::Span<const int64_t> shape) const;
  // View when possible, otherwise a contiguous copy.
  absl::StatusOr<Tensor> Reshape(absl::Span<const int64_t> shape) const;
  // Elements [start, start + length) along `dim`.
  absl::StatusOr<Tensor> Narrow(int64_t dim, int64_t start, int64_t length) const;
  // Elements start, start + step, ... < end along `dim` (step >= 1).
  absl::StatusOr<Tensor> Slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Element `index` along `dim`, removing the dimension.
  absl::StatusOr<Tensor> Select(int64_t dim, int64_t index) const;
  absl::StatusOr<Tensor> Transpose(int64_t dim0, int64_t dim1) const;
  absl::StatusOr<Tensor> Permute(absl::Span<const int64_t> dims) const;
  // Broadcast to `shape` (numpy rules; -1 keeps a size); broadcast dims get stride 0.
  absl::StatusOr<Tensor> Expand(absl::Span<const int64_t> shape) const;
  absl::StatusOr<Tensor> Unsqueeze(int64_t dim) const;
  absl::StatusOr<Tensor> Squeeze(int64_t dim) const;
  // All of the elements as one dimension (a view when contiguous, else a copy).
  absl::StatusOr<Tensor> Flatten() const { return Reshape({-1}); }

  // ---------------------------------------------------------------- copies
  // This tensor if contiguous, else a contiguous copy.
  absl::StatusOr<Tensor> Contiguous() const;
  // A contiguous copy; `allocator` == nullptr uses this tensor's allocator.
  absl::StatusOr<Tensor> Clone(Allocator* allocator = nullptr) const;
  // A contiguous copy converted to `dtype` (this tensor when dtype is the same).
  absl::StatusOr<Tensor> To(DType dtype) const;
  // A contiguous copy in memory from `allocator` (this tensor if already there).
  absl::StatusOr<Tensor> To(Allocator* allocator) const;
  // Writes `src` into this tensor: `src` broadcasts to this shape, converts to
  // this dtype, and may live on another device.
  absl::Status CopyFrom(const Tensor& src) const;
  absl::Status Fill(double value) const;

  // Elements in row-major order, converted to T (CPU tensors; others are copied to host).
  template <typename T>
  absl::StatusOr<std::vector<T>> ToVector() const;
  // The single element of a one-element tensor, as double.
  absl::StatusOr<double> Item() const;

  // Values (summarised past `edge_items` per dimension), dtype and device.
  std::string ToString(int64_t edge_items = 3) const;
  // "Tensor(shape=[2, 3], strides=[3, 1], offset=0, dtype=f32, device=cpu)".
  std::string DebugString() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  Tensor WithLayout(Shape shape, Shape strides, int64_t offset) const;
  size_t WrapDim(int64_t d) const {
    const int64_t n = dim();
    const int64_t w = d < 0 ? d + n : d;
    ZS_CHECK(w >= 0 && w < n, "dimension ", d, " out of range for a ", n, "-d tensor");
    return static_cast<size_t>(w);
  }

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// True when the byte ranges [first element, last element] of `a` and `b` intersect.
bool MemoryOverlaps(const Tensor& a, const Tensor& b);
// True when `a` and `b` address exactly the same elements in the same order.
bool IsSameView(const Tensor& a, const Tensor& b);

// Returns OK if `t` is defined and has `dtype`, else an InvalidArgument naming `what`.
absl::Status CheckDType(const Tensor& t, DType dtype, absl::string_view what);
// Returns OK if `t` has exactly `shape`.
absl::Status CheckShape(const Tensor& t, absl::Span<const int64_t> shape, absl::string_view what);
// Returns OK if every tensor is on one device and, for a CUDA device, if that
// is the calling thread's current device (cudaSetDevice): CUDA kernels launch
// on the current device, so an op whose tensors live on another GPU is an
// error naming both, never a silent cross-device access.
absl::Status CheckSameDevice(std::initializer_list<const Tensor*> tensors, absl::string_view op);
// The CUDA half of CheckSameDevice for one tensor (OK for other devices).
absl::Status CheckCurrentDevice(const Tensor& t, absl::string_view op);

// ---------------------------------------------------------------- templates

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(absl::Span<const T> values,
                                          absl::Span<const int64_t> shape, DType dtype,
                                          Allocator* allocator) {
  const int64_t n = NumElements(shape);
  if (static_cast<int64_t>(values.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("FromVector: shape ", ShapeToString(shape),
                                                   " holds ", n, " elements, got ",
                                                   values.size(), " values"));
  }
  const Tensor src = Wrap(const_cast<T*>(values.data()), shape, DTypeOf<T>());
  auto out = Empty(shape, dtype, allocator);
  if (!out.ok()) return out.status();
  absl::Status s = out->CopyFrom(src);
  if (!s.ok()) return s;
  return out;
}

// double is not a storage dtype: each element converts through its own type.
template <>
absl::StatusOr<std::vector<double>> Tensor::ToVector<double>() const;

template <typename T>
absl::StatusOr<std::vector<T>> Tensor::ToVector() const {
  if (!defined()) return absl::FailedPreconditionError("ToVector on an undefined tensor");
  std::vector<T> result(static_cast<size_t>(numel_));
  const Tensor dst = Wrap(result.data(), shape_, DTypeOf<T>());
  absl::Status s = dst.CopyFrom(*this);
  if (!s.ok()) return s;
  return result;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_TENSOR_H_
