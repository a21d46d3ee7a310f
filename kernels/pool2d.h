// 2-D pooling over NCHW images: max (torch.nn.MaxPool2d, saving the argmax),
// average (AvgPool2d) and adaptive average (AdaptiveAvgPool2d), forward and
// backward.
//
//   Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};   // ResNet's stem
//   ZS_ASSIGN_OR_RETURN(Shape s, Pool2dOutputShape(x.shape(), o));
//   ZS_RETURN_IF_ERROR(MaxPool2dForward(x, o, y, indices));       // indices i64, like y
//   ZS_RETURN_IF_ERROR(MaxPool2dBackward(dy, indices, o, dx));
//   ZS_RETURN_IF_ERROR(AdaptiveAvgPool2dForward(x, y));            // y [N, C, 1, 1]: global average
//
// Windows (floor mode, as torch with ceil_mode=False; math/conv_geometry.h):
// - max: output (oh, ow) takes the largest x[ih, iw] over ih = oh sh - ph + i dh,
//   i < KH (likewise iw), skipping padding; NaN wins; ties keep the first in
//   row-major order. indices hold ih W + iw (torch's convention). Padding at
//   most half the kernel, so that every window holds a real value.
// - average: [oh sh - ph, + KH) clipped to the padded input, then to the input;
//   divided by the clipped-to-padded size (count_include_pad) or the number
//   of real values.
// - adaptive average: output oh of OH covers [floor(oh H / OH), ceil((oh+1) H / OH)).
// The backward passes are the exact transposes (dx overwritten). Float data of
// any dtype and strides, fp32 arithmetic, one rounding into the output.
#ifndef ZEROSHARD_KERNELS_POOL2D_H_
#define ZEROSHARD_KERNELS_POOL2D_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel = {2, 2};
  std::array<int64_t, 2> stride = {0, 0};  // 0: the kernel size (torch's default)
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};  // max pooling only
  bool count_include_pad = true;             // average pooling only
  std::string ToString() const;
};

absl::StatusOr<Shape> Pool2dOutputShape(const Shape& x, const Pool2dOptions& o);

// indices may be undefined (not saved); else i64 of y's shape.
absl::Status MaxPool2dForward(const Tensor& x, const Pool2dOptions& o, const Tensor& y,
                              const Tensor& indices);
// The options are the forward's (the CUDA kernel gathers through the windows).
absl::Status MaxPool2dBackward(const Tensor& dy, const Tensor& indices, const Pool2dOptions& o,
                               const Tensor& dx);

absl::Status AvgPool2dForward(const Tensor& x, const Pool2dOptions& o, const Tensor& y);
absl::Status AvgPool2dBackward(const Tensor& dy, const Pool2dOptions& o, const Tensor& dx);

// The output size is y's (dx's) last two dimensions; 1x1 is a global average.
absl::Status AdaptiveAvgPool2dForward(const Tensor& x, const Tensor& y);
absl::Status AdaptiveAvgPool2dBackward(const Tensor& dy, const Tensor& dx);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_POOL2D_H_
