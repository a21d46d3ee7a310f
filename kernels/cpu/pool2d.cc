#include "zeroshard/kernels/cpu/pool2d.h"

#include <algorithm>
#include <cmath>

#include "zeroshard/kernels/math/conv_geometry.h"

namespace zeroshard::cpu {

namespace {
constexpr int64_t kParallelWork = int64_t{1} << 15;
}  // namespace

void MaxPool2dForward(const PoolPlanes& p, const MaxWindow& win, const float* x, float* y,
                      int64_t* indices) {
#pragma omp parallel for schedule(static) if (p.planes * p.oh * p.ow * win.kh * win.kw >= kParallelWork && p.planes > 1)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const float* xp = x + pl * p.h * p.w;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        float best = -INFINITY;
        int64_t best_index = -1;
        for (int64_t i = 0; i < win.kh; ++i) {
          const int64_t ih = ConvInputIndex(oh, i, win.sh, win.ph, win.dh);
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t j = 0; j < win.kw; ++j) {
            const int64_t iw = ConvInputIndex(ow, j, win.sw, win.pw, win.dw);
            if (iw < 0 || iw >= p.w) continue;
            const float v = xp[ih * p.w + iw];
            if (best_index < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              best_index = ih * p.w + iw;
            }
          }
        }
        const int64_t o = (pl * p.oh + oh) * p.ow + ow;
        y[o] = best;
        if (indices != nullptr) indices[o] = best_index;
      }
    }
  }
}

void MaxPool2dBackward(const PoolPlanes& p, const float* dy, const int64_t* indices, float* dx) {
#pragma omp parallel for schedule(static) if (p.planes * (p.h * p.w + p.oh * p.ow) >= kParallelWork && p.planes > 1)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    float* d = dx + pl * p.h * p.w;
    std::fill(d, d + p.h * p.w, 0.0f);
    const int64_t base = pl * p.oh * p.ow;
    for (int64_t o = 0; o < p.oh * p.ow; ++o) d[indices[base + o]] += dy[base + o];
  }
}

void AvgPool2dForward(const PoolPlanes& p, const AvgWindows& win, const float* x, float* y) {
#pragma omp parallel for schedule(static) if (p.planes * p.h * p.w >= kParallelWork && p.planes > 1)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const float* xp = x + pl * p.h * p.w;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        float sum = 0;
        for (int64_t ih = win.row_start[oh]; ih < win.row_end[oh]; ++ih) {
          for (int64_t iw = win.col_start[ow]; iw < win.col_end[ow]; ++iw) sum += xp[ih * p.w + iw];
        }
        const int64_t div = win.row_div[oh] * win.col_div[ow];
        y[(pl * p.oh + oh) * p.ow + ow] = div > 0 ? sum / static_cast<float>(div) : 0.0f;
      }
    }
  }
}

void AvgPool2dBackward(const PoolPlanes& p, const AvgWindows& win, const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (p.planes * p.h * p.w >= kParallelWork && p.planes > 1)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    float* d = dx + pl * p.h * p.w;
    std::fill(d, d + p.h * p.w, 0.0f);
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        const int64_t div = win.row_div[oh] * win.col_div[ow];
        if (div <= 0) continue;
        const float g = dy[(pl * p.oh + oh) * p.ow + ow] / static_cast<float>(div);
        for (int64_t ih = win.row_start[oh]; ih < win.row_end[oh]; ++ih) {
          for (int64_t iw = win.col_start[ow]; iw < win.col_end[ow]; ++iw) d[ih * p.w + iw] += g;
        }
      }
    }
  }
}

}  // namespace zeroshard::cpu
