// The CUDA cases of the NCHW image ops (kernels/conv2d.h, batchnorm.h,
// pool2d.h). Convolutions go through cuDNN's graph (backend) API: one graph
// per pass, geometry, dtype and device, built once and cached, the engine the
// first config of cuDNN's heuristics that builds, the workspace taken from the
// tensors' allocator; when no engine takes the graph they fall back to the
// legacy descriptor API (the algorithm cuDNN's heuristics rank first among
// those whose workspace fits). SetCudnnConvPath / ZEROSHARD_CUDNN_CONV
// (kernels/cuda/conv_graph_desc.h) force either path. BatchNorm (spatial mode)
// stays on the legacy API.
// Arguments are validated by the op entries; these calls only map them onto
// cuDNN descriptors. In a build without CUDA (make CUDA=0) they return
// Unimplemented (kernels/cuda/no_cuda_cudnn_ops.cc).
#ifndef ZEROSHARD_KERNELS_CUDA_CUDNN_OPS_H_
#define ZEROSHARD_KERNELS_CUDA_CUDNN_OPS_H_

#include "absl/status/status.h"
#include "zeroshard/kernels/cuda/conv_graph_desc.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cuda {

// y = conv(x, weight) + bias (bias may be undefined).
absl::Status CudnnConv2dForward(const Conv2dGeometry& g, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const Tensor& y);
// dx overwritten; dweight, dbias written or (accumulate) added to; any may be undefined.
absl::Status CudnnConv2dBackward(const Conv2dGeometry& g, const Tensor& dy, const Tensor& x,
                                 const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias, bool accumulate);

// x [N, C, H, W] (4-D only on CUDA); the statistics tensors are f32 [C] and
// contiguous; weight and bias f32 [C] (ones / zeros when undefined).
absl::Status CudnnBatchNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   bool training, double momentum, double eps, const Tensor& y,
                                   const Tensor& save_mean, const Tensor& save_rstd);
absl::Status CudnnBatchNormBackward(const Tensor& dy, const Tensor& x, const Tensor& save_mean,
                                    const Tensor& save_rstd, const Tensor& weight, bool training,
                                    const Tensor& dx, const Tensor& dweight,
                                    const Tensor& dbias, bool accumulate);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CUDNN_OPS_H_
