// The CUDA Llama kernels (RMSNorm, SwiGLU gate, rotary embedding) against
// their CPU twins: every float dtype, odd and large shapes, strided and
// in-place operands. Skips without a device; runs on the CPU simulator under
// --define=cuda_sim=1.
//
// Tolerances: RMSNorm sums its rows in another order than the CPU (GpuTol,
// as LayerNorm; dweight sums `rows` terms in another blocking: 10x the
// atol). The gate and the rotation have no sums and share their per-element
// math with the CPU (kernels/math/, no FMA contraction): 1e-6 for an ulp of
// a device libm difference, plus one rounding of a 16-bit output it may flip.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "zeroshard/kernels/rmsnorm.h"
#include "zeroshard/kernels/rope.h"
#include "zeroshard/kernels/silu_gate.h"
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
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::Tol;

Tol ElementTol(DType out) { return {1e-6, 1e-6 + RoundingRtol(out)}; }

TEST(CudaRmsNorm, ForwardAndBackwardMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : GpuRowShapes()) {
      const std::string what = Describe("RmsNorm", dtype, rows, cols);
      const Tensor x = RandomTensor({rows, cols}, dtype, -3, 5, ++seed);
      const Tensor w = RandomTensor({cols}, dtype, 0.5, 1.5, ++seed);
      const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({rows, cols}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({rows}, DType::kF32));
      ZS_ASSERT_OK(RmsNormForward(x, w, 1e-6, out, rstd));
      const Tensor xd = OnGpu(x, &gpu), wd = OnGpu(w, &gpu);
      const Tensor outd = OnGpu(out, &gpu), rstdd = OnGpu(rstd, &gpu);
      ZS_ASSERT_OK(RmsNormForward(xd, wd, 1e-6, outd, rstdd));
      ExpectClose(outd, out, GpuTol(dtype), what);
      ExpectClose(rstdd, rstd, GpuTol(DType::kF32), what + " rstd");

      // Backward from the CPU's saved rstd on both sides; dweight accumulates.
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({rows, cols}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({cols}, 0.25, dtype));
      const Tensor dxd = OnGpu(dx, &gpu), dwd = OnGpu(dw, &gpu);
      ZS_ASSERT_OK(RmsNormBackward(dy, x, rstd, w, dx, dw, GradMode::kAccumulate));
      ZS_ASSERT_OK(RmsNormBackward(OnGpu(dy, &gpu), xd, OnGpu(rstd, &gpu), wd, dxd, dwd, GradMode::kAccumulate));
      ExpectClose(dxd, dx, GpuTol(dtype), what + " dx");
      const Tol sum_tol{GpuTol(dtype).atol * 10, GpuTol(dtype).rtol};
      ExpectClose(dwd, dw, sum_tol, what + " dweight");
    }
  }
}

TEST(CudaRmsNorm, NoWeightNarrowedRowsInPlaceAndOverwrite) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t rows = 300, cols = 96;
  const Tensor wide = RandomTensor({rows, cols + 10}, DType::kBF16, -2, 2, 7);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, wide.Narrow(1, 5, cols));  // equally spaced rows
  const Tensor dy = RandomTensor({rows, cols}, DType::kF32, -1, 1, 8);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({rows, cols}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstd, Tensor::Empty({rows}, DType::kF32));
  ZS_ASSERT_OK(RmsNormForward(x, Tensor(), 1e-5, out, rstd));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Full({cols}, 3.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, dy.Clone());
  ZS_ASSERT_OK(RmsNormBackward(dx, x, rstd, Tensor(), dx, dw, GradMode::kOverwrite));  // dy bf16 vs x: widened

  const Tensor wided = OnGpu(wide, &gpu);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor xd, wided.Narrow(1, 5, cols));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Tensor::Empty({rows, cols}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rstdd, Tensor::Empty({rows}, DType::kF32, &gpu));
  ZS_ASSERT_OK(RmsNormForward(xd, Tensor(), 1e-5, outd, rstdd));
  ExpectClose(outd, out, GpuTol(DType::kF32), "narrowed bf16 rows, no weight, f32 out");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dwd, Tensor::Full({cols}, 3.0, DType::kF32, &gpu));
  const Tensor dxd = OnGpu(dy, &gpu);
  ZS_ASSERT_OK(RmsNormBackward(dxd, xd, OnGpu(rstd, &gpu), Tensor(), dxd, dwd, GradMode::kOverwrite));
  ExpectClose(dxd, dx, GpuTol(DType::kF32), "dx in place over dy (mixed dtypes)");
  ExpectClose(dwd, dw, {1e-4, 1e-4}, "dweight overwritten");
  // In place forward on the device.
  const Tensor yd = OnGpu(out, &gpu);
  ZS_ASSERT_OK(RmsNormForward(yd, Tensor(), 1e-5, yd, Tensor()));
  ZS_ASSERT_OK(RmsNormForward(out, Tensor(), 1e-5, out, Tensor()));
  ExpectClose(yd, out, GpuTol(DType::kF32), "in place");
}

