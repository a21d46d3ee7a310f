// What the cuDNN graph (backend) path of Conv2d asks cuDNN for, computed from
// a Conv2dGeometry without any cuDNN include, so the CPU tests can check it
// (tests/kernels/conv_graph_desc_test.cc), and the process-wide choice between
// that path and the legacy descriptor path (kernels/cuda/cudnn_ops.cc).
//
//   ConvGraphDesc d = ConvGraphDescFor(g);
//   // d.x {N, C, H, W} packed, d.w {O, C/groups, KH, KW}, d.y {N, O, OH, OW};
//   // d.padding {ph, pw} (pre = post), d.strides {sh, sw}, d.dilations {dh, dw}
//   std::string key = ConvGraphKey(ConvGraphPass::kForward, /*device=*/0, g, DType::kBF16);
//
//   SetCudnnConvPath(CudnnConvPath::kLegacy);   // tests; or ZEROSHARD_CUDNN_CONV=legacy
//   SetCudnnConvPath(CudnnConvPath::kOwn);      // our kernels instead of cuDNN; ZEROSHARD_CUDNN_CONV=own
#ifndef ZEROSHARD_KERNELS_CUDA_CONV_GRAPH_DESC_H_
#define ZEROSHARD_KERNELS_CUDA_CONV_GRAPH_DESC_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard::cuda {

// Dims and strides of one 4-D NCHW tensor of the graph.
struct ConvGraphTensor {
  std::array<int64_t, 4> dims{}, strides{};
};

struct ConvGraphDesc {
  ConvGraphTensor x, w, y;  // x [N, C, H, W], w [O, C / groups, KH, KW], y [N, O, OH, OW]
  // One entry per spatial dim (H, W); cuDNN's pre and post paddings are both `padding`.
  std::vector<int64_t> padding, strides, dilations;
  int64_t spatial_dims = 2;
};

// Row-major (packed NCHW) strides of `dims`.
std::array<int64_t, 4> PackedNchwStrides(const std::array<int64_t, 4>& dims);

// The graph's tensors (packed: the operands are made contiguous first) and
// convolution parameters. Groups appear only as the filter's C dim.
ConvGraphDesc ConvGraphDescFor(const Conv2dGeometry& g);

// Which operation one cached graph holds.
enum class ConvGraphPass { kForward, kBackwardData, kBackwardFilter };
absl::string_view ConvGraphPassName(ConvGraphPass pass);

// The plan-cache key: the pass, the device, every field of the geometry and the dtype.
std::string ConvGraphKey(ConvGraphPass pass, int device, const Conv2dGeometry& g, DType dtype);

// Which implementation the CUDA convolutions use: a cuDNN API, or our own
// kernels (kernels/cuda/conv2d_launch.h; BatchNorm follows: its cuDNN call or
// kernels/cuda/batchnorm_launch.h).
enum class CudnnConvPath {
  kAuto,    // the graph API; the legacy API when no engine takes the graph; our
            // kernels on a device cuDNN cannot run on (the CPU simulator)
  kGraph,   // the graph API, or an error saying why not
  kLegacy,  // the legacy descriptor API (cudnnConvolutionForward & co.)
  kOwn,     // our kernels, no cuDNN (convolution and BatchNorm)
};
absl::string_view CudnnConvPathName(CudnnConvPath path);
// "auto", "graph", "legacy", "own"; nullopt otherwise.
std::optional<CudnnConvPath> ParseCudnnConvPath(absl::string_view s);

// The process-wide path: set by SetCudnnConvPath, else ZEROSHARD_CUDNN_CONV
// read once (an unknown value counts as auto), else kAuto.
CudnnConvPath GetCudnnConvPath();
void SetCudnnConvPath(CudnnConvPath path);

// How many convolution passes (forward, backward-data, backward-filter each
// count one) ran through each API in this process, and through our kernels:
// tests check the forced path is the one that ran, and report what kAuto chose.
struct CudnnConvPathCounts {
  int64_t graph = 0, legacy = 0, own = 0;
};
CudnnConvPathCounts GetCudnnConvPathCounts();
void CountCudnnConvPass(bool graph);
void CountOwnConvPass();

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CONV_GRAPH_DESC_H_
