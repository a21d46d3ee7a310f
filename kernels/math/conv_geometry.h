// Index arithmetic of 2-D convolution and pooling windows over NCHW images,
// shared by the CPU kernels (kernels/cpu/conv2d.cc, pool2d.cc) and the CUDA
// twins: plain integer functions, no allocation, no Abseil.
//
//   // output size along one axis, as torch.nn.Conv2d / MaxPool2d (floor mode):
//   int64_t oh = ConvOutputSize(h, /*kernel=*/3, /*stride=*/2, /*pad=*/1, /*dilation=*/1);
//   // the input row that kernel row kh of output row oh reads (may be outside [0, h)):
//   int64_t ih = ConvInputIndex(oh, kh, stride, pad, dilation);
//
// Shapes: x [N, C, H, W], weight [O, C/groups, KH, KW], y [N, O, OH, OW];
// group g maps input channels [g C/groups, (g+1) C/groups) to output channels
// [g O/groups, (g+1) O/groups).
#ifndef ZEROSHARD_KERNELS_MATH_CONV_GEOMETRY_H_
#define ZEROSHARD_KERNELS_MATH_CONV_GEOMETRY_H_

#include <cstdint>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

// Every size of one convolution (all validated by the op entry).
struct Conv2dGeometry {
  int64_t n, c, h, w;     // x [N, C, H, W]
  int64_t o, kh, kw;      // weight [O, C / groups, KH, KW]
  int64_t oh, ow;         // y [N, O, OH, OW]
  int64_t sh, sw, ph, pw, dh, dw, groups;
  ZS_HOST_DEVICE int64_t cg() const { return c / groups; }           // input channels per group
  ZS_HOST_DEVICE int64_t og() const { return o / groups; }           // output channels per group
  ZS_HOST_DEVICE int64_t taps() const { return cg() * kh * kw; }     // GEMM K: C/g KH KW
  ZS_HOST_DEVICE int64_t out_plane() const { return oh * ow; }
  ZS_HOST_DEVICE int64_t in_plane() const { return h * w; }
  // Multiply-adds of the forward (the backward's data and weight parts each do as many).
  ZS_HOST_DEVICE int64_t macs() const { return n * o * oh * ow * taps(); }
};

// floor((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1; <= 0 when the
// (dilated) kernel does not fit the padded input.
ZS_HOST_DEVICE inline int64_t ConvOutputSize(int64_t in, int64_t kernel, int64_t stride,
                                             int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

ZS_HOST_DEVICE inline int64_t ConvInputIndex(int64_t out, int64_t k, int64_t stride, int64_t pad,
                                             int64_t dilation) {
  return out * stride - pad + k * dilation;
}

// The inverse of ConvInputIndex: the output along one axis whose tap k reads
// input `in`, i.e. o with o stride - pad + k dilation == in, or -1 when there
// is none in [0, out_size) (the backward passes gather through it).
ZS_HOST_DEVICE inline int64_t ConvTapOutput(int64_t in, int64_t k, int64_t stride, int64_t pad,
                                            int64_t dilation, int64_t out_size) {
  const int64_t t = in + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t o = t / stride;
  return o < out_size ? o : -1;
}

// The outputs o in [begin, end) whose tap k lands inside [0, in): the run of
// an im2col row that reads real input (the rest reads padding zeros).
struct OutputRange {
  int64_t begin, end;
};

ZS_HOST_DEVICE inline OutputRange ValidOutputs(int64_t in, int64_t out_size, int64_t k,
                                               int64_t stride, int64_t pad, int64_t dilation) {
  // o * stride - pad + k * dilation in [0, in)  <=>  o in [ceil(a / s), ceil((in + a') / s))
  const int64_t shift = pad - k * dilation;  // o * stride >= shift and o * stride < in + shift
  int64_t begin = shift <= 0 ? 0 : (shift + stride - 1) / stride;
  const int64_t limit = in + shift;  // o * stride < limit
  int64_t end = limit <= 0 ? 0 : (limit + stride - 1) / stride;
  if (end > out_size) end = out_size;
  if (begin > end) begin = end;
  return {begin, end};
}

// Average pooling's window along one axis for output o (torch.nn.AvgPool2d,
// floor mode): [start, end) clipped to the input, and the window length
// counted before clipping to the input but after clipping to the padded
// input (the divisor when count_include_pad).
struct PoolWindow {
  int64_t start, end, padded_len;
};

ZS_HOST_DEVICE inline PoolWindow AvgPoolWindow(int64_t o, int64_t in, int64_t kernel,
                                               int64_t stride, int64_t pad) {
  int64_t start = o * stride - pad;
  int64_t end = start + kernel;
  if (end > in + pad) end = in + pad;
  const int64_t padded_len = end - start;
  if (start < 0) start = 0;
  if (end > in) end = in;
  return {start, end, padded_len};
}

// Adaptive average pooling's window (torch.nn.AdaptiveAvgPool2d): output o of
// out_size covers [floor(o in / out_size), ceil((o + 1) in / out_size)).
ZS_HOST_DEVICE inline PoolWindow AdaptivePoolWindow(int64_t o, int64_t in, int64_t out_size) {
  const int64_t start = (o * in) / out_size;
  const int64_t end = ((o + 1) * in + out_size - 1) / out_size;
  return {start, end, end - start};
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_CONV_GEOMETRY_H_
