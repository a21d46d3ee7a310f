// Shared argument checks and errors of the op entries (kernels/*.cc).
#ifndef ZEROSHARD_KERNELS_DEVICE_CHECK_H_
#define ZEROSHARD_KERNELS_DEVICE_CHECK_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/device.h"

namespace zeroshard {

// The error an op entry returns for a device that has no kernel for it.
inline absl::Status NoDeviceKernel(absl::string_view op, Device device) {
  return absl::UnimplementedError(absl::StrCat(op, ": no kernel for ", device.ToString(),
                                               " tensors in this build; expected cpu tensors"));
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_DEVICE_CHECK_H_
