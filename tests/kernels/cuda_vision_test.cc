// The CUDA image ops (cuDNN convolution and BatchNorm, our convolution and
// BatchNorm kernels of the path where cuDNN does not run, the pooling kernels)
// against their CPU twins on the same inputs: stride, padding, dilation,
// groups, f32 and bf16 (and f16 with each convolution path forced: the cuDNN
// graph API, the legacy one, ours), training and eval BatchNorm with running
// statistics, every pooling kind forward and backward. Skips without a
// device; on the simulator only our kernels run (cuDNN needs a real GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "zeroshard/kernels/batchnorm.h"
#include "zeroshard/kernels/conv2d.h"
#include "zeroshard/kernels/cuda/conv_graph_desc.h"
#include "zeroshard/kernels/pool2d.h"
#include "zeroshard/runtime/figures.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::GpuTol;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::Tol;

Tensor ToCpu(const Tensor& t) { return t.To(DefaultCpuAllocator()).value(); }

double MaxAbs(const Tensor& t) {
  double m = 0;
  const std::vector<double> values = ToCpu(t).ToVector<double>().value();
  for (double v : values) m = std::max(m, std::abs(v));
  return m;
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
};

// Forward, then backward with `mode` (dweight and dbias start at ones), on
// the GPU against the CPU, for every case and dtype.
void ExpectConvMatchesCpu(const std::vector<ConvCase>& cases, const std::vector<DType>& dtypes, GradMode mode,
                          const std::string& label) {
  CudaAllocator gpu(0);
  uint64_t seed = 1;
  for (DType dtype : dtypes) {
    for (const ConvCase& k : cases) {
      const std::string what = label + " " + ShapeToString(k.x) + " " + ShapeToString(k.w) + " " + k.o.ToString() +
                               " " + std::string(DTypeName(dtype)) + " " + GradModeName(mode);
      Tensor x = RandomTensor(k.x, dtype, -1, 1, ++seed), w = RandomTensor(k.w, dtype, -1, 1, ++seed);
      Tensor b = RandomTensor({k.w[0]}, DType::kF32, -1, 1, ++seed);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Conv2dForward(x, w, b, k.o));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Conv2dForward(OnGpu(x, &gpu), OnGpu(w, &gpu), OnGpu(b, &gpu), k.o));
      // cuDNN rounds the convolution to the dtype before it adds the bias (itself
      // rounded to the dtype), so where the two cancel the error is relative to
      // the terms, not to y: at most one rounding of each, u (|conv| + |b|) with
      // u = RoundingRtol (2^-7 bf16, 2^-10 f16: a whole ulp, either side of a
      // tie), and |conv| <= |y| + |b|. Seen on an H200: y = 0.0625 came back as
      // 0.0586 (bf16), within 2^-7 (max|y| + 2 max|b|).
      Tol y_tol = GpuTol(dtype);
      if (dtype != DType::kF32) {
        y_tol.atol += RoundingRtol(dtype) * (MaxAbs(y) + 2 * MaxAbs(b));
      }
      ExpectClose(ToCpu(yd), y, y_tol, "y " + what);
      Tensor dy = RandomTensor(y.shape(), dtype, -1, 1, ++seed);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(k.x, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full(k.w, 1.0, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({k.w[0]}, 1.0, DType::kF32));
      ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx, dw, db, mode));
      Tensor dxd = OnGpu(dx, &gpu);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dwd, Tensor::Full(k.w, 1.0, DType::kF32, &gpu));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dbd, Tensor::Full({k.w[0]}, 1.0, DType::kF32, &gpu));
      ZS_ASSERT_OK(Conv2dBackward(OnGpu(dy, &gpu), OnGpu(x, &gpu), OnGpu(w, &gpu), k.o, dxd, dwd, dbd, mode));
      ExpectClose(ToCpu(dxd), dx, GpuTol(dtype), "dx " + what);
      const Tol sum_tol{1e-3, dtype == DType::kF32 ? 1e-4 : 1.0 / 64};
      // cuDNN computes a bf16 / f16 weight gradient in that dtype: it is rounded
      // (a whole ulp at most, RoundingRtol) before it is added to the f32 dweight,
      // so with accumulate the error follows |gradient| <= |dweight| + 1 (dweight
      // started at ones), not the sum. Seen on an H200: 1 - 0.98644 came back
      // as 1 - 0.98828 (bf16).
      Tol dw_tol = sum_tol;
      if (dtype != DType::kF32 && mode == GradMode::kAccumulate) {
        dw_tol.atol += RoundingRtol(dtype) * (MaxAbs(dw) + 1.0);
      }
      ExpectClose(ToCpu(dwd), dw, dw_tol, "dweight " + what);
      ExpectClose(ToCpu(dbd), db, sum_tol, "dbias " + what);
    }
  }
}

