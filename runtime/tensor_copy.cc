// Tensor (tensor.h), the half that moves values: Contiguous, Clone, To,
// CopyFrom (any dtypes and strides, with broadcasting, on the CPU, on one GPU
// or across devices through the host), Fill, Item and ToVector. Shapes,
// construction, views and printing are in tensor.cc.
#include "zeroshard/runtime/tensor.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/strided_copy.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/strided_loop.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

absl::StatusOr<Tensor> Tensor::Contiguous() const {
  if (!defined()) return absl::FailedPreconditionError("Contiguous on an undefined tensor");
  if (is_contiguous()) return *this;
  return Clone();
}

absl::StatusOr<Tensor> Tensor::Clone(Allocator* allocator) const {
  if (!defined()) return absl::FailedPreconditionError("Clone of an undefined tensor");
  if (allocator == nullptr) allocator = this->allocator();
  if (allocator == nullptr && !device().is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Clone: the ", device().ToString(), " tensor wraps external memory; pass an allocator"));
  }
  ZS_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, allocator));
  ZS_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

absl::StatusOr<Tensor> Tensor::To(DType dtype) const {
  if (!defined()) return absl::FailedPreconditionError("To(dtype) on an undefined tensor");
  if (dtype == dtype_) return *this;
  Allocator* allocator = this->allocator();
  if (allocator == nullptr && !device().is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "To(", DTypeName(dtype), "): the ", device().ToString(),
        " tensor wraps external memory and has no allocator to allocate from"));
  }
  ZS_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype, allocator));
  ZS_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

absl::StatusOr<Tensor> Tensor::To(Allocator* allocator) const {
  if (!defined()) return absl::FailedPreconditionError("To(allocator) on an undefined tensor");
  if (allocator == nullptr) allocator = DefaultCpuAllocator();
  if (allocator == this->allocator() && is_contiguous()) return *this;
  ZS_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, allocator));
  ZS_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

namespace {

// dst <- src on the CPU; same shape (src already broadcast), any dtypes and strides.
void CopyCpu(const Tensor& dst, const Tensor& src) {
  if (dst.is_contiguous() && src.is_contiguous() && !src.has_internal_overlap()) {
    ConvertBuffer(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(), dst.numel());
    return;
  }
  DispatchDType(src.dtype(), [&]<typename S>() {
    DispatchDType(dst.dtype(), [&]<typename D>() {
      D* const d = static_cast<D*>(dst.raw_data());
      const S* const s = static_cast<const S*>(src.raw_data());
      ForEachStridedRun<2>(dst.shape(), {dst.strides(), src.strides()},
                           [&](int64_t n, const int64_t* off, const int64_t* step) {
                             D* dp = d + off[0];
                             const S* sp = s + off[1];
                             if (step[0] == 1 && step[1] == 1) {
                               for (int64_t i = 0; i < n; ++i) dp[i] = ConvertElement<D>(sp[i]);
                             } else {
                               for (int64_t i = 0; i < n; ++i) {
                                 dp[i * step[0]] = ConvertElement<D>(sp[i * step[1]]);
                               }
                             }
                           });
    });
  });
}

// dst <- src on one GPU by the strided-copy kernel (runtime/cuda/strided_copy.h):
// same shape (src already broadcast), any strides, a dtype pair it supports.
absl::Status DeviceStridedCopy(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_virtual()) {  // read src's elements, write dst's
    return ChargeVirtual(dst.device(),
                         OpCost{.op = "StridedCopy",
                                .bytes = static_cast<double>(dst.numel()) *
                                         static_cast<double>(dst.itemsize() + src.itemsize())});
  }
  if (dst.dim() > cuda::kStridedCopyMaxDims) {
    return absl::UnimplementedError(absl::StrCat("CopyFrom: a strided ", dst.device().ToString(),
                                                 " copy of ", dst.dim(), " dims; the kernel takes up to ",
                                                 cuda::kStridedCopyMaxDims));
  }
  cuda::StridedCopyArgs a;
  a.ndim = static_cast<int>(dst.dim());
  a.numel = dst.numel();
  for (int64_t d = 0; d < dst.dim(); ++d) {
    a.sizes[d] = dst.size(d);
    a.dst_strides[d] = dst.stride(d);
    a.src_strides[d] = src.stride(d);
  }
  a.dst_dtype = static_cast<int>(dst.dtype());
  a.src_dtype = static_cast<int>(src.dtype());
  a.dst = dst.raw_data();
  a.src = src.raw_data();
  return cuda::CudaLaunchStatus(cuda::LaunchStridedCopy(a, /*stream=*/nullptr),
                                absl::StrCat("CopyFrom on ", dst.device().ToString(), " (strided copy)"));
}

bool CanCopyOnDevice(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_virtual()) return true;  // any layout and dtype pair: nothing is read
  return dst.dim() <= cuda::kStridedCopyMaxDims &&
         cuda::StridedCopySupported(static_cast<int>(dst.dtype()), static_cast<int>(src.dtype()));
}

}  // namespace

