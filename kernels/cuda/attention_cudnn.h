// cuDNN's fused scaled-dot-product attention (flash attention), forward and
// backward, through the cuDNN 9 backend graph API (cudnnBackendCreateDescriptor
// ...; the cudnn-frontend header library is not used). The operation graphs
// are the ones cuDNN's flash-attention engines recognise (see
// attention_cudnn.cc and kernels/cuda/cudnn_graph.h); plans are built once per
// shape, dtype, strides and device and cached; the workspace comes from the
// operands' allocator.
//
//   if (CudnnAttentionRefusal(call, CudnnAttentionInfoFor(device)).empty()) {
//     absl::Status s = CudnnAttentionForward(dims, q, k, v, out, lse, stream);
//     if (absl::IsUnimplemented(s)) { ... cuDNN has no engine for it: use our kernel ... }
//   }
//
// Shapes are kernels/attention.h's: q, out, dout, dq [B, H, T, D] and k, v,
// dk, dv [B, Hkv, T, D] with Hkv dividing H (grouped-query attention; the plan
// cache keys on Hkv), bf16 or f16 with unit stride in D; lse f32 [B, H, T]
// (cuDNN's "stats": the rows' log-sum-exp of the scaled scores, natural log,
// the same quantity as ours, so forward and backward may come from different
// implementations).
//
// Errors: Unimplemented when cuDNN builds no plan for the call (the graph or
// shape is not supported by any engine: the caller falls back; the refusal is
// cached so the next call does not rebuild); other codes for real failures.
// A CPU-only build links a stand-in whose info says "not built".
#ifndef ZEROSHARD_KERNELS_CUDA_ATTENTION_CUDNN_H_
#define ZEROSHARD_KERNELS_CUDA_ATTENTION_CUDNN_H_

#include "absl/status/status.h"
#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/attention_select.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cuda {

// The cuDNN version and the device's compute capability (built = false in a
// CPU-only build, or when the device cannot be queried).
CudnnAttentionInfo CudnnAttentionInfoFor(int device);

absl::Status CudnnAttentionForward(const AttentionLaunchDims& dims, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& out,
                                   const Tensor& lse, void* stream);

absl::Status CudnnAttentionBackward(const AttentionLaunchDims& dims, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_ATTENTION_CUDNN_H_
