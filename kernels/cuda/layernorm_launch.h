// Host launchers of the CUDA LayerNorm kernels (kernels/cuda/layernorm.cu),
// callable from plain C++. Row views as in softmax_launch.h (row r of a tensor
// at base + r * stride elements, its `cols` elements contiguous); weight and
// bias are contiguous [cols] of their own float dtype (w_dtype, b_dtype: f32,
// bf16 or f16 codes, read and widened to f32 in the kernel, so a bf16
// parameter needs no cast first; null: ones / zeros), mean and rstd contiguous
// f32 (null in the forward: not saved). Per-element math is
// kernels/math/layernorm_ops.h, the CPU kernel's. Enqueued on `stream`;
// returns a cudaError_t as int (0 = success).
//
// Backward, deterministic (no atomics), in two launches:
//   LaunchLayerNormBackward   dx per row, and per block of LayerNormRowsPerBlock
//                             rows the partial dweight and dbias sums into
//                             `partials` [blocks, 2, cols] (f32 scratch);
//   LaunchLayerNormParamGrads sums the partials over blocks in block order into
//                             dweight and dbias (written, or added to).
#ifndef ZEROSHARD_KERNELS_CUDA_LAYERNORM_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_LAYERNORM_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

inline int64_t LayerNormRowsPerBlock(int64_t rows) {
  const int64_t per = (rows + 1023) / 1024;
  return per < 8 ? 8 : per;
}
inline int64_t LayerNormBackwardBlocks(int64_t rows) {
  const int64_t per = LayerNormRowsPerBlock(rows);
  return (rows + per - 1) / per;
}

int LaunchLayerNormForward(int x_dtype, int out_dtype, const void* x, int64_t x_stride,
                           int w_dtype, const void* weight, int b_dtype, const void* bias,
                           float eps, void* out, int64_t out_stride, float* mean, float* rstd,
                           int64_t rows, int64_t cols, void* stream);

// dy and x share `in_dtype`. dx (may be dy or x) null: not computed; partials
// null: no parameter gradients. partials holds LayerNormBackwardBlocks(rows) *
// 2 * cols floats.
int LaunchLayerNormBackward(int in_dtype, int dx_dtype, const void* dy, int64_t dy_stride,
                            const void* x, int64_t x_stride, const float* mean, const float* rstd,
                            int w_dtype, const void* weight, void* dx, int64_t dx_stride,
                            float* partials, int64_t rows, int64_t cols, void* stream);

// dweight / dbias: 1-D of their own float dtype (dw_dtype, db_dtype), element c
// at base + c * stride; either may be null. The f32 sums are rounded once into
// them (added to their values first when accumulating).
int LaunchLayerNormParamGrads(const float* partials, int64_t blocks, int64_t cols, int dw_dtype,
                              void* dweight, int64_t dw_stride, int db_dtype, void* dbias,
                              int64_t db_stride, bool accumulate, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_LAYERNORM_LAUNCH_H_