bool MemoryOverlaps(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  auto range = [](const Tensor& t) {
    int64_t last = t.offset();
    for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
    const int64_t item = static_cast<int64_t>(t.itemsize());
    return std::pair<int64_t, int64_t>(t.offset() * item, (last + 1) * item);
  };
  auto [a0, a1] = range(a);
  auto [b0, b1] = range(b);
  return a0 < b1 && b0 < a1;
}

bool IsSameView(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.raw_data() == b.raw_data() && a.dtype() == b.dtype() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

absl::Status Tensor::CopyFrom(const Tensor& src) const {
  if (!defined() || !src.defined()) {
    return absl::FailedPreconditionError("CopyFrom: undefined source or destination");
  }
  if (has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyFrom: the destination ", DebugString(),
        " has a broadcast (stride 0) dimension; writing it is ambiguous"));
  }
  Tensor source = src;
  if (src.shape() != shape_) {
    auto expanded = src.Expand(shape_);
    if (!expanded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("CopyFrom: cannot broadcast the source of shape ",
                                                     ShapeToString(src.shape()),
                                                     " to the destination of shape ",
                                                     ShapeToString(shape_)));
    }
    source = *std::move(expanded);
  }
  if (numel_ == 0) return absl::OkStatus();

  const Device dst_device = device();
  const Device src_device = src.device();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    if (MemoryOverlaps(*this, source) && !IsSameView(*this, source)) {
      // Overlapping but not identical: go through a temporary.
      ZS_ASSIGN_OR_RETURN(Tensor tmp, source.Clone(DefaultCpuAllocator()));
      CopyCpu(*this, tmp);
      return absl::OkStatus();
    }
    CopyCpu(*this, source);
    return absl::OkStatus();
  }

  if (IsHostSideOf(dst_device, src_device) || IsHostSideOf(src_device, dst_device)) {
    // A virtual device and its host side (Note [Virtual host]): no bytes to stage on the host.
    return ChargeVirtualTransfer(dst_device, src_device, static_cast<int64_t>(nbytes()));
  }
  // At least one side lives on a device. Contiguous bytes move through the
  // device's allocator; layouts (strides, broadcasts) and float conversions on
  // one GPU run the strided-copy kernel on the legacy default stream (ordered
  // with the op launches, see kernels/cuda/op_util.h); anything else is done
  // on the host.
  if (!src_device.is_cpu() && dst_device == src_device) {
    if (dtype_ == src.dtype() && shape_ == src.shape() && is_contiguous() && src.is_contiguous() &&
        src.allocator() != nullptr) {
      return src.allocator()->CopyWithinDevice(raw_data(), src.raw_data(), nbytes());
    }
    if (CanCopyOnDevice(*this, source)) {
      if (IsSameView(*this, source)) return absl::OkStatus();
      if (MemoryOverlaps(*this, source)) {
        // Overlapping but not identical: through a contiguous temporary.
        Allocator* scratch = src.allocator() != nullptr ? src.allocator() : allocator();
        if (scratch == nullptr) {
          return absl::FailedPreconditionError(absl::StrCat(
              "CopyFrom: overlapping ", dst_device.ToString(), " tensors over external memory; no "
              "allocator for the temporary"));
        }
        ZS_ASSIGN_OR_RETURN(Tensor tmp, Empty(src.shape(), src.dtype(), scratch));
        ZS_RETURN_IF_ERROR(DeviceStridedCopy(tmp, src));
        return CopyFrom(tmp);
      }
      return DeviceStridedCopy(*this, source);
    }
  }
  if (!src_device.is_cpu()) {
    if (src.allocator() == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CopyFrom: the ", src_device.ToString(), " source wraps external memory; no allocator "
          "knows how to read it"));
    }
    Tensor packed = src;
    if (!src.is_contiguous()) {  // gather on the device, then one transfer
      if (!CanCopyOnDevice(src, src)) {
        return absl::UnimplementedError(absl::StrCat(
            "CopyFrom: a non-contiguous ", src_device.ToString(), " source (", src.DebugString(),
            ") of more than ", cuda::kStridedCopyMaxDims, " dims"));
      }
      ZS_ASSIGN_OR_RETURN(packed, Empty(src.shape(), src.dtype(), src.allocator()));
      ZS_RETURN_IF_ERROR(DeviceStridedCopy(packed, src));
    }
    ZS_ASSIGN_OR_RETURN(Tensor host, Empty(src.shape(), src.dtype(), DefaultCpuAllocator()));
    ZS_RETURN_IF_ERROR(
        src.allocator()->CopyToHost(host.raw_data(), packed.raw_data(), packed.nbytes()));
    return CopyFrom(host);
  }
  // Source on the CPU, destination on a device.
  if (allocator() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CopyFrom: the ", dst_device.ToString(), " destination wraps external memory; no "
        "allocator knows how to write it"));
  }
  if (!is_contiguous()) {
    // One transfer into a contiguous device buffer, then a scatter on the device.
    if (!CanCopyOnDevice(*this, *this)) {
      return absl::UnimplementedError(absl::StrCat(
          "CopyFrom: a non-contiguous ", dst_device.ToString(), " destination (", DebugString(),
          ") of more than ", cuda::kStridedCopyMaxDims, " dims"));
    }
    ZS_ASSIGN_OR_RETURN(Tensor staged, Empty(shape_, dtype_, allocator()));
    ZS_RETURN_IF_ERROR(staged.CopyFrom(source));
    return DeviceStridedCopy(*this, staged);
  }
  const void* bytes = source.raw_data();
  Tensor staged;
  if (!(source.is_contiguous() && !source.has_internal_overlap() && source.dtype() == dtype_)) {
    ZS_ASSIGN_OR_RETURN(staged, Empty(shape_, dtype_, DefaultCpuAllocator()));
    CopyCpu(staged, source);
    bytes = staged.raw_data();
  }
  return allocator()->CopyFromHost(raw_data(), bytes, nbytes());
}

