// The CUDA cases of the NCHW image ops (kernels/conv2d.h, batchnorm.h,
// pool2d.h). Convolutions go through cuDNN's graph (backend) API: one graph
// per pass, geometry, dtype and device, built once and cached, the engine the
// first config of cuDNN's heuristics that builds, the workspace taken from the
// tensors' allocator; when no engine takes the graph they fall back to the
// legacy descriptor API (the algorithm cuDNN's heuristics rank first among
// those whose workspace fits). SetCudnnConvPath / ZEROSHARD_CUDNN_CONV
// (kernels/cuda/conv_graph_desc.h) force either path. BatchNorm (spatial mode)
// stays on the legacy API.
// Where cuDNN cannot run (the CPU simulator of the device: no cuDNN handle
// without a real GPU) or when CudnnConvPath::kOwn is set, the op entries run
// our kernels instead (kernels/cuda/conv2d_launch.h, batchnorm_launch.h):
// UseOwnImageKernels.
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

// Whether the Conv2d and BatchNorm entries run our kernels instead of cuDNN on
// CUDA device `device`: CudnnConvPath kOwn, or kAuto on a device cuDNN cannot
// run on (the CPU simulator, whose device name starts with "cuda_sim"). False
// in a build without CUDA.
bool UseOwnImageKernels(int device);

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
