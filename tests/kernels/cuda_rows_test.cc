// The CUDA row kernels (softmax, LayerNorm, cross-entropy) against their CPU
// twins: every float dtype, odd and large shapes, in-place and strided rows.
// Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/softmax.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::Describe;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::GpuRowShapes;
using ::zeroshard::testing::GpuTol;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;

TEST(CudaSoftmax, ForwardAndBackwardMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : GpuRowShapes()) {
      const Tensor x = RandomTensor({rows, cols}, dtype, -8, 8, ++seed);
      const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
      const Tensor xd = OnGpu(x, &gpu), dyd = OnGpu(dy, &gpu);
      for (bool log : {false, true}) {
        const std::string what = Describe(log ? "LogSoftmax" : "Softmax", dtype, rows, cols);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor y, log ? LogSoftmax(x) : Softmax(x));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, log ? LogSoftmax(xd) : Softmax(xd));
        ExpectClose(yd, y, GpuTol(dtype), what);
        // Backward from the same y on both sides.
        const Tensor y_on_gpu = OnGpu(y, &gpu);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, log ? LogSoftmaxBackward(y, dy) : SoftmaxBackward(y, dy));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dxd, log ? LogSoftmaxBackward(y_on_gpu, dyd)
                                                : SoftmaxBackward(y_on_gpu, dyd));
        ExpectClose(dxd, dx, GpuTol(dtype), what + " backward");
      }
    }
  }
}

TEST(CudaSoftmax, MixedDtypesInPlaceAndNarrowedRows) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const Tensor x = RandomTensor({37, 130}, DType::kF32, -5, 5, 3);
  // f32 in, bf16 out.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({37, 130}, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Tensor::Empty({37, 130}, DType::kBF16, &gpu));
  ZS_ASSERT_OK(Softmax(x, out));
  ZS_ASSERT_OK(Softmax(OnGpu(x, &gpu), outd));
  ExpectClose(outd, out, GpuTol(DType::kBF16), "f32 -> bf16");
  // In place on the device.
  Tensor xd = OnGpu(x, &gpu);
  ZS_ASSERT_OK(Softmax(xd, xd));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Softmax(x));
  ExpectClose(xd, y, GpuTol(DType::kF32), "in place");
  // Rows of a narrowed last axis: equally spaced, not contiguous.
  const Tensor wide = OnGpu(x, &gpu);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor part, wide.Narrow(1, 10, 100));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor part_cpu, x.Narrow(1, 10, 100));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor yp, Softmax(part));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor yc, Softmax(part_cpu));
  ExpectClose(yp, yc, GpuTol(DType::kF32), "narrowed rows");
}

TEST(CudaSoftmax, MaskedRowsStayFinite) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  // A causal-mask pattern: leading -inf in every row but the first column.
  std::vector<float> v(8 * 40);
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 40; ++c) v[r * 40 + c] = c <= r * 5 ? 0.1f * c : -std::numeric_limits<float>::infinity();
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromVector(v, {8, 40}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Softmax(x));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Softmax(OnGpu(x, &gpu)));
  ExpectClose(yd, y, GpuTol(DType::kF32), "masked rows");
}

TEST(CudaLayerNorm, ForwardAndBackwardMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : GpuRowShapes()) {
      const std::string what = Describe("LayerNorm", dtype, rows, cols);
      const Tensor x = RandomTensor({rows, cols}, dtype, -3, 5, ++seed);
      const Tensor w = RandomTensor({cols}, dtype, 0.5, 1.5, ++seed);
      const Tensor b = RandomTensor({cols}, dtype, -1, 1, ++seed);
      const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({rows, cols}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({rows}, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({rows}, DType::kF32));
      ZS_ASSERT_OK(LayerNormForward(x, w, b, 1e-5, out, mean, rstd));
      const Tensor xd = OnGpu(x, &gpu), wd = OnGpu(w, &gpu), bd = OnGpu(b, &gpu);
      const Tensor outd = OnGpu(out, &gpu), meand = OnGpu(mean, &gpu), rstdd = OnGpu(rstd, &gpu);
      ZS_ASSERT_OK(LayerNormForward(xd, wd, bd, 1e-5, outd, meand, rstdd));
      ExpectClose(outd, out, GpuTol(dtype), what);
      ExpectClose(meand, mean, GpuTol(DType::kF32), what + " mean");
      ExpectClose(rstdd, rstd, GpuTol(DType::kF32), what + " rstd");

      // Backward from the CPU's saved statistics on both sides; dweight and
      // dbias accumulate into existing values.
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({rows, cols}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({cols}, 0.25, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({cols}, -0.5, dtype));
      const Tensor dxd = OnGpu(dx, &gpu), dwd = OnGpu(dw, &gpu), dbd = OnGpu(db, &gpu);
      ZS_ASSERT_OK(LayerNormBackward(dy, x, mean, rstd, w, dx, dw, db, GradMode::kAccumulate));
      ZS_ASSERT_OK(LayerNormBackward(OnGpu(dy, &gpu), xd, OnGpu(mean, &gpu), OnGpu(rstd, &gpu), wd,
                                     dxd, dwd, dbd, GradMode::kAccumulate));
      ExpectClose(dxd, dx, GpuTol(dtype), what + " dx");
      // Parameter gradients sum `rows` terms in another blocking than the CPU's.
      const testing::Tol sum_tol{GpuTol(dtype).atol * 10, GpuTol(dtype).rtol};
      ExpectClose(dwd, dw, sum_tol, what + " dweight");
      ExpectClose(dbd, db, sum_tol, what + " dbias");
    }
  }
}

