// Host launchers of the CUDA RMSNorm kernels (kernels/cuda/rmsnorm.cu),
// callable from plain C++. Row views as in layernorm_launch.h (row r of a
// tensor at base + r * stride elements, its `cols` elements contiguous);
// weight is contiguous [cols] of its own float dtype (w_dtype: f32, bf16 or f16
// code, widened to f32 in the kernel, so a bf16 parameter needs no cast first;
// null: ones), rstd contiguous f32 (null in the forward: not saved). Per-element
// math is kernels/math/rmsnorm_ops.h, the CPU kernel's. Enqueued on `stream`;
// returns a cudaError_t as int (0 = success).
//
// Backward, deterministic (no atomics), in two launches:
//   LaunchRmsNormBackward   dx per row, and per block of RmsNormRowsPerBlock
//                           rows the partial dweight sums into `partials`
//                           [blocks, cols] (f32 scratch);
//   LaunchRmsNormParamGrad  sums the partials over blocks in block order into
//                           dweight (written, or added to).
#ifndef ZEROSHARD_KERNELS_CUDA_RMSNORM_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_RMSNORM_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

inline int64_t RmsNormRowsPerBlock(int64_t rows) {
  const int64_t per = (rows + 1023) / 1024;
  return per < 8 ? 8 : per;
}
inline int64_t RmsNormBackwardBlocks(int64_t rows) {
  const int64_t per = RmsNormRowsPerBlock(rows);
  return (rows + per - 1) / per;
}

int LaunchRmsNormForward(int x_dtype, int out_dtype, const void* x, int64_t x_stride, int w_dtype,
                         const void* weight, float eps, void* out, int64_t out_stride, float* rstd,
                         int64_t rows, int64_t cols, void* stream);

// dy and x share `in_dtype`. dx (may be dy or x) null: not computed; partials
// null: no dweight. partials holds RmsNormBackwardBlocks(rows) * cols floats.
int LaunchRmsNormBackward(int in_dtype, int dx_dtype, const void* dy, int64_t dy_stride,
                          const void* x, int64_t x_stride, const float* rstd, int w_dtype,
                          const void* weight, void* dx, int64_t dx_stride, float* partials,
                          int64_t rows, int64_t cols, void* stream);

// dweight: 1-D of its own float dtype (dw_dtype), element c at base + c *
// stride; the f32 sums are rounded once into it (added to its values first
// when accumulating).
int LaunchRmsNormParamGrad(const float* partials, int64_t blocks, int64_t cols, int dw_dtype,
                           void* dweight, int64_t dw_stride, bool accumulate, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_RMSNORM_LAUNCH_H_
