#include "zeroshard/runtime/cuda/async_copy.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

absl::Status CopyAsync(const Tensor& dst, const Tensor& src, const Stream& stream) {
  if (!dst.defined() || !src.defined()) {
    return absl::InvalidArgumentError("CopyAsync: undefined source or destination");
  }
  if (dst.dtype() != src.dtype() || dst.shape() != src.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("CopyAsync: destination ", dst.DebugString(),
                                                   " and source ", src.DebugString(),
                                                   " differ in dtype or shape"));
  }
  if (!dst.is_contiguous() || !src.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("CopyAsync: both tensors must be contiguous; ",
                                                   "got ", dst.DebugString(), " <- ",
                                                   src.DebugString()));
  }
  if (MemoryOverlaps(dst, src)) {
    return absl::InvalidArgumentError("CopyAsync: source and destination overlap");
  }
  const Device d = dst.device(), s = src.device();
  if (d.is_cpu() && s.is_cpu()) {
    if (dst.nbytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return absl::OkStatus();
  }
  for (const Device& side : {d, s}) {
    // A virtual device's host side is host memory for that device's streams (Note [Virtual host]).
    if (side.is_accelerator() && side != stream.device() && !IsHostSideOf(side, stream.device())) {
      return absl::InvalidArgumentError(absl::StrCat("CopyAsync: a tensor on ", side.ToString(),
                                                     " copied on a stream of ",
                                                     stream.device().ToString()));
    }
  }
  if (stream.device().is_virtual()) {  // the transfer's time on the stream; the host reads zeros
    if (d.is_cpu() && dst.nbytes() > 0) std::memset(dst.raw_data(), 0, dst.nbytes());
    const int stream_index = VirtualStreamIndex(stream.native_handle());
    if (d == s) {  // within the device (or within its host side: a host kernel)
      return ChargeVirtual(d, OpCost{.op = "CopyAsync", .bytes = 2.0 * static_cast<double>(dst.nbytes())});
    }
    return ChargeVirtualCopy(stream.device(), stream_index, static_cast<int64_t>(dst.nbytes()),
                             /*async=*/true);
  }
  const cuda::CopyKind kind = s.is_cpu()   ? cuda::CopyKind::kHostToDevice
                              : d.is_cpu() ? cuda::CopyKind::kDeviceToHost
                                           : cuda::CopyKind::kDeviceToDevice;
  if (stream.native_handle() == nullptr) {
    return absl::InvalidArgumentError("CopyAsync: the stream has no CUDA handle");
  }
  return cuda::CudaMemcpy(dst.raw_data(), src.raw_data(), dst.nbytes(), kind,
                          stream.native_handle());
}

}  // namespace zeroshard
