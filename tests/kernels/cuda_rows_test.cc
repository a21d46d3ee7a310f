// The CUDA row kernels (softmax, LayerNorm, cross-entropy) against their CPU
// twins: every float dtype, odd and large shapes, in-place and strided rows.
// Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/softmax.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::Describe;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ExpectSameBits;
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

// Shapes that reach every LayerNorm kernel: a warp or a block per row with the
// row in registers (scalar and 16-byte-vector paths), and the long-row kernels.
const std::vector<std::pair<int64_t, int64_t>>& ParamShapes() {
  static const auto* shapes = new std::vector<std::pair<int64_t, int64_t>>{
      {3, 7}, {17, 33}, {5, 257}, {64, 768}, {9, 1000}, {2, 9000}, {2, 30000}};
  return *shapes;
}

// weight and bias of a mixed-precision model (bf16, f16) go to the kernels in
// their own dtype and are widened there: exactly, so every output is bitwise
// the one of the same parameters cast to f32 first (what the entry passed
// before), and within GpuTol of the CPU twin (which reads them as floats).
// dweight and dbias in the parameters' dtype are rounded once from the f32
// sums: the bits of the f32 gradients cast to that dtype.
TEST(CudaLayerNorm, SixteenBitParamsGiveTheBitsOfTheirF32Cast) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 400;
  for (DType dtype : kFloatDTypes) {
    for (DType pdtype : {DType::kBF16, DType::kF16}) {
      for (auto [rows, cols] : ParamShapes()) {
        const std::string what = Describe("LayerNorm", dtype, rows, cols) + " params " +
                                 std::string(DTypeName(pdtype));
        const Tensor x = RandomTensor({rows, cols}, dtype, -3, 5, ++seed);
        const Tensor w = RandomTensor({cols}, pdtype, 0.5, 1.5, ++seed);
        const Tensor b = RandomTensor({cols}, pdtype, -1, 1, ++seed);
        const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor w32, w.To(DType::kF32));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor b32, b.To(DType::kF32));
        const Tensor xd = OnGpu(x, &gpu), dyd = OnGpu(dy, &gpu);
        const Tensor wd = OnGpu(w, &gpu), bd = OnGpu(b, &gpu);
        const Tensor w32d = OnGpu(w32, &gpu), b32d = OnGpu(b32, &gpu);
        auto gpu_empty = [&](std::vector<int64_t> shape, DType d) {
          return Tensor::Empty(shape, d, &gpu).value();
        };
        const Tensor out = gpu_empty({rows, cols}, dtype), out32 = gpu_empty({rows, cols}, dtype);
        const Tensor mean = gpu_empty({rows}, DType::kF32), mean32 = gpu_empty({rows}, DType::kF32);
        const Tensor rstd = gpu_empty({rows}, DType::kF32), rstd32 = gpu_empty({rows}, DType::kF32);
        ZS_ASSERT_OK(LayerNormForward(xd, wd, bd, 1e-5, out, mean, rstd));
        ZS_ASSERT_OK(LayerNormForward(xd, w32d, b32d, 1e-5, out32, mean32, rstd32));
        ExpectSameBits(out, out32, what);
        ExpectSameBits(mean, mean32, what + " mean");
        ExpectSameBits(rstd, rstd32, what + " rstd");
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out_cpu, Tensor::Empty({rows, cols}, dtype));
        ZS_ASSERT_OK(LayerNormForward(x, w, b, 1e-5, out_cpu, Tensor(), Tensor()));
        ExpectClose(out, out_cpu, GpuTol(dtype), what + " vs cpu");

        // Backward, the parameter gradients added to values in pdtype.
        const Tensor dx = gpu_empty({rows, cols}, dtype), dx32 = gpu_empty({rows, cols}, dtype);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({cols}, 0.25, pdtype, &gpu));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Full({cols}, -0.5, pdtype, &gpu));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dw_ref, dw.Clone());
        ZS_ASSERT_OK_AND_ASSIGN(Tensor db_ref, db.Clone());
        ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, wd, dx, dw, db, GradMode::kAccumulate));
        ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, w32d, dx32, dw_ref, db_ref,
                                       GradMode::kAccumulate));
        ExpectSameBits(dx, dx32, what + " dx");
        ExpectSameBits(dw, dw_ref, what + " dweight");
        ExpectSameBits(db, db_ref, what + " dbias");
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dx_cpu, Tensor::Empty({rows, cols}, dtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dw_cpu, Tensor::Full({cols}, 0.25, pdtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor db_cpu, Tensor::Full({cols}, -0.5, pdtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor mean_h, mean.To(DefaultCpuAllocator()));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd_h, rstd.To(DefaultCpuAllocator()));
        ZS_ASSERT_OK(LayerNormBackward(dy, x, mean_h, rstd_h, w, dx_cpu, dw_cpu, db_cpu,
                                       GradMode::kAccumulate));
        ExpectClose(dx, dx_cpu, GpuTol(dtype), what + " dx vs cpu");
        const testing::Tol sum_tol{GpuTol(pdtype).atol * 10 * static_cast<double>(rows),
                                   GpuTol(pdtype).rtol};
        ExpectClose(dw, dw_cpu, sum_tol, what + " dweight vs cpu");
        ExpectClose(db, db_cpu, sum_tol, what + " dbias vs cpu");

        // Overwritten gradients in pdtype: the f32 ones rounded once.
        ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, wd, Tensor(), dw, db,
                                       GradMode::kOverwrite));
        const Tensor dwf = gpu_empty({cols}, DType::kF32), dbf = gpu_empty({cols}, DType::kF32);
        ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, wd, Tensor(), dwf, dbf,
                                       GradMode::kOverwrite));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dw_cast, dwf.To(pdtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor db_cast, dbf.To(pdtype));
        ExpectSameBits(dw, dw_cast, what + " dweight overwritten");
        ExpectSameBits(db, db_cast, what + " dbias overwritten");
      }
    }
  }
}

