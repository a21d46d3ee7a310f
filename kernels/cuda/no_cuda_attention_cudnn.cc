// CPU-only build: cuDNN's attention is not built (kernels/cuda/attention_cudnn.h).
#include "zeroshard/kernels/cuda/attention_cudnn.h"

namespace zeroshard::cuda {

CudnnAttentionInfo CudnnAttentionInfoFor(int) { return {}; }

absl::Status CudnnAttentionForward(const AttentionLaunchDims&, const Tensor&, const Tensor&,
                                   const Tensor&, const Tensor&, const Tensor&, void*) {
  return absl::UnimplementedError("cuDNN attention: this build has no CUDA");
}

absl::Status CudnnAttentionBackward(const AttentionLaunchDims&, const Tensor&, const Tensor&,
                                    const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, const Tensor&, const Tensor&, void*) {
  return absl::UnimplementedError("cuDNN attention: this build has no CUDA");
}

}  // namespace zeroshard::cuda