// A bf16 / f16 weight goes to the kernels in its own dtype and is widened
// there, exactly: every output bitwise that of the weight cast to f32 first
// (what the entry passed before), with no allocation for the weight in the
// forward (no f32 copy, no cast kernel) and only the partial sums in the
// backward. A weight one element into its buffer and a strided one (made
// contiguous in its dtype) give the same bits.
TEST(CudaRmsNorm, SixteenBitWeightGivesTheBitsOfItsF32CastWithoutACopy) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 300;
  for (DType dtype : kFloatDTypes) {
    for (DType pdtype : {DType::kBF16, DType::kF16}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{17, 33}, {64, 768}, {2, 9000}}) {
        const std::string what = Describe("RmsNorm", dtype, rows, cols) + " weight " +
                                 std::string(DTypeName(pdtype));
        const Tensor xd = OnGpu(RandomTensor({rows, cols}, dtype, -3, 5, ++seed), &gpu);
        const Tensor dyd = OnGpu(RandomTensor({rows, cols}, dtype, -1, 1, ++seed), &gpu);
        const Tensor big = RandomTensor({2 * cols + 1}, pdtype, 0.5, 1.5, ++seed);
        const Tensor big_d = OnGpu(big, &gpu);
        // (start, end, step) views of the [2 C + 1] buffer: aligned, one element in, strided.
        using View = std::tuple<int64_t, int64_t, int64_t>;
        for (auto [start, end, step] : {View{0, cols, 1}, View{1, cols + 1, 1},
                                        View{1, 2 * cols + 1, 2}}) {
          const std::string at = what + " view " + std::to_string(start) + ":" +
                                 std::to_string(end) + ":" + std::to_string(step);
          ZS_ASSERT_OK_AND_ASSIGN(const Tensor w, big_d.Slice(0, start, end, step));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor w32, big.Slice(0, start, end, step));
          ZS_ASSERT_OK_AND_ASSIGN(w32, w32.To(DType::kF32));
          ZS_ASSERT_OK_AND_ASSIGN(w32, w32.Contiguous());
          w32 = OnGpu(w32, &gpu);
          auto gpu_empty = [&](std::vector<int64_t> shape, DType d) {
            return Tensor::Empty(shape, d, &gpu).value();
          };
          const Tensor out = gpu_empty({rows, cols}, dtype), out32 = gpu_empty({rows, cols}, dtype);
          const Tensor rstd = gpu_empty({rows}, DType::kF32);
          const Tensor rstd32 = gpu_empty({rows}, DType::kF32);
          const Tensor dx = gpu_empty({rows, cols}, dtype), dx32 = gpu_empty({rows, cols}, dtype);
          const Tensor dw = gpu_empty({cols}, pdtype), dwf = gpu_empty({cols}, DType::kF32);
          const int64_t before = gpu.stats().num_allocs;
          ZS_ASSERT_OK(RmsNormForward(xd, w, 1e-6, out, rstd));
          if (step == 1) {
            EXPECT_EQ(gpu.stats().num_allocs - before, 0) << at << " forward: no allocation";
          }
          ZS_ASSERT_OK(RmsNormForward(xd, w32, 1e-6, out32, rstd32));
          ExpectSameBits(out, out32, at);
          ExpectSameBits(rstd, rstd32, at + " rstd");

          const int64_t before_backward = gpu.stats().num_allocs;
          ZS_ASSERT_OK(RmsNormBackward(dyd, xd, rstd, w, dx, dw, GradMode::kOverwrite));
          if (step == 1) {
            EXPECT_EQ(gpu.stats().num_allocs - before_backward, 1)
                << at << " backward: the partial sums only";
          }
          ZS_ASSERT_OK(RmsNormBackward(dyd, xd, rstd, w32, dx32, dwf, GradMode::kOverwrite));
          ExpectSameBits(dx, dx32, at + " dx");
          // dweight in pdtype: the f32 sums rounded once, as a cast of the f32 result.
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dw_cast, dwf.To(pdtype));
          ExpectSameBits(dw, dw_cast, at + " dweight");
        }
      }
    }
  }
}

TEST(CudaSiluGate, ForwardAndBackwardMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 200;
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{257}, int64_t{1} << 18}) {
      const std::string what = Describe("SiluGate", dtype, 1, n);
      const Tensor g = RandomTensor({n}, dtype, -10, 10, ++seed);
      const Tensor u = RandomTensor({n}, dtype, -2, 2, ++seed);
      const Tensor dy = RandomTensor({n}, dtype, -1, 1, ++seed);
      const Tensor gd = OnGpu(g, &gpu), ud = OnGpu(u, &gpu), dyd = OnGpu(dy, &gpu);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({n}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Tensor::Empty({n}, dtype, &gpu));
      ZS_ASSERT_OK(SiluGateForward(g, u, out));
      ZS_ASSERT_OK(SiluGateForward(gd, ud, outd));
      ExpectClose(outd, out, ElementTol(dtype), what);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dg, Tensor::Empty({n}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor du, Tensor::Empty({n}, dtype));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dgd, Tensor::Empty({n}, dtype, &gpu));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dud, Tensor::Empty({n}, dtype, &gpu));
      ZS_ASSERT_OK(SiluGateBackward(dy, g, u, dg, du));
      ZS_ASSERT_OK(SiluGateBackward(dyd, gd, ud, dgd, dud));
      ExpectClose(dgd, dg, ElementTol(dtype), what + " dgate");
      ExpectClose(dud, du, ElementTol(dtype), what + " dup");
    }
  }
}

