// Which attention implementation runs for CUDA tensors: cuDNN's fused
// scaled-dot-product attention (kernels/cuda/attention_cudnn.h) when it takes
// the call, else our tensor-core kernel (kernels/cuda/attention_tc.cu) when it
// takes the call, else our scalar kernel (kernels/cuda/attention_launch.h). Plain C++,
// tested on the CPU (tests/kernels/attention_online_test.cc).
//
//   AttentionCall call = DescribeAttentionCall(...);
//   std::string why = CudnnAttentionRefusal(call, info);   // "" = cuDNN takes it
//
// cuDNN's flash-attention engines (cuDNN 9 on sm_80 / sm_90) take: bf16 or
// f16 (f32 is ours only), head dim D a multiple of 8 and at most 128 (256 on
// sm_90 and later from cuDNN 9.5), unit stride along D in every operand, and
// 16-byte aligned pointers and strides; k and v may have fewer heads than q
// (Hkv dividing H, grouped-query attention), as in our kernel. Everything
// else, and any call whose plan cuDNN refuses when it is built, runs our
// tensor-core kernel where it takes the call (bf16/f16, D a multiple of 16 up to 128, the same
// layout rules), else our scalar kernel, which takes every float dtype, any
// strides and D <= kAttentionMaxHeadDim.
#ifndef ZEROSHARD_KERNELS_CUDA_ATTENTION_SELECT_H_
#define ZEROSHARD_KERNELS_CUDA_ATTENTION_SELECT_H_

#include <cstdint>
#include <string>

#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard::cuda {

// What the choice depends on.
struct AttentionCall {
  DType dtype = DType::kF32;
  int64_t head_dim = 0;
  int64_t seq = 0;
  int64_t heads = 1;     // H, of q
  int64_t kv_heads = 1;  // Hkv, of k and v (Note [Grouped-query attention])
  bool unit_stride_d = true;  // every operand has stride 1 along D (or D == 1)
  bool aligned = true;        // every pointer and stride (in bytes) a multiple of 16
};

// The cuDNN this binary runs with: `built` is false in a CPU-only build or
// when cuDNN is not loaded; `version` as CUDNN_VERSION (9.19.0 = 91900);
// `sm` the device's compute capability as 10 * major + minor.
struct CudnnAttentionInfo {
  bool built = false;
  int64_t version = 0;
  int sm = 0;
};

// What cuDNN's fused attention and our tensor-core kernel both need: Hkv
// dividing H, unit stride along D, 16-byte aligned pointers and strides
// (their 16-byte loads). Empty when the call has it; else why not.
inline std::string HeadsAndLayoutRefusal(const AttentionCall& c) {
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0) {
    return "k and v have " + std::to_string(c.kv_heads) + " heads, which does not divide q's " +
           std::to_string(c.heads);
  }
  if (!c.unit_stride_d) return "an operand is strided along the head dim";
  if (!c.aligned) return "an operand's pointer or strides are not 16-byte aligned";
  return "";
}

// Empty when cuDNN's fused attention may take the call; else the reason it
// does not (for error messages and logs).
inline std::string CudnnAttentionRefusal(const AttentionCall& c, const CudnnAttentionInfo& info) {
  if (!info.built) return "cuDNN is not available in this build";
  if (info.version < 90000) return "cuDNN " + std::to_string(info.version) + " is older than 9.0";
  if (info.sm < 80) return "the GPU is sm_" + std::to_string(info.sm) + ", cuDNN's fused attention needs sm_80 or later";
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF16) {
    return std::string("dtype ") + std::string(DTypeName(c.dtype)) + ", cuDNN's fused attention takes bf16 or f16";
  }
  const int64_t max_d = info.sm >= 90 && info.version >= 90500 ? 256 : 128;
  if (c.head_dim % 8 != 0 || c.head_dim > max_d) {
    return "head dim " + std::to_string(c.head_dim) + ", cuDNN's fused attention takes multiples of 8 up to " +
           std::to_string(max_d);
  }
  if (c.seq < 1) return "empty sequence";
  // cuDNN's SDPA takes h_k = h_v dividing h_q (GQA, MQA); the op entry checks
  // it, so this only guards a caller that did not.
  return HeadsAndLayoutRefusal(c);
}

// Empty when our tensor-core kernel (kernels/cuda/attention_tc.cu) takes the
// call: bf16 or f16, head dim a multiple of 16 up to 128, unit stride along D and 16-byte
// aligned pointers and strides (its 16-byte tile loads), Hkv dividing H.
inline std::string TensorCoreAttentionRefusal(const AttentionCall& c) {
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF16) {
    return std::string("dtype ") + std::string(DTypeName(c.dtype)) + ", our tensor-core kernel takes bf16 or f16";
  }
  if (!AttentionTcHeadDim(c.head_dim)) {
    return "head dim " + std::to_string(c.head_dim) + ", our tensor-core kernel takes multiples of 16 up to 128";
  }
  return HeadsAndLayoutRefusal(c);
}

// Empty when our scalar kernel takes the call.
inline std::string OwnAttentionRefusal(const AttentionCall& c) {
  if (c.head_dim > kAttentionMaxHeadDim) {
    return "head dim " + std::to_string(c.head_dim) + ", our CUDA kernel takes at most " +
           std::to_string(kAttentionMaxHeadDim);
  }
  return "";
}

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_ATTENTION_SELECT_H_
