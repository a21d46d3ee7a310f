// Host launcher of the CUDA dropout kernel (kernels/cuda/dropout.cu), callable
// from plain C++: over n contiguous elements, element i draws word
// (offset + i) of the Philox stream of `seed` and applies
// kernels/math/dropout_math.h, so the mask is the CPU kernel's, bit for bit.
// Each thread computes one Philox block (four consecutive words).
// Enqueued on `stream`; returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_DROPOUT_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_DROPOUT_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// out = keep ? x * scale : 0 (x and out of `dtype`, out may be x); with
// mask_only, out = keep ? 1 : 0 and x is not read. keep_prob and scale are
// DropoutParams' (MakeDropoutParams(p)).
int LaunchDropout(int dtype, const void* x, void* out, int64_t n, uint64_t seed, uint64_t offset,
                  float keep_prob, float scale, bool mask_only, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_DROPOUT_LAUNCH_H_