TEST(CudaLayerNorm, NoWeightDxInPlaceAndOverwrite) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t rows = 300, cols = 96;
  const Tensor x = RandomTensor({rows, cols}, DType::kF32, -2, 2, 7);
  const Tensor dy = RandomTensor({rows, cols}, DType::kF32, -1, 1, 8);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({rows, cols}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({rows}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({rows}, DType::kF32));
  ZS_ASSERT_OK(LayerNormForward(x, Tensor(), Tensor(), 1e-5, out, mean, rstd));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({cols}, 3.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, dy.Clone());
  ZS_ASSERT_OK(LayerNormBackward(dx, x, mean, rstd, Tensor(), dx, dw, Tensor(), GradMode::kOverwrite));

  const Tensor xd = OnGpu(x, &gpu);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Tensor::Empty({rows, cols}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor meand, Tensor::Empty({rows}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstdd, Tensor::Empty({rows}, DType::kF32, &gpu));
  ZS_ASSERT_OK(LayerNormForward(xd, Tensor(), Tensor(), 1e-5, outd, meand, rstdd));
  ExpectClose(outd, out, GpuTol(DType::kF32), "no weight");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dwd, Tensor::Full({cols}, 3.0, DType::kF32, &gpu));
  const Tensor dxd = OnGpu(dy, &gpu);
  ZS_ASSERT_OK(LayerNormBackward(dxd, xd, OnGpu(mean, &gpu), OnGpu(rstd, &gpu), Tensor(), dxd, dwd,
                                 Tensor(), GradMode::kOverwrite));
  ExpectClose(dxd, dx, GpuTol(DType::kF32), "dx in place over dy");
  ExpectClose(dwd, dw, {1e-4, 1e-4}, "dweight overwritten");
}

TEST(CudaCrossEntropy, ForwardAndBackwardMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 200;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : GpuRowShapes()) {
      const std::string what = Describe("CrossEntropy", dtype, rows, cols);
      const Tensor logits = RandomTensor({rows, cols}, dtype, -6, 6, ++seed);
      std::vector<int64_t> t(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 3 ? -100 : (r * 7919 + 13) % cols;
      for (DType tdtype : {DType::kI64, DType::kI32}) {
        ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, Tensor::FromVector(t, {rows}, tdtype));
        ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult cpu, CrossEntropy(logits, targets));
        const Tensor ld = OnGpu(logits, &gpu), td = OnGpu(targets, &gpu);
        ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult dev, CrossEntropy(ld, td));
        ExpectClose(dev.losses, cpu.losses, GpuTol(DType::kF32), what + " losses");
        ExpectClose(dev.lse, cpu.lse, GpuTol(DType::kF32), what + " lse");
        EXPECT_EQ(dev.stats.valid_rows, cpu.stats.valid_rows) << what;
        EXPECT_NEAR(dev.stats.sum_loss, cpu.stats.sum_loss, 1e-4 * (1 + std::fabs(cpu.stats.sum_loss)))
            << what;

        // Mean reduction: one dloss for every row; backward from the CPU's lse.
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dloss,
                                Tensor::Full({1}, 1.0 / std::max<int64_t>(1, cpu.stats.valid_rows),
                                             DType::kF32));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dl, Tensor::Empty({rows, cols}, dtype));
        ZS_ASSERT_OK(CrossEntropyBackward(logits, targets, cpu.lse, dloss, dl));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dld, ld.Clone());
        ZS_ASSERT_OK(CrossEntropyBackward(dld, td, OnGpu(cpu.lse, &gpu), OnGpu(dloss, &gpu), dld));
        ExpectClose(dld, dl, GpuTol(dtype), what + " dlogits (in place)");
      }
    }
  }
}

TEST(CudaCrossEntropy, TargetOutOfRangeIsRefusedBeforeLaunch) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const Tensor logits = OnGpu(RandomTensor({2, 5}, DType::kF32, -1, 1, 1), &gpu);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromVector(std::vector<int64_t>{1, 5}, {2}));
  EXPECT_EQ(CrossEntropy(logits, OnGpu(t, &gpu)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
