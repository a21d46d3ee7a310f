// The cuDNN graph path's description of a convolution (kernels/cuda/conv_graph_desc.h),
// on the CPU: packed NCHW strides, the filter's C dim carrying the groups, the
// padding / stride / dilation arrays, a plan-cache key that tells every
// geometry field, dtype, pass and device apart, and the path switch.
#include "zeroshard/kernels/cuda/conv_graph_desc.h"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <string>
#include <vector>

namespace zeroshard::cuda {
namespace {

// x [2, 12, 9, 11], weight [6, 4, 3, 5] (groups 3), stride (2, 1), padding (1, 2), dilation (1, 2).
Conv2dGeometry Sample() {
  Conv2dGeometry g{};
  g.n = 2, g.c = 12, g.h = 9, g.w = 11;
  g.o = 6, g.kh = 3, g.kw = 5;
  g.sh = 2, g.sw = 1, g.ph = 1, g.pw = 2, g.dh = 1, g.dw = 2, g.groups = 3;
  g.oh = ConvOutputSize(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = ConvOutputSize(g.w, g.kw, g.sw, g.pw, g.dw);
  return g;
}

using Dims = std::array<int64_t, 4>;

TEST(ConvGraphDesc, PackedNchwStrides) {
  EXPECT_EQ(PackedNchwStrides({2, 3, 4, 5}), (Dims{60, 20, 5, 1}));
  EXPECT_EQ(PackedNchwStrides({1, 1, 1, 1}), (Dims{1, 1, 1, 1}));
  EXPECT_EQ(PackedNchwStrides({7, 1, 3, 1}), (Dims{3, 3, 1, 1}));
}

TEST(ConvGraphDesc, TensorsAndParameters) {
  const Conv2dGeometry g = Sample();
  ASSERT_EQ(g.oh, 5);  // floor((9 + 2 - 2 - 1) / 2) + 1
  ASSERT_EQ(g.ow, 7);  // floor((11 + 4 - 8 - 1) / 1) + 1
  const ConvGraphDesc d = ConvGraphDescFor(g);
  EXPECT_EQ(d.x.dims, (Dims{2, 12, 9, 11}));
  EXPECT_EQ(d.x.strides, (Dims{12 * 9 * 11, 9 * 11, 11, 1}));
  EXPECT_EQ(d.w.dims, (Dims{6, 4, 3, 5}));  // C / groups
  EXPECT_EQ(d.w.strides, (Dims{4 * 3 * 5, 3 * 5, 5, 1}));
  EXPECT_EQ(d.y.dims, (Dims{2, 6, 5, 7}));
  EXPECT_EQ(d.y.strides, (Dims{6 * 5 * 7, 5 * 7, 7, 1}));
  EXPECT_EQ(d.spatial_dims, 2);
  EXPECT_EQ(d.padding, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(d.strides, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(d.dilations, (std::vector<int64_t>{1, 2}));
}

TEST(ConvGraphDesc, DepthwiseFilterHasOneChannel) {
  Conv2dGeometry g{};
  g.n = 1, g.c = 8, g.h = 5, g.w = 5, g.o = 8, g.kh = 3, g.kw = 3;
  g.sh = g.sw = g.dh = g.dw = 1, g.ph = g.pw = 1, g.groups = 8;
  g.oh = g.ow = 5;
  const ConvGraphDesc d = ConvGraphDescFor(g);
  EXPECT_EQ(d.w.dims, (Dims{8, 1, 3, 3}));
  EXPECT_EQ(d.w.strides, (Dims{9, 9, 3, 1}));
  EXPECT_EQ(d.x.dims[1] / d.w.dims[1], g.groups);  // how cuDNN infers the groups
}

TEST(ConvGraphDesc, KeyTellsEveryFieldApart) {
  const Conv2dGeometry base = Sample();
  std::set<std::string> keys;
  keys.insert(ConvGraphKey(ConvGraphPass::kForward, 0, base, DType::kF32));
  int64_t Conv2dGeometry::*fields[] = {&Conv2dGeometry::n,  &Conv2dGeometry::c,  &Conv2dGeometry::h,
                                       &Conv2dGeometry::w,  &Conv2dGeometry::o,  &Conv2dGeometry::kh,
                                       &Conv2dGeometry::kw, &Conv2dGeometry::oh, &Conv2dGeometry::ow,
                                       &Conv2dGeometry::sh, &Conv2dGeometry::sw, &Conv2dGeometry::ph,
                                       &Conv2dGeometry::pw, &Conv2dGeometry::dh, &Conv2dGeometry::dw,
                                       &Conv2dGeometry::groups};
  for (auto field : fields) {
    Conv2dGeometry g = base;
    g.*field += 1;
    EXPECT_TRUE(keys.insert(ConvGraphKey(ConvGraphPass::kForward, 0, g, DType::kF32)).second)
        << ConvGraphKey(ConvGraphPass::kForward, 0, g, DType::kF32);
  }
  // Swapping a field pair must not collide either (e.g. sh <-> sw).
  Conv2dGeometry swapped = base;
  std::swap(swapped.ph, swapped.pw);
  EXPECT_TRUE(keys.insert(ConvGraphKey(ConvGraphPass::kForward, 0, swapped, DType::kF32)).second);
  for (DType d : {DType::kBF16, DType::kF16}) {
    EXPECT_TRUE(keys.insert(ConvGraphKey(ConvGraphPass::kForward, 0, base, d)).second);
  }
  for (ConvGraphPass p : {ConvGraphPass::kBackwardData, ConvGraphPass::kBackwardFilter}) {
    EXPECT_TRUE(keys.insert(ConvGraphKey(p, 0, base, DType::kF32)).second);
  }
  EXPECT_TRUE(keys.insert(ConvGraphKey(ConvGraphPass::kForward, 1, base, DType::kF32)).second);
  // And the same call gives the same key.
  EXPECT_EQ(ConvGraphKey(ConvGraphPass::kForward, 0, base, DType::kF32),
            ConvGraphKey(ConvGraphPass::kForward, 0, Sample(), DType::kF32));
}

TEST(ConvGraphDesc, PathNamesAndSwitch) {
  for (CudnnConvPath p : {CudnnConvPath::kAuto, CudnnConvPath::kGraph, CudnnConvPath::kLegacy, CudnnConvPath::kOwn}) {
    EXPECT_EQ(ParseCudnnConvPath(CudnnConvPathName(p)), p);
  }
  EXPECT_FALSE(ParseCudnnConvPath("cudnn").has_value());
  EXPECT_FALSE(ParseCudnnConvPath("").has_value());
  const CudnnConvPath before = GetCudnnConvPath();
  SetCudnnConvPath(CudnnConvPath::kLegacy);
  EXPECT_EQ(GetCudnnConvPath(), CudnnConvPath::kLegacy);
  SetCudnnConvPath(CudnnConvPath::kGraph);
  EXPECT_EQ(GetCudnnConvPath(), CudnnConvPath::kGraph);
  SetCudnnConvPath(before);
}

TEST(ConvGraphDesc, PassCounts) {
  const CudnnConvPathCounts before = GetCudnnConvPathCounts();
  CountCudnnConvPass(true);
  CountCudnnConvPass(false);
  CountCudnnConvPass(false);
  const CudnnConvPathCounts after = GetCudnnConvPathCounts();
  EXPECT_EQ(after.graph - before.graph, 1);
  EXPECT_EQ(after.legacy - before.legacy, 2);
}

}  // namespace
}  // namespace zeroshard::cuda
