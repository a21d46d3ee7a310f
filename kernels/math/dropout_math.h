// The per-element rule of dropout, shared by the CPU and CUDA kernels.
//
//   const DropoutParams dp = MakeDropoutParams(0.1);          // on the host, once per call
//   y = DropoutApply(x, PhiloxWordAt(seed, offset + i), dp);   // x / 0.9 or 0
//
// Element i of a call with stream {seed, offset} and drop probability p:
//   w    = word(offset + i) of the seed's Philox stream   (kernels/math/philox.h)
//   keep = PhiloxUniform(w) < keep_prob,   keep_prob = float(1 - p)
//   y    = keep ? x * scale : 0,           scale = float(1 / (1 - p)), 0 when p = 1
// PhiloxUniform takes 2^24 equally likely values k / 2^24, so an element is
// kept with probability ceil(keep_prob * 2^24) / 2^24, within 2^-24 of 1 - p.
// p = 0 keeps everything with scale 1 (the identity, bit for bit); p = 1 keeps
// nothing. A dropped element is exactly 0 whatever x is (also Inf or NaN), so
// backward, which applies the same rule to dy, passes no gradient through it.
#ifndef ZEROSHARD_KERNELS_MATH_DROPOUT_MATH_H_
#define ZEROSHARD_KERNELS_MATH_DROPOUT_MATH_H_

#include <cstdint>

#include "zeroshard/kernels/math/philox.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

struct DropoutParams {
  float keep_prob;  // float(1 - p)
  float scale;      // float(1 / (1 - p)); 0 when p == 1
};

// `p` must be in [0, 1] (the op entries check).
ZS_HOST_DEVICE inline DropoutParams MakeDropoutParams(double p) {
  const double keep = 1.0 - p;
  return DropoutParams{static_cast<float>(keep), keep > 0.0 ? static_cast<float>(1.0 / keep) : 0.0f};
}

ZS_HOST_DEVICE inline bool DropoutKeep(uint32_t word, const DropoutParams& dp) {
  return PhiloxUniform(word) < dp.keep_prob;
}

ZS_HOST_DEVICE inline float DropoutApply(float x, uint32_t word, const DropoutParams& dp) {
  return DropoutKeep(word, dp) ? x * dp.scale : 0.0f;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_DROPOUT_MATH_H_