const std::vector<ConvCase>& ConvCases() {
  static const auto* cases = new std::vector<ConvCase>{
      {{4, 3, 32, 32}, {16, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},
      {{2, 16, 17, 15}, {32, 16, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}}},
      {{2, 12, 9, 9}, {12, 1, 3, 3}, {.padding = {1, 1}, .groups = 12}},  // depthwise
      {{3, 8, 8, 8}, {6, 4, 1, 1}, {.stride = {2, 2}, .groups = 2}},
      {{2, 6, 11, 13}, {9, 2, 3, 5}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 1}, .groups = 3}},
      {{1, 4, 6, 6}, {4, 4, 6, 6}, {}},  // 1x1 output
  };
  return *cases;
}

// Forces one convolution path (a cuDNN API or our kernels) for a scope.
class ScopedConvPath {
 public:
  explicit ScopedConvPath(cuda::CudnnConvPath path) : before_(cuda::GetCudnnConvPath()) {
    cuda::SetCudnnConvPath(path);
  }
  ~ScopedConvPath() { cuda::SetCudnnConvPath(before_); }

 private:
  cuda::CudnnConvPath before_;
};

TEST(CudaConv2d, ForwardAndBackwardMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  ScopedConvPath path(cuda::CudnnConvPath::kAuto);
  const cuda::CudnnConvPathCounts before = cuda::GetCudnnConvPathCounts();
  ExpectConvMatchesCpu(ConvCases(), {DType::kF32, DType::kBF16}, GradMode::kAccumulate, "auto");
  const cuda::CudnnConvPathCounts after = cuda::GetCudnnConvPathCounts();
  std::printf("cuDNN convolution passes (auto): %lld through the graph API, %lld through the legacy API\n",
              static_cast<long long>(after.graph - before.graph),
              static_cast<long long>(after.legacy - before.legacy));
  // For the GPU record (tools/gpu_bundle): a pass that fell back to the legacy API.
  EmitFigure("cuda_vision_test", "cudnn conv legacy passes (auto)",
             static_cast<double>(after.legacy - before.legacy), "count",
             {{"graph", static_cast<double>(after.graph - before.graph)}});
}

// The graph (backend) API forced: an engine must take every case, and no
// pass may reach the legacy calls.
TEST(CudaConv2d, GraphPathMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  ScopedConvPath path(cuda::CudnnConvPath::kGraph);
  const cuda::CudnnConvPathCounts before = cuda::GetCudnnConvPathCounts();
  for (GradMode mode : {GradMode::kAccumulate, GradMode::kOverwrite}) {
    ExpectConvMatchesCpu(ConvCases(), {DType::kF32, DType::kBF16, DType::kF16}, mode, "graph");
  }
  const cuda::CudnnConvPathCounts after = cuda::GetCudnnConvPathCounts();
  // 2 modes x 3 dtypes x the cases x (forward, backward-data, backward-filter).
  EXPECT_EQ(after.graph - before.graph, static_cast<int64_t>(2 * 3 * ConvCases().size() * 3));
  EXPECT_EQ(after.legacy, before.legacy);
}

