// Per-element and per-row-state math of softmax, log-softmax and the fused
// cross-entropy, shared by the CPU kernels (kernels/cpu/softmax.cc,
// kernels/cpu/cross_entropy.cc) and a future CUDA twin.
//
//   // forward, per row: m = max(x), s = sum(exp(x - m))
//   y = SoftmaxElement(x, m, 1.0f / s);          // exp(x - m) / s
//   y = LogSoftmaxElement(x, m, LogF(s));        // (x - m) - log(s)
//   // backward, per row: dot = sum(dy * y) (softmax) or sum(dy) (log-softmax)
//   dx = SoftmaxGradElement(y, dy, dot);         // y (dy - dot)
//   dx = LogSoftmaxGradElement(y, dy, sum_dy);   // dy - exp(y) sum_dy
//   // cross-entropy, per row: dlogit = (softmax - onehot) * dloss
//   d = CrossEntropyGradElement(x, lse, onehot, dloss);
//
// Numerical stability: exponents are always taken of x - max(x) <= 0 (or of
// x - logsumexp <= 0), so nothing overflows; a row with a NaN gives NaN, a row
// that is all -Inf gives NaN (0/0), as in PyTorch.
#ifndef ZEROSHARD_KERNELS_MATH_SOFTMAX_OPS_H_
#define ZEROSHARD_KERNELS_MATH_SOFTMAX_OPS_H_

#include "zeroshard/kernels/math/fast_math.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline float MaxF(float a, float b) { return a > b ? a : b; }

ZS_HOST_DEVICE inline float SoftmaxElement(float x, float row_max, float inv_sum) {
  return ExpF(x - row_max) * inv_sum;
}

// (x - max) - log(sum) rather than x - logsumexp: x - max is exact for x near
// the maximum, and rounding max + log(sum) first would cost up to an ulp of
// the max (6e-5 at 1000).
ZS_HOST_DEVICE inline float LogSoftmaxElement(float x, float row_max, float log_sum) {
  return (x - row_max) - log_sum;
}

ZS_HOST_DEVICE inline float SoftmaxGradElement(float y, float dy, float dot) { return y * (dy - dot); }

ZS_HOST_DEVICE inline float LogSoftmaxGradElement(float y, float dy, float sum_dy) {
  return dy - ExpF(y) * sum_dy;
}

// (softmax(x) - onehot) * dloss, with softmax(x) = exp(x - logsumexp).
ZS_HOST_DEVICE inline float CrossEntropyGradElement(float x, float logsumexp, float onehot,
                                                    float dloss) {
  return (ExpF(x - logsumexp) - onehot) * dloss;
}

// Online softmax state (Milakov & Gimelshein): the running maximum of a
// stream of values and the sum of exp(value - max). Two states merge into the
// state of the concatenated streams, in any grouping (a CUDA block reduces
// with it; the CPU kernels merge per block of a row).
struct MaxSum {
  float max;
  float sum;
};

// The factor that moves a sum taken relative to `old_max` to `new_max` >= old_max.
// Equal maxima (including both -Inf, where exp(-Inf - -Inf) would be NaN) give 1.
ZS_HOST_DEVICE inline float RescaleFactor(float old_max, float new_max) {
  return old_max == new_max ? 1.0f : ExpF(old_max - new_max);
}

ZS_HOST_DEVICE inline MaxSum MergeMaxSum(MaxSum a, MaxSum b) {
  const float m = MaxF(a.max, b.max);
  return MaxSum{m, a.sum * RescaleFactor(a.max, m) + b.sum * RescaleFactor(b.max, m)};
}

// log(sum(exp(x))) of the stream a state describes.
ZS_HOST_DEVICE inline float LogSumExp(MaxSum s) { return s.max + LogF(s.sum); }

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_SOFTMAX_OPS_H_
