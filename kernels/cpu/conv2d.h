// CPU implementation behind kernels/conv2d.h: im2col + Eigen GEMM.
//
// Note [Conv2d as GEMM]
// For a chunk of S consecutive samples and one group g, im2col writes
//   col [K = C/g KH KW, L = S OH OW],  col[(c, kh, kw), (s, oh, ow)] =
//       x[n0 + s, g C/g + c, oh sh - ph + kh dh, ow sw - pw + kw dw]   (0 outside)
// and then
//   forward        Y  [O/g, L] = W_g [O/g, K] col                  -> y[n0 + s, g O/g + o, oh, ow]
//   weight grad    dW_g [O/g, K] += dY [O/g, L] col^T               (summed over chunks in order)
//   input grad     dcol [K, L] = W_g^T dY, then col2im adds dcol back onto dx
// so every multiply-add is a GEMM of the one fp32 kernel (kernels/cpu/gemm.h)
// whose long side L spans several samples: late ResNet layers with 4x4 maps
// still get GEMMs of useful width. S is the largest count with K L <=
// kConvColBudget floats (at least 1), a function of the shapes only; chunks
// and groups run in order. im2col, col2im and the copies between [O/g, L] and
// NCHW run on OpenMP threads over disjoint outputs; each GEMM runs as fixed
// blocks of its output on OpenMP threads, each block a single-threaded Eigen
// GEMM (Note [Conv2d GEMM threads] in conv2d.cc), so results are bitwise the
// same for any thread count.
//
// Every pointer is a contiguous f32 buffer: x [N, C, H, W], w [O, C/g, KH, KW],
// y, dy [N, O, OH, OW], dx like x, dw like w, bias, db [O].
#ifndef ZEROSHARD_KERNELS_CPU_CONV2D_H_
#define ZEROSHARD_KERNELS_CPU_CONV2D_H_

#include <cstdint>

#include "zeroshard/kernels/math/conv_geometry.h"

namespace zeroshard::cpu {

// Floats of one im2col chunk at most (16 MiB), unless one sample needs more.
inline constexpr int64_t kConvColBudget = int64_t{1} << 22;

// Samples per im2col chunk for this geometry.
int64_t Conv2dChunkSamples(const Conv2dGeometry& g);

// bias may be null.
void Conv2dForward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                   float* y);

// dx (overwritten), dw and db (written, or added to when `accumulate`) may each be null.
void Conv2dBackward(const Conv2dGeometry& g, const float* dy, const float* x, const float* w,
                    float* dx, float* dw, float* db, bool accumulate);

// The im2col matrix of samples [n0, n0 + s) and group `group`: col [K, s OH OW].
void Im2Col(const Conv2dGeometry& g, const float* x, int64_t n0, int64_t s, int64_t group,
            float* col);
// Adds col [K, s OH OW] back onto dx (the transpose of Im2Col).
void Col2ImAdd(const Conv2dGeometry& g, const float* col, int64_t n0, int64_t s, int64_t group,
               float* dx);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_CONV2D_H_