absl::Status Tensor::Fill(double value) const {
  if (!defined()) return absl::FailedPreconditionError("Fill on an undefined tensor");
  if (has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat("Fill: ", DebugString(),
                                                   " has a broadcast (stride 0) dimension"));
  }
  if (numel_ == 0) return absl::OkStatus();
  if (device().is_virtual()) {  // a fill kernel writing every element
    return ChargeVirtual(device(), OpCost{.op = "Fill", .bytes = static_cast<double>(numel_) *
                                                                 static_cast<double>(itemsize())});
  }
  if (device().is_cuda() && dim() <= cuda::kStridedCopyMaxDims) {
    // The element converted on the host, written by a kernel: nothing is
    // copied from the host, so a fill does not synchronise it.
    ZS_ASSIGN_OR_RETURN(Tensor host, Empty({}, dtype_, DefaultCpuAllocator()));
    ZS_RETURN_IF_ERROR(host.Fill(value));
    uint64_t bits = 0;
    std::memcpy(&bits, host.raw_data(), static_cast<size_t>(itemsize()));
    cuda::StridedCopyArgs a;
    a.ndim = static_cast<int>(dim());
    a.numel = numel_;
    for (int64_t d = 0; d < dim(); ++d) {
      a.sizes[d] = size(d);
      a.dst_strides[d] = stride(d);
    }
    a.dst_dtype = a.src_dtype = static_cast<int>(dtype_);
    a.dst = raw_data();
    return cuda::CudaLaunchStatus(cuda::LaunchStridedFill(a, bits, /*stream=*/nullptr),
                                  absl::StrCat("Fill on ", device().ToString()));
  }
  if (!device().is_cpu()) {
    // One element set on the host, sent over, and broadcast on the device.
    ZS_ASSIGN_OR_RETURN(Tensor host, Empty({}, dtype_, DefaultCpuAllocator()));
    ZS_RETURN_IF_ERROR(host.Fill(value));
    if (allocator() == nullptr) return CopyFrom(host);
    ZS_ASSIGN_OR_RETURN(Tensor one, Empty({}, dtype_, allocator()));
    ZS_RETURN_IF_ERROR(one.CopyFrom(host));
    return CopyFrom(one);
  }
  DispatchDType(dtype_, [&]<typename T>() {
    const T v = std::is_integral_v<T> ? ConvertElement<T>(value)
                                      : ConvertElement<T>(static_cast<float>(value));
    T* const base = static_cast<T*>(raw_data());
    ForEachStridedRun<1>(shape_, {strides_}, [&](int64_t n, const int64_t* off, const int64_t* step) {
      T* p = base + off[0];
      for (int64_t i = 0; i < n; ++i) p[i * step[0]] = v;
    });
  });
  return absl::OkStatus();
}

absl::StatusOr<double> Tensor::Item() const {
  if (numel_ != 1) {
    return absl::InvalidArgumentError(absl::StrCat("Item: expected a one-element tensor, got shape ",
                                                   ShapeToString(shape_)));
  }
  ZS_ASSIGN_OR_RETURN(std::vector<double> v, ToVector<double>());
  return v[0];
}

// ToVector<double> is used by Item and ToString; double is not a storage dtype,
// so it is converted through the element's own type here.
template <>
absl::StatusOr<std::vector<double>> Tensor::ToVector<double>() const {
  if (!defined()) return absl::FailedPreconditionError("ToVector on an undefined tensor");
  ZS_ASSIGN_OR_RETURN(Tensor host, To(DefaultCpuAllocator()));
  std::vector<double> out(static_cast<size_t>(numel_));
  DispatchDType(dtype_, [&]<typename T>() {
    const T* p = static_cast<const T*>(host.raw_data());
    for (int64_t i = 0; i < numel_; ++i) {
      if constexpr (std::is_integral_v<T>) {
        out[i] = static_cast<double>(p[i]);
      } else {
        out[i] = static_cast<double>(static_cast<float>(p[i]));
      }
    }
  });
  return out;
}

}  // namespace zeroshard
