// Host launchers of our CUDA convolution kernels (kernels/cuda/conv2d.cu),
// callable from plain C++: the path of the Conv2d entry where cuDNN does not
// run (the CPU simulator of the device) or when forced (CudnnConvPath::kOwn,
// kernels/cuda/conv_graph_desc.h); cuDNN is the GPU's path otherwise.
// Contiguous f32 NCHW tensors: x, dx [N, C, H, W], weight, dweight
// [O, C/groups, KH, KW], y, dy [N, O, OH, OW], bias, dbias [O] (bias may be
// null). Index math is kernels/math/conv_geometry.h, the CPU kernels'.
//
// Direct kernels, each output a sum in a fixed order (no atomics, the same
// bits every run):
//   forward         one thread per y element:  bias + sum over (c, kh, kw) of x w
//   backward data   one thread per dx element: sum over (o, kh, kw) of dy w,
//                   gathered through ConvTapOutput
//   backward weight one block per dweight element: sum over (n, oh, ow) of dy x,
//                   a strided per-thread fp32 sum and a block tree
//   backward bias   one block per output channel: sum over (n, oh, ow) of dy
// `accumulate`: dweight and dbias are added to instead of written.
// Enqueued on `stream`; returns a cudaError_t as int.
#ifndef ZEROSHARD_KERNELS_CUDA_CONV2D_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_CONV2D_LAUNCH_H_

namespace zeroshard {
// kernels/math/conv_geometry.h (declared only: a CPU-only build's stand-in
// launchers link without the geometry's target).
struct Conv2dGeometry;
}  // namespace zeroshard

namespace zeroshard::cuda {

int LaunchConv2dForward(const Conv2dGeometry& g, const float* x, const float* weight, const float* bias,
                        float* y, void* stream);
int LaunchConv2dBackwardData(const Conv2dGeometry& g, const float* dy, const float* weight, float* dx,
                             void* stream);
int LaunchConv2dBackwardWeight(const Conv2dGeometry& g, const float* dy, const float* x, float* dweight,
                               bool accumulate, void* stream);
int LaunchConv2dBackwardBias(const Conv2dGeometry& g, const float* dy, float* dbias, bool accumulate,
                             void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CONV2D_LAUNCH_H_