// The entry launches on the parameters as they are: no f32 copy (and so no
// cast kernel) is allocated for them. The forward allocates nothing, the
// backward only its partial sums.
TEST(CudaLayerNorm, SixteenBitParamsAreNotCastOrCopied) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t rows = 64, cols = 768;
  for (auto [dtype, pdtype] : {std::pair{DType::kBF16, DType::kBF16},
                               std::pair{DType::kF32, DType::kF16}}) {
    const std::string what = Describe("LayerNorm", dtype, rows, cols) + " params " +
                             std::string(DTypeName(pdtype));
    const Tensor xd = OnGpu(RandomTensor({rows, cols}, dtype, -3, 5, 1), &gpu);
    const Tensor dyd = OnGpu(RandomTensor({rows, cols}, dtype, -1, 1, 2), &gpu);
    const Tensor wd = OnGpu(RandomTensor({cols}, pdtype, 0.5, 1.5, 3), &gpu);
    const Tensor bd = OnGpu(RandomTensor({cols}, pdtype, -1, 1, 4), &gpu);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({rows, cols}, dtype, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({rows, cols}, dtype, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({rows}, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({rows}, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Empty({cols}, pdtype, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor db, Tensor::Empty({cols}, pdtype, &gpu));
    const int64_t before = gpu.stats().num_allocs;
    ZS_ASSERT_OK(LayerNormForward(xd, wd, bd, 1e-5, out, mean, rstd));
    EXPECT_EQ(gpu.stats().num_allocs - before, 0) << what << " forward";
    ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, wd, dx, Tensor(), Tensor(),
                                   GradMode::kOverwrite));
    EXPECT_EQ(gpu.stats().num_allocs - before, 0) << what << " backward, dx only";
    ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, wd, dx, dw, db, GradMode::kOverwrite));
    EXPECT_EQ(gpu.stats().num_allocs - before, 1) << what << " backward: the partial sums only";
  }
}

// 16-bit parameters at any address: a view one element into its buffer (not
// 16-byte aligned: the vector path reads it element by element) and a strided
// view (made contiguous in its dtype first, no cast). Both bitwise as their
// f32 cast; before, a strided bf16 weight was refused.
TEST(CudaLayerNorm, MisalignedAndStridedSixteenBitParams) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t rows = 33, cols = 768;
  const Tensor xd = OnGpu(RandomTensor({rows, cols}, DType::kBF16, -3, 5, 1), &gpu);
  const Tensor dyd = OnGpu(RandomTensor({rows, cols}, DType::kBF16, -1, 1, 2), &gpu);
  const Tensor big_w = RandomTensor({2 * cols + 1}, DType::kBF16, 0.5, 1.5, 3);
  const Tensor big_b = RandomTensor({2 * cols + 1}, DType::kBF16, -1, 1, 4);
  const Tensor big_wd = OnGpu(big_w, &gpu), big_bd = OnGpu(big_b, &gpu);
  // (start, end, step) of the views of the [2 C + 1] buffers.
  using View = std::tuple<int64_t, int64_t, int64_t, const char*>;
  for (auto [start, end, step, name] : {View{1, cols + 1, 1, "one element in"},
                                        View{1, 2 * cols + 1, 2, "every other element"}}) {
    ZS_ASSERT_OK_AND_ASSIGN(const Tensor w, big_wd.Slice(0, start, end, step));
    ZS_ASSERT_OK_AND_ASSIGN(const Tensor b, big_bd.Slice(0, start - 1, end - 1, step));
    // Their f32 casts, made on the host.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor w_h, big_w.Slice(0, start, end, step));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor b_h, big_b.Slice(0, start - 1, end - 1, step));
    ZS_ASSERT_OK_AND_ASSIGN(w_h, w_h.To(DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(b_h, b_h.To(DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(w_h, w_h.Contiguous());
    ZS_ASSERT_OK_AND_ASSIGN(b_h, b_h.Contiguous());
    const Tensor w32 = OnGpu(w_h, &gpu), b32 = OnGpu(b_h, &gpu);
    ASSERT_EQ(w.is_contiguous(), step == 1) << name;

    ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({rows, cols}, DType::kBF16, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out32, Tensor::Empty({rows, cols}, DType::kBF16, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor mean, Tensor::Empty({rows}, DType::kF32, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({rows}, DType::kF32, &gpu));
    ZS_ASSERT_OK(LayerNormForward(xd, w, b, 1e-5, out, mean, rstd));
    ZS_ASSERT_OK(LayerNormForward(xd, w32, b32, 1e-5, out32, Tensor(), Tensor()));
    ExpectSameBits(out, out32, std::string(name) + " forward");
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({rows, cols}, DType::kBF16, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx32, Tensor::Empty({rows, cols}, DType::kBF16, &gpu));
    ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, w, dx, Tensor(), Tensor(),
                                   GradMode::kOverwrite));
    ZS_ASSERT_OK(LayerNormBackward(dyd, xd, mean, rstd, w32, dx32, Tensor(), Tensor(),
                                   GradMode::kOverwrite));
    ExpectSameBits(dx, dx32, std::string(name) + " dx");
  }
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
