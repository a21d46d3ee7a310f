#include "zeroshard/kernels/cpu/batchnorm.h"

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/math/batchnorm_ops.h"

namespace zeroshard::cpu {

namespace {

// Channels run on several threads past this many elements of work.
constexpr int64_t kParallelWork = int64_t{1} << 15;

inline float Add(float a, float b) { return a + b; }

// Sum over the N planes of channel c of load(plane pointer(s), i): each plane
// lane-reduced in fp32, the planes added in order in double.
template <typename PlaneSum>
double ChannelSum(const BatchNormShape& s, const PlaneSum& plane_sum) {
  double acc = 0;
  for (int64_t n = 0; n < s.n; ++n) acc += plane_sum(n);
  return acc;
}

}  // namespace

void BatchNormStats(const BatchNormShape& s, const float* x, float* mean, float* var) {
  const double inv = 1.0 / static_cast<double>(s.count());
#pragma omp parallel for schedule(static) if (s.n * s.c * s.l >= kParallelWork && s.c > 1)
  for (int64_t c = 0; c < s.c; ++c) {
    auto plane = [&](int64_t n) { return x + (n * s.c + c) * s.l; };
    const float m = static_cast<float>(inv * ChannelSum(s, [&](int64_t n) {
      const float* p = plane(n);
      float sum = 0;
      RunWithIsa([&] { sum = LaneReduce<float>(s.l, 0.0f, [&](int64_t i) { return p[i]; }, Add); });
      return static_cast<double>(sum);
    }));
    const float v = static_cast<float>(inv * ChannelSum(s, [&](int64_t n) {
      const float* p = plane(n);
      float sum = 0;
      RunWithIsa([&] {
        sum = LaneReduce<float>(s.l, 0.0f, [&](int64_t i) {
          const float d = p[i] - m;
          return d * d;
        }, Add);
      });
      return static_cast<double>(sum);
    }));
    mean[c] = m;
    var[c] = v;
  }
}

void BatchNormApply(const BatchNormShape& s, const float* x, const float* mean, const float* rstd,
                    const float* w, const float* b, float* y) {
  const int64_t planes = s.n * s.c;
#pragma omp parallel for schedule(static) if (planes * s.l >= kParallelWork && planes > 1)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t c = p % s.c;
    const float* xp = x + p * s.l;
    float* yp = y + p * s.l;
    const float m = mean[c], r = rstd[c], wc = w[c], bc = b[c];
    RunWithIsa([&] {
      for (int64_t i = 0; i < s.l; ++i) yp[i] = LayerNormElement(xp[i], m, r, wc, bc);
    });
  }
}

void BatchNormBackward(const BatchNormShape& s, const float* dy, const float* x, const float* mean,
                       const float* rstd, const float* w, bool training, float* dx, float* dw,
                       float* db, bool accumulate) {
  const float inv_count = 1.0f / static_cast<float>(s.count());
#pragma omp parallel for schedule(static) if (s.n * s.c * s.l >= kParallelWork && s.c > 1)
  for (int64_t c = 0; c < s.c; ++c) {
    const float m = mean[c], r = rstd[c], wc = w[c];
    // sum(dy) and sum(dy xhat) over the channel's values.
    const float sum_dy = static_cast<float>(ChannelSum(s, [&](int64_t n) {
      const float* g = dy + (n * s.c + c) * s.l;
      float sum = 0;
      RunWithIsa([&] { sum = LaneReduce<float>(s.l, 0.0f, [&](int64_t i) { return g[i]; }, Add); });
      return static_cast<double>(sum);
    }));
    const float sum_dy_xhat = static_cast<float>(ChannelSum(s, [&](int64_t n) {
      const float* g = dy + (n * s.c + c) * s.l;
      const float* xp = x + (n * s.c + c) * s.l;
      float sum = 0;
      RunWithIsa([&] {
        sum = LaneReduce<float>(s.l, 0.0f, [&](int64_t i) { return g[i] * ((xp[i] - m) * r); }, Add);
      });
      return static_cast<double>(sum);
    }));
    if (dw != nullptr) dw[c] = accumulate ? dw[c] + sum_dy_xhat : sum_dy_xhat;
    if (db != nullptr) db[c] = accumulate ? db[c] + sum_dy : sum_dy;
    if (dx == nullptr) continue;
    const float mean_g = wc * sum_dy * inv_count;
    const float mean_gx = wc * sum_dy_xhat * inv_count;
    for (int64_t n = 0; n < s.n; ++n) {
      const float* g = dy + (n * s.c + c) * s.l;
      const float* xp = x + (n * s.c + c) * s.l;
      float* o = dx + (n * s.c + c) * s.l;
      RunWithIsa([&] {
        if (training) {
          for (int64_t i = 0; i < s.l; ++i) {
            o[i] = LayerNormGradInput(g[i] * wc, (xp[i] - m) * r, r, mean_g, mean_gx);
          }
        } else {
          const float k = wc * r;
          for (int64_t i = 0; i < s.l; ++i) o[i] = g[i] * k;
        }
      });
    }
  }
}

}  // namespace zeroshard::cpu
