// Double-precision references of the image ops (convolution, batch
// normalisation, pooling), written directly from their definitions; shared by
// the kernel suites (tests/kernels/*_test.cc) and the autograd op checks.
#ifndef ZEROSHARD_TESTS_KERNELS_IMAGE_REFERENCE_H_
#define ZEROSHARD_TESTS_KERNELS_IMAGE_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/kernels/conv2d.h"
#include "zeroshard/kernels/pool2d.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::testing {

using Vec = std::vector<double>;

// ---------------------------------------------------------------- convolution

struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
  std::string name;
};

// Sizes of a case, computed independently of the kernel's geometry code.
struct ConvDims {
  int64_t n, c, h, w, o, cg, og, kh, kw, oh, ow;
};

inline ConvDims ConvDimsOf(const ConvCase& k) {
  ConvDims d{k.x[0], k.x[1], k.x[2], k.x[3], k.w[0], k.w[1], k.w[0] / k.o.groups, k.w[2], k.w[3], 0, 0};
  d.oh = (d.h + 2 * k.o.padding[0] - k.o.dilation[0] * (d.kh - 1) - 1) / k.o.stride[0] + 1;
  d.ow = (d.w + 2 * k.o.padding[1] - k.o.dilation[1] * (d.kw - 1) - 1) / k.o.stride[1] + 1;
  return d;
}

// Calls f(n, o, oh, ow, ci, kh, kw, x index, w index) for every product of
// the convolution whose input index is inside x.
template <typename F>
void ForEachConvTap(const ConvCase& k, F&& f) {
  const ConvDims d = ConvDimsOf(k);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.o; ++o) {
      const int64_t g = o / d.og;
      for (int64_t oh = 0; oh < d.oh; ++oh)
        for (int64_t ow = 0; ow < d.ow; ++ow)
          for (int64_t c = 0; c < d.cg; ++c)
            for (int64_t i = 0; i < d.kh; ++i)
              for (int64_t j = 0; j < d.kw; ++j) {
                const int64_t ih = oh * k.o.stride[0] - k.o.padding[0] + i * k.o.dilation[0];
                const int64_t iw = ow * k.o.stride[1] - k.o.padding[1] + j * k.o.dilation[1];
                if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
                const int64_t xi = ((n * d.c + g * d.cg + c) * d.h + ih) * d.w + iw;
                const int64_t wi = ((o * d.cg + c) * d.kh + i) * d.kw + j;
                const int64_t yi = ((n * d.o + o) * d.oh + oh) * d.ow + ow;
                f(yi, xi, wi);
              }
    }
}

inline Vec RefConv2d(const ConvCase& k, const Vec& x, const Vec& w, const Vec& b) {
  const ConvDims d = ConvDimsOf(k);
  Vec y(d.n * d.o * d.oh * d.ow, 0.0);
  if (!b.empty()) {
    for (size_t i = 0; i < y.size(); ++i) y[i] = b[(i / (d.oh * d.ow)) % d.o];
  }
  ForEachConvTap(k, [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += x[xi] * w[wi]; });
  return y;
}

// ---------------------------------------------------------------- batch norm

// The eps of every batch-norm reference (and of torch.nn.BatchNorm2d).
inline constexpr double kBnEps = 1e-5;

struct BnDims {
  int64_t n, c, l;
};
inline BnDims BnDimsOf(const Shape& s) {
  int64_t l = 1;
  for (size_t i = 2; i < s.size(); ++i) l *= s[i];
  return {s[0], s[1], l};
}

struct RefBnOut {
  Vec y, mean, var;  // var biased
};

// Training mode when rm is empty, else eval with (rm, rv).
inline RefBnOut RefBatchNorm(const Shape& shape, const Vec& x, const Vec& w, const Vec& b, const Vec& rm = {},
                     const Vec& rv = {}) {
  const BnDims d = BnDimsOf(shape);
  RefBnOut o{Vec(x.size()), Vec(d.c), Vec(d.c)};
  for (int64_t c = 0; c < d.c; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.l; ++i) m += x[(n * d.c + c) * d.l + i];
    m /= d.n * d.l;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.l; ++i) v += std::pow(x[(n * d.c + c) * d.l + i] - m, 2);
    v /= d.n * d.l;
    o.mean[c] = m;
    o.var[c] = v;
    const double mu = rm.empty() ? m : rm[c];
    const double rs = 1 / std::sqrt((rv.empty() ? v : rv[c]) + kBnEps);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.l; ++i) {
        const int64_t k = (n * d.c + c) * d.l + i;
        o.y[k] = (x[k] - mu) * rs * w[c] + b[c];
      }
  }
  return o;
}