// The legacy descriptor API forced (the fallback).
TEST(CudaConv2d, LegacyPathMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  ScopedConvPath path(cuda::CudnnConvPath::kLegacy);
  const cuda::CudnnConvPathCounts before = cuda::GetCudnnConvPathCounts();
  for (GradMode mode : {GradMode::kAccumulate, GradMode::kOverwrite}) {
    ExpectConvMatchesCpu(ConvCases(), {DType::kF32, DType::kBF16, DType::kF16}, mode, "legacy");
  }
  const cuda::CudnnConvPathCounts after = cuda::GetCudnnConvPathCounts();
  EXPECT_EQ(after.legacy - before.legacy, static_cast<int64_t>(2 * 3 * ConvCases().size() * 3));
  EXPECT_EQ(after.graph, before.graph);
}

// Our kernels forced (the path where cuDNN does not run, the simulator's),
// with the tolerances of cuDNN's: fp32 sums of the same terms in another
// order, one rounding into a 16-bit output. No pass reaches cuDNN.
TEST(CudaConv2d, OwnPathMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  ScopedConvPath path(cuda::CudnnConvPath::kOwn);
  const cuda::CudnnConvPathCounts before = cuda::GetCudnnConvPathCounts();
  for (GradMode mode : {GradMode::kAccumulate, GradMode::kOverwrite}) {
    ExpectConvMatchesCpu(ConvCases(), {DType::kF32, DType::kBF16, DType::kF16}, mode, "own");
  }
  const cuda::CudnnConvPathCounts after = cuda::GetCudnnConvPathCounts();
  EXPECT_EQ(after.own - before.own, static_cast<int64_t>(2 * 3 * ConvCases().size() * 3));
  EXPECT_EQ(after.graph, before.graph);
  EXPECT_EQ(after.legacy, before.legacy);
}

