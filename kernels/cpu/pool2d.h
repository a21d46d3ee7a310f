// CPU implementation behind kernels/pool2d.h, on contiguous f32 planes:
// x, dx [P, H, W] and y, dy [P, OH, OW] with P = N C planes.
//
// Average pooling of both kinds is one kernel over per-axis windows
// (AvgWindows): output oh reads rows [start[oh], end[oh]) and divides by
// div_h[oh] div_w[ow], so AvgPool2d and AdaptiveAvgPool2d differ only in the
// windows the op entry builds (math/conv_geometry.h).
#ifndef ZEROSHARD_KERNELS_CPU_POOL2D_H_
#define ZEROSHARD_KERNELS_CPU_POOL2D_H_

#include <cstdint>
#include <vector>

namespace zeroshard::cpu {

struct PoolPlanes {
  int64_t planes, h, w, oh, ow;
};

struct MaxWindow {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// indices may be null.
void MaxPool2dForward(const PoolPlanes& p, const MaxWindow& win, const float* x, float* y,
                      int64_t* indices);
// dx = 0, then dx[plane][indices] += dy.
void MaxPool2dBackward(const PoolPlanes& p, const float* dy, const int64_t* indices, float* dx);

struct AvgWindows {
  std::vector<int64_t> row_start, row_end, row_div;  // [OH]
  std::vector<int64_t> col_start, col_end, col_div;  // [OW]
};

void AvgPool2dForward(const PoolPlanes& p, const AvgWindows& win, const float* x, float* y);
// dx = 0, then each dy / divisor added over its window.
void AvgPool2dBackward(const PoolPlanes& p, const AvgWindows& win, const float* dy, float* dx);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_POOL2D_H_
