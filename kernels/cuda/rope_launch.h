// Host launcher of the CUDA rotary embedding (kernels/cuda/rope.cu), callable
// from plain C++. x and out are [B, T, H, D] at any element strides; cos and
// sin contiguous f32 [>= T, D/2] on the device. Per-element math is
// kernels/math/rope_ops.h, the CPU kernel's. Enqueued on `stream`; returns a
// cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_ROPE_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_ROPE_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

struct RopeGeometry {
  int64_t batch = 0, seq = 0, heads = 0, half = 0;  // B, T, H, D/2
  int64_t x_strides[4] = {0, 0, 0, 0};
  int64_t out_strides[4] = {0, 0, 0, 0};
};

// out may be x (the same view): each thread reads a pair, then writes it.
int LaunchRopeApply(int x_dtype, int out_dtype, const void* x, void* out, const float* cos,
                    const float* sin, const RopeGeometry& g, bool inverse, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_ROPE_LAUNCH_H_
