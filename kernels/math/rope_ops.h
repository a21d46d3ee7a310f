// Per-element math of the rotary position embedding (rotate-half convention,
// Hugging Face Llama's `rotate_half`), shared by the CPU kernel
// (kernels/cpu/rope.cc) and the CUDA one (kernels/cuda/rope.cu).
//
// A head vector x [D] is D/2 pairs (x[i], x[i + D/2]), each rotated by the
// angle a = pos * inv_freq[i], with c = cos a and s = sin a from the tables:
//   RopeRotateLo(x[i], x[i + D/2], c, s) = x[i] c - x[i + D/2] s   -> out[i]
//   RopeRotateHi(x[i], x[i + D/2], c, s) = x[i + D/2] c + x[i] s   -> out[i + D/2]
// The inverse rotation (the backward) passes -s.
#ifndef ZEROSHARD_KERNELS_MATH_ROPE_OPS_H_
#define ZEROSHARD_KERNELS_MATH_ROPE_OPS_H_

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline float RopeRotateLo(float lo, float hi, float c, float s) { return lo * c - hi * s; }
ZS_HOST_DEVICE inline float RopeRotateHi(float lo, float hi, float c, float s) { return hi * c + lo * s; }

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_ROPE_OPS_H_
