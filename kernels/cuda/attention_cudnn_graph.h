// The cuDNN operation graphs of the fused attention (kernels/cuda/attention_cudnn.h),
// exposed so that they can be checked without a GPU: the builders only read
// the tensors' dims, strides and dtype, so CPU tensors of the real shapes and
// strides stand in for device ones, and CudnnGraph::FinalizeGraph(nullptr)
// has cuDNN itself check every tensor, operation and the whole graph
// (tests/kernels/cudnn_graph_finalize_test.cc). CUDA builds only.
//
//   CudnnGraph g;
//   ZS_RETURN_IF_ERROR(BuildCudnnAttentionForwardGraph(g, dims, q, k, v, out, lse));
//   ZS_RETURN_IF_ERROR(g.FinalizeGraph(/*handle=*/nullptr));   // or g.Build(handle) on a GPU
//
// Shapes as attention_cudnn.h: q, out, dout, dq [B, H, T, D], k, v, dk, dv
// [B, Hkv, T, D] with Hkv dividing H (bf16 or f16, any strides with unit
// stride in D), lse f32 [B, H, T]. The
// graphs and the unique ids they bind are described at the top of
// attention_cudnn.cc.
#ifndef ZEROSHARD_KERNELS_CUDA_ATTENTION_CUDNN_GRAPH_H_
#define ZEROSHARD_KERNELS_CUDA_ATTENTION_CUDNN_GRAPH_H_

#include "absl/status/status.h"
#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/cudnn_graph.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cuda {

// Adds the forward graph (S = Q K^T scale, causal mask, softmax with stats,
// O = P V) to the empty `g`.
absl::Status BuildCudnnAttentionForwardGraph(CudnnGraph& g, const AttentionLaunchDims& d,
                                             const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& lse);

// Adds the backward graph (dQ, dK, dV from dO, O and the stats) to the empty `g`.
absl::Status BuildCudnnAttentionBackwardGraph(CudnnGraph& g, const AttentionLaunchDims& d,
                                              const Tensor& dout, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& out, const Tensor& lse,
                                              const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_ATTENTION_CUDNN_GRAPH_H_
