// Host launchers of the CUDA pooling kernels (kernels/cuda/pool2d.cu), callable
// from plain C++. Contiguous f32 planes: x, dx [planes, h, w], y, dy
// [planes, oh, ow]; indices i64 like y. Window math is
// kernels/math/conv_geometry.h, the CPU kernels'. The backward kernels run one
// thread per input element and gather from the outputs whose window holds it,
// in a fixed order: no atomics, the same bits every run.
//
// Average pooling (both kinds) takes per-axis window tables in device memory
// (int64): row_start/row_end/row_div [oh] and, for the backward, the range of
// outputs [row_out_begin, row_out_end) whose window holds each input row [h];
// likewise for columns. Enqueued on `stream`; returns a cudaError_t as int.
#ifndef ZEROSHARD_KERNELS_CUDA_POOL2D_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_POOL2D_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

struct PoolShape {
  int64_t planes, h, w, oh, ow;
};

struct MaxPoolWindow {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// Device pointers to the window tables described above.
struct AvgPoolTables {
  const int64_t *row_start, *row_end, *row_div, *row_out_begin, *row_out_end;
  const int64_t *col_start, *col_end, *col_div, *col_out_begin, *col_out_end;
};

int LaunchMaxPool2dForward(const PoolShape& s, const MaxPoolWindow& win, const float* x, float* y,
                           int64_t* indices, void* stream);
int LaunchMaxPool2dBackward(const PoolShape& s, const MaxPoolWindow& win, const float* dy,
                            const int64_t* indices, float* dx, void* stream);
int LaunchAvgPool2dForward(const PoolShape& s, const AvgPoolTables& t, const float* x, float* y,
                           void* stream);
int LaunchAvgPool2dBackward(const PoolShape& s, const AvgPoolTables& t, const float* dy, float* dx,
                            void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_POOL2D_LAUNCH_H_