// BatchNorm on the device against the CPU: training (statistics, running
// statistics, backward through them) and eval.
void ExpectBatchNormMatchesCpu() {
  CudaAllocator gpu(0);
  const Shape shape = {8, 16, 9, 7};
  Tensor x = RandomTensor(shape, DType::kF32, -2, 3, 1), w = RandomTensor({16}, DType::kF32, 0.5, 1.5, 2);
  Tensor b = RandomTensor({16}, DType::kF32, -1, 1, 3);
  Tensor rm = RandomTensor({16}, DType::kF32, -1, 1, 4), rv = RandomTensor({16}, DType::kF32, 0.5, 2, 5);
  Tensor rmd = OnGpu(rm, &gpu), rvd = OnGpu(rv, &gpu);
  for (bool training : {true, false}) {
    const BatchNormOptions o{.training = training, .momentum = 0.1, .eps = 1e-5};
    const std::string what = training ? "training" : "eval";
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(shape, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor sm, Tensor::Empty({16}, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor sr, Tensor::Empty({16}, DType::kF32));
    ZS_ASSERT_OK(BatchNormForward(x, w, b, rm, rv, o, y, sm, sr));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Tensor::Empty(shape, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor smd, Tensor::Empty({16}, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor srd, Tensor::Empty({16}, DType::kF32, &gpu));
    ZS_ASSERT_OK(BatchNormForward(OnGpu(x, &gpu), OnGpu(w, &gpu), OnGpu(b, &gpu), rmd, rvd, o, yd, smd, srd));
    ExpectClose(ToCpu(yd), y, GpuTol(DType::kF32), "y " + what);
    ExpectClose(ToCpu(smd), sm, GpuTol(DType::kF32), "save_mean " + what);
    ExpectClose(ToCpu(srd), sr, GpuTol(DType::kF32), "save_rstd " + what);
    ExpectClose(ToCpu(rmd), rm, GpuTol(DType::kF32), "running_mean " + what);
    ExpectClose(ToCpu(rvd), rv, GpuTol(DType::kF32), "running_var " + what);
    if (!training) continue;
    Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, 6);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({16}, 2.0, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({16}, 2.0, DType::kF32));
    ZS_ASSERT_OK(BatchNormBackward(dy, x, sm, sr, w, true, dx, dw, db, GradMode::kAccumulate));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dxd, Tensor::Empty(shape, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dwd, Tensor::Full({16}, 2.0, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dbd, Tensor::Full({16}, 2.0, DType::kF32, &gpu));
    ZS_ASSERT_OK(BatchNormBackward(OnGpu(dy, &gpu), OnGpu(x, &gpu), smd, srd, OnGpu(w, &gpu), true, dxd, dwd, dbd,
                                   GradMode::kAccumulate));
    ExpectClose(ToCpu(dxd), dx, {1e-4, 1e-3}, "dx");
    ExpectClose(ToCpu(dwd), dw, {1e-3, 1e-4}, "dweight");
    ExpectClose(ToCpu(dbd), db, {1e-3, 1e-4}, "dbias");
  }
}

TEST(CudaBatchNorm, TrainingAndEvalMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  ScopedConvPath path(cuda::CudnnConvPath::kAuto);  // cuDNN on a GPU
  ExpectBatchNormMatchesCpu();
}

// Our kernels (BatchNorm follows the convolution path): the simulator's path.
TEST(CudaBatchNorm, OwnPathMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  ScopedConvPath path(cuda::CudnnConvPath::kOwn);
  ExpectBatchNormMatchesCpu();
}

TEST(CudaPool2d, EveryKindMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const Shape shape = {2, 3, 13, 11};
  Tensor x = RandomTensor(shape, DType::kF32, -1, 1, 1);
  const Tensor xd = OnGpu(x, &gpu);
  const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  ZS_ASSERT_OK_AND_ASSIGN(Shape ys, Pool2dOutputShape(shape, o));
  Tensor dy = RandomTensor(ys, DType::kF32, -1, 1, 2);
  const Tensor dyd = OnGpu(dy, &gpu);
  // Max.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(ys, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor idx, Tensor::Empty(ys, DType::kI64));
  ZS_ASSERT_OK(MaxPool2dForward(x, o, y, idx));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Tensor::Empty(ys, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor idxd, Tensor::Empty(ys, DType::kI64, &gpu));
  ZS_ASSERT_OK(MaxPool2dForward(xd, o, yd, idxd));
  ExpectClose(ToCpu(yd), y, ::zeroshard::testing::kExact, "max y");
  EXPECT_EQ(ToCpu(idxd).ToVector<int64_t>().value(), idx.ToVector<int64_t>().value());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty(shape, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dxd, Tensor::Empty(shape, DType::kF32, &gpu));
  ZS_ASSERT_OK(MaxPool2dBackward(dy, idx, o, dx));
  ZS_ASSERT_OK(MaxPool2dBackward(dyd, idxd, o, dxd));
  ExpectClose(ToCpu(dxd), dx, GpuTol(DType::kF32), "max dx");
  // Average, padding excluded.
  const Pool2dOptions a{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false};
  ZS_ASSERT_OK(AvgPool2dForward(x, a, y));
  ZS_ASSERT_OK(AvgPool2dForward(xd, a, yd));
  ExpectClose(ToCpu(yd), y, GpuTol(DType::kF32), "avg y");
  ZS_ASSERT_OK(AvgPool2dBackward(dy, a, dx));
  ZS_ASSERT_OK(AvgPool2dBackward(dyd, a, dxd));
  ExpectClose(ToCpu(dxd), dx, GpuTol(DType::kF32), "avg dx");
  // Adaptive 3x4 (overlapping windows).
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ya, Tensor::Empty({2, 3, 3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor yad, Tensor::Empty({2, 3, 3, 4}, DType::kF32, &gpu));
  ZS_ASSERT_OK(AdaptiveAvgPool2dForward(x, ya));
  ZS_ASSERT_OK(AdaptiveAvgPool2dForward(xd, yad));
  ExpectClose(ToCpu(yad), ya, GpuTol(DType::kF32), "adaptive y");
  Tensor dya = RandomTensor({2, 3, 3, 4}, DType::kF32, -1, 1, 3);
  ZS_ASSERT_OK(AdaptiveAvgPool2dBackward(dya, dx));
  ZS_ASSERT_OK(AdaptiveAvgPool2dBackward(OnGpu(dya, &gpu), dxd));
  ExpectClose(ToCpu(dxd), dx, GpuTol(DType::kF32), "adaptive dx");
}

}  // namespace
}  // namespace zeroshard
