// The CUDA cases of the NCHW image ops (kernels/conv2d.h), through cuDNN.
// Arguments are validated by the op entries; these calls only map them onto
// cuDNN descriptors. In a build without CUDA (make CUDA=0) they return
// Unimplemented (kernels/cuda/no_cuda_conv2d_cudnn.cc).
#ifndef ZEROSHARD_KERNELS_CUDA_CONV2D_CUDNN_H_
#define ZEROSHARD_KERNELS_CUDA_CONV2D_CUDNN_H_

#include "absl/status/status.h"
#include "kernels/math/conv_geometry.h"
#include "runtime/tensor.h"

namespace zeroshard::cuda {

// y = conv(x, weight) + bias (bias may be undefined).
absl::Status CudnnConv2dForward(const Conv2dGeometry& g, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const Tensor& y);
// dx overwritten; dweight, dbias written or (accumulate) added to; any may be undefined.
absl::Status CudnnConv2dBackward(const Conv2dGeometry& g, const Tensor& dy, const Tensor& x,
                                 const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias, bool accumulate);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CONV2D_CUDNN_H_
