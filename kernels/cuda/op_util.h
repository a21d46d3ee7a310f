// Shared pieces of the CUDA cases of the op entries (kernels/<op>.cc): the
// checks that turn a CUDA tensor into the (pointer, row stride) arguments of a
// launcher, device-side dtype conversion and scratch buffers. Host code; uses
// Abseil (never included by a .cu file).
//
//   case DeviceType::kCuda: {
//     ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "x", x));
//     ZS_ASSIGN_OR_RETURN(Tensor w, cuda::ContiguousOnDevice(op, weight, DType::kF32));
//     return cuda::CudaLaunchStatus(cuda::LaunchFoo(..., cuda::kOpStream), cuda::LaunchWhat(op, x));
//   }
//
// Op entries launch on the legacy default stream (kOpStream): the tensor API
// has no stream argument yet, and the default stream orders every launch after
// the synchronous copies of Tensor. Launchers themselves take any stream.
// Scratch tensors come from the operands' allocator and are freed when the op
// returns, with its kernels maybe still running: safe with CudaAllocator
// (cudaFree waits for the device) and with a CachingStreamAllocator bound to
// the null stream (the free is ordered after the kernels by its event).
#ifndef ZEROSHARD_KERNELS_CUDA_OP_UTIL_H_
#define ZEROSHARD_KERNELS_CUDA_OP_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cuda {

inline void* const kOpStream = nullptr;

// "Softmax on cuda:0": the `what` of CudaLaunchStatus.
std::string LaunchWhat(absl::string_view op, const Tensor& t);

// The row stride (elements) of a [..., C] tensor whose rows are contiguous and
// equally spaced (contiguous, or a narrowed last axis); Unimplemented otherwise
// (the CUDA kernels have no gather path yet: Contiguous() it first, on the host).
absl::StatusOr<int64_t> UniformRowStride(absl::string_view op, absl::string_view name,
                                         const Tensor& t);

// A device tensor of `shape` and `dtype` from `like`'s allocator.
absl::StatusOr<Tensor> DeviceEmpty(absl::string_view op, const Tensor& like,
                                   absl::Span<const int64_t> shape, DType dtype);

// `t` (a CUDA tensor) contiguous and of `dtype`: `t` itself when it already
// is, else a converted copy on the device (the cast kernel). An undefined `t`
// gives an undefined result. A non-contiguous `t` of another dtype is
// Unimplemented.
absl::StatusOr<Tensor> ContiguousOnDevice(absl::string_view op, const Tensor& t, DType dtype);

// Writes the contiguous `src` (same element count) into `dst`, converting the
// dtype on the device; `dst` must be contiguous.
absl::Status CastInto(absl::string_view op, const Tensor& src, const Tensor& dst);

// A kernel's f32 output on the device (the CUDA twin of rows.h's F32Output):
// the tensor itself when it is contiguous f32, else a buffer that Finish
// converts into it. `keep_values`: the buffer starts with the tensor's values
// (the kernel adds to them). An undefined tensor gives a null data().
//
//   ZS_ASSIGN_OR_RETURN(F32DeviceOutput dw, F32DeviceOutput::For(op, dweight, accumulate));
//   ... LaunchFoo(..., dw.data(), ...) ...
//   ZS_RETURN_IF_ERROR(dw.Finish(op));
class F32DeviceOutput {
 public:
  static absl::StatusOr<F32DeviceOutput> For(absl::string_view op, const Tensor& t, bool keep_values = false);
  float* data() const { return buffer_.defined() ? static_cast<float*>(buffer_.raw_data()) : nullptr; }
  absl::Status Finish(absl::string_view op) const;

 private:
  Tensor target_, buffer_;
};

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_OP_UTIL_H_