TEST(CudaSiluGate, StridedMixedAndInPlace) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  // gate and up as the two halves of one fused [rows, 2F] projection (bf16),
  // out f32; then the backward in place over the (contiguous) gate and up.
  const Tensor fused = RandomTensor({37, 2 * 48}, DType::kBF16, -6, 6, 300);
  const Tensor fusedd = OnGpu(fused, &gpu);
  const Tensor g = fused.Narrow(1, 0, 48).value(), u = fused.Narrow(1, 48, 48).value();
  const Tensor gd = fusedd.Narrow(1, 0, 48).value(), ud = fusedd.Narrow(1, 48, 48).value();
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({37, 48}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Tensor::Empty({37, 48}, DType::kF32, &gpu));
  ZS_ASSERT_OK(SiluGateForward(g, u, out));
  ZS_ASSERT_OK(SiluGateForward(gd, ud, outd));
  ExpectClose(outd, out, ElementTol(DType::kF32), "halves of a fused projection");
  // A transposed output.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tbase, Tensor::Empty({48, 37}, DType::kF16, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tout, tbase.Transpose(0, 1));
  ZS_ASSERT_OK(SiluGateForward(gd, ud, tout));
  ExpectClose(tout, out, ElementTol(DType::kF16), "transposed f16 output");
  // Backward in place.
  const Tensor dy = RandomTensor({37, 48}, DType::kBF16, -1, 1, 301);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor gc, g.Contiguous());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor uc, u.Contiguous());
  Tensor gcd = OnGpu(gc, &gpu), ucd = OnGpu(uc, &gpu);
  ZS_ASSERT_OK(SiluGateBackward(dy, gc, uc, gc, uc));
  ZS_ASSERT_OK(SiluGateBackward(OnGpu(dy, &gpu), gcd, ucd, gcd, ucd));
  ExpectClose(gcd, gc, ElementTol(DType::kBF16), "dgate in place");
  ExpectClose(ucd, uc, ElementTol(DType::kBF16), "dup in place");
}

TEST(CudaRope, MatchesCpuInEveryLayout) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const RopeOptions options{.theta = 500000.0, .llama3 = Llama3RopeScaling{}};
  for (int64_t d : {2, 64, 128}) {
    ZS_ASSERT_OK_AND_ASSIGN(RopeTables cpu_t, MakeRopeTables(options, 300, d));
    ZS_ASSERT_OK_AND_ASSIGN(RopeTables gpu_t, MakeRopeTables(options, 300, d, &gpu));
    ExpectClose(gpu_t.cos, cpu_t.cos, testing::kExact, "cos table copied");
    for (DType dtype : kFloatDTypes) {
      for (Shape shape : std::vector<Shape>{{1, 1, 1, d}, {2, 7, 3, d}, {3, 300, 4, d}}) {
        const std::string what = absl::StrCat("Rope ", DTypeName(dtype), " ", ShapeToString(shape));
        // x as [B, H, T, D] permuted to [B, T, H, D].
        const Tensor base = RandomTensor({shape[0], shape[2], shape[1], d}, dtype, -3, 3, d + shape[1]);
        const Tensor x = base.Permute({0, 2, 1, 3}).value();
        const Tensor xd = OnGpu(base, &gpu).Permute({0, 2, 1, 3}).value();
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(shape, dtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Tensor::Empty(shape, dtype, &gpu));
        for (bool inverse : {false, true}) {
          ZS_ASSERT_OK(RopeApply(x, cpu_t, out, inverse));
          ZS_ASSERT_OK(RopeApply(xd, gpu_t, outd, inverse));
          ExpectClose(outd, out, ElementTol(dtype), what + (inverse ? " inverse" : ""));
        }
        // In place on the strided view.
        ZS_ASSERT_OK(RopeApply(xd, gpu_t, xd));
        ZS_ASSERT_OK(RopeApply(x, cpu_t, out));
        ExpectClose(xd, out, ElementTol(dtype), what + " in place");
      }
    }
  }
}

TEST(CudaRope, TablesOnAnotherDeviceAreRefused) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  ZS_ASSERT_OK_AND_ASSIGN(RopeTables cpu_t, MakeRopeTables({}, 4, 8));
  const Tensor xd = OnGpu(RandomTensor({1, 4, 2, 8}, DType::kF32, -1, 1, 1), &gpu);
  EXPECT_EQ(RopeApply(xd, cpu_t, xd).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
