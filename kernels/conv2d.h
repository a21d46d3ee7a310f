// 2-D convolution over NCHW images (torch.nn.functional.conv2d): forward, and
// the backward's input, weight and bias gradients, with stride, padding,
// dilation and groups (depthwise when groups == C).
//
//   // x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] -> y [N, O, OH, OW]
//   Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
//   ZS_ASSIGN_OR_RETURN(Tensor y, Conv2dForward(x, w, b, o));
//   // dx overwritten; dweight and dbias added into the existing gradients:
//   ZS_RETURN_IF_ERROR(Conv2dBackward(dy, x, w, o, dx, dw, db, GradMode::kAccumulate));
//
// OH = floor((H + 2 padding - dilation (KH - 1) - 1) / stride) + 1, likewise OW.
//
// CPU algorithm (Note [Conv2d as GEMM], kernels/cpu/conv2d.h): im2col of a
// chunk of samples into a [C/g KH KW, S OH OW] matrix, then one Eigen GEMM per
// group (kernels/cpu/gemm.h); the weight gradient is a GEMM against the same
// matrix, the input gradient a GEMM followed by col2im. Chunks and GEMM blocks
// depend only on the shapes, so results are bitwise the same for any thread
// count (instruction sets differ by rounding: their GEMM kernels differ).
//
// CUDA: cuDNN (kernels/cuda/cudnn_ops.h), or where cuDNN does not run (the
// CPU simulator of the device; forced by CudnnConvPath kOwn) our direct
// kernels (kernels/cuda/conv2d_launch.h: a thread per output, a block per
// weight-gradient element), fp32 on f32 copies of the operands.
//
// Rules (each violation is an InvalidArgument saying what was found):
// - x, y, dy, dx are 4-D; weight is [O, C / groups, KH, KW]; groups divides
//   C and O; bias, dbias are [O]; stride, dilation >= 1, padding >= 0; the
//   dilated kernel fits the padded input (OH, OW >= 1).
// - Float data, any mix of f32/bf16/f16, any strides; arithmetic is fp32 (16-bit
//   inputs widened), each result rounded once into its tensor's dtype.
// - Optional tensors may be undefined: bias in the forward; any of dx,
//   dweight, dbias in the backward (not computed).
// - Outputs may not overlap inputs.
#ifndef ZEROSHARD_KERNELS_CONV2D_H_
#define ZEROSHARD_KERNELS_CONV2D_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/kernels/grad_mode.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct Conv2dOptions {
  std::array<int64_t, 2> stride = {1, 1};    // (height, width)
  std::array<int64_t, 2> padding = {0, 0};   // zeros on both sides
  std::array<int64_t, 2> dilation = {1, 1};
  int64_t groups = 1;
  std::string ToString() const;
};

// y's shape [N, O, OH, OW] for x and weight shapes, or why they do not fit.
absl::StatusOr<Shape> Conv2dOutputShape(const Shape& x, const Shape& weight, const Conv2dOptions& o);

absl::Status Conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Conv2dOptions& o, const Tensor& y);
// Allocates y from x's allocator: x's dtype when x and weight agree, else f32.
absl::StatusOr<Tensor> Conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Conv2dOptions& o);

// dx is overwritten; `param_grad` says whether dweight and dbias are
// overwritten or added to.
absl::Status Conv2dBackward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Conv2dOptions& o, const Tensor& dx, const Tensor& dweight,
                            const Tensor& dbias, GradMode param_grad);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_CONV2D_H_
