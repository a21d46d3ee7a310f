// CPU-only build: the CUDA cases of the image ops have no kernels.
#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/cudnn_ops.h"

namespace zeroshard::cuda {

namespace {
absl::Status NoCuda(absl::string_view op, const Tensor& t) {
  return absl::UnimplementedError(absl::StrCat(op, ": ", t.device().ToString(),
                                               " tensors need a CUDA build (this one is CPU-only)"));
}
}  // namespace

bool UseOwnImageKernels(int) { return false; }

absl::Status CudnnConv2dForward(const Conv2dGeometry&, const Tensor& x, const Tensor&, const Tensor&,
                                const Tensor&) {
  return NoCuda("Conv2dForward", x);
}

absl::Status CudnnConv2dBackward(const Conv2dGeometry&, const Tensor&, const Tensor& x, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&, bool) {
  return NoCuda("Conv2dBackward", x);
}

absl::Status CudnnBatchNormForward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, bool, double, double, const Tensor&,
                                   const Tensor&, const Tensor&) {
  return NoCuda("BatchNormForward", x);
}

absl::Status CudnnBatchNormBackward(const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                                    const Tensor&, bool, const Tensor&, const Tensor&, const Tensor&,
                                    bool) {
  return NoCuda("BatchNormBackward", x);
}

}  // namespace zeroshard::cuda