// ---------------------------------------------------------------- pooling

inline int64_t PoolOut(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// Max pooling reference; also returns each output's argmax (ih W + iw).
inline Vec RefMax(const Shape& x_shape, const Vec& x, const Pool2dOptions& o, std::vector<int64_t>* arg = nullptr) {
  const int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
  const int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const int64_t oh = PoolOut(h, o.kernel[0], sh, o.padding[0], o.dilation[0]);
  const int64_t ow = PoolOut(w, o.kernel[1], sw, o.padding[1], o.dilation[1]);
  Vec y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int64_t a = 0; a < o.kernel[0]; ++a)
          for (int64_t b = 0; b < o.kernel[1]; ++b) {
            const int64_t ih = i * sh - o.padding[0] + a * o.dilation[0];
            const int64_t iw = j * sw - o.padding[1] + b * o.dilation[1];
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            if (x[(p * h + ih) * w + iw] > best) {
              best = x[(p * h + ih) * w + iw];
              bi = ih * w + iw;
            }
          }
        y.push_back(best);
        if (arg) arg->push_back(bi);
      }
  return y;
}

// Average over explicit windows [r0, r1) x [c0, c1) with a divisor.
struct Win {
  int64_t r0, r1, c0, c1, div;
};

inline Vec RefAvgWindows(const Shape& x_shape, const Vec& x, int64_t oh, int64_t ow,
                  const std::function<Win(int64_t, int64_t)>& win) {
  const int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
  Vec y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const Win v = win(i, j);
        double s = 0;
        for (int64_t a = v.r0; a < v.r1; ++a)
          for (int64_t b = v.c0; b < v.c1; ++b) s += x[(p * h + a) * w + b];
        y.push_back(s / v.div);
      }
  return y;
}

inline Vec RefAvg(const Shape& xs, const Vec& x, const Pool2dOptions& o) {
  const int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const int64_t oh = PoolOut(xs[2], o.kernel[0], sh, o.padding[0], 1), ow = PoolOut(xs[3], o.kernel[1], sw, o.padding[1], 1);
  return RefAvgWindows(xs, x, oh, ow, [&](int64_t i, int64_t j) {
    // torch: hstart = i s - p, hend = min(hstart + k, H + p), pool = (hend - hstart)(wend - wstart),
    // then clip to [0, H).
    int64_t r0 = i * sh - o.padding[0], r1 = std::min(r0 + o.kernel[0], xs[2] + o.padding[0]);
    int64_t c0 = j * sw - o.padding[1], c1 = std::min(c0 + o.kernel[1], xs[3] + o.padding[1]);
    const int64_t pool = (r1 - r0) * (c1 - c0);
    r0 = std::max<int64_t>(r0, 0), c0 = std::max<int64_t>(c0, 0);
    r1 = std::min(r1, xs[2]), c1 = std::min(c1, xs[3]);
    return Win{r0, r1, c0, c1, o.count_include_pad ? pool : (r1 - r0) * (c1 - c0)};
  });
}

inline Vec RefAdaptive(const Shape& xs, const Vec& x, int64_t oh, int64_t ow) {
  return RefAvgWindows(xs, x, oh, ow, [&](int64_t i, int64_t j) {
    const int64_t r0 = static_cast<int64_t>(std::floor(double(i) * xs[2] / oh));
    const int64_t r1 = static_cast<int64_t>(std::ceil(double(i + 1) * xs[2] / oh));
    const int64_t c0 = static_cast<int64_t>(std::floor(double(j) * xs[3] / ow));
    const int64_t c1 = static_cast<int64_t>(std::ceil(double(j + 1) * xs[3] / ow));
    return Win{r0, r1, c0, c1, (r1 - r0) * (c1 - c0)};
  });
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_IMAGE_REFERENCE_H_
