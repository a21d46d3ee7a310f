// The cuDNN operation graph of one convolution pass (kernels/cuda/cudnn_ops.cc's
// graph path), exposed so that it can be checked without a GPU:
// CudnnGraph::FinalizeGraph(nullptr) has cuDNN itself check the tensors, the
// convolution descriptor, the operation and the graph
// (tests/kernels/cudnn_graph_finalize_test.cc). CUDA builds only.
//
//   CudnnGraph graph;
//   ZS_RETURN_IF_ERROR(BuildConvGraph(graph, ConvGraphPass::kBackwardFilter, geometry, DType::kBF16));
//   ZS_RETURN_IF_ERROR(graph.FinalizeGraph(/*handle=*/nullptr));
//
// The tensors are ConvGraphDescFor(g)'s (kernels/cuda/conv_graph_desc.h),
// bound by unique id x = 1, w = 2, y = 3 (the backward passes: dx, dw, dy).
#ifndef ZEROSHARD_KERNELS_CUDA_CONV_CUDNN_GRAPH_H_
#define ZEROSHARD_KERNELS_CUDA_CONV_CUDNN_GRAPH_H_

#include "absl/status/status.h"
#include "zeroshard/kernels/cuda/conv_graph_desc.h"
#include "zeroshard/kernels/cuda/cudnn_graph.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard::cuda {

// Adds `pass`'s operation to the empty `graph` (f32, bf16 or f16 data, f32
// compute), and the numerical notes Build passes over for `dtype`.
absl::Status BuildConvGraph(CudnnGraph& graph, ConvGraphPass pass, const Conv2dGeometry& g,
                            DType dtype);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CONV_CUDNN_GRAPH_H_
