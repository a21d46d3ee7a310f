// CPU implementation behind kernels/attention.h. Arguments are validated by
// the op entry: q, out, dout, dq are [B, H, T, D] and k, v, dk, dv
// [B, Hkv, T, D] with Hkv dividing H (Note [Grouped-query attention]), of one
// float dtype with any strides (no stride 0 in outputs); lse is f32 [B, H, T].
#ifndef ZEROSHARD_KERNELS_CPU_ATTENTION_H_
#define ZEROSHARD_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

struct AttentionDims {
  int64_t batch = 0;
  int64_t heads = 0;     // H, of q
  int64_t kv_heads = 0;  // Hkv, of k and v: divides H
  int64_t seq = 0;       // T
  int64_t head_dim = 0;  // D
  float scale = 1.0f;
  bool causal = true;
};

void AttentionForward(const AttentionDims& dims, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& out, const Tensor& lse);

void AttentionBackward(const AttentionDims& dims, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_ATTENTION_H_
