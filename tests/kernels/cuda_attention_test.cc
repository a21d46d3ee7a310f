// Attention on CUDA tensors against the CPU kernel (the twin): our own kernel
// (kOwn) for every float dtype, odd T and D up to 256, causal and not, q/k/v
// as strided views of a fused qkv buffer and gradients written into a fused
// dqkv buffer; cuDNN's fused attention (kCudnn) where it takes the case
// (bf16/f16, D a multiple of 8), and the automatic choice; grouped-query and
// multi-query attention (k, v with Hkv heads dividing H) through each, with
// Llama's fused [B, T, H + 2 Hkv, D] projection as views. Skips without a
// device. Each case prints which implementation ran under kAuto.
//
// Tolerances, |gpu - cpu| <= atol + rtol |cpu|:
// - ours: the per-element math is the CPU's (compiled without FMA
//   contraction); only the order of the fp32 sums differs: f32 1e-5 + 1e-4
//   (outputs) and 1e-4 + 1e-3 (gradients, sums over up to T terms); bf16/f16:
//   one rounding of the output type (GpuTol) plus 1e-3;
// - cuDNN: it rounds P and dS to the input type before its matmuls, so the
//   error scales with the largest value: atol = c * max|cpu| with c = 1/32
//   (bf16) or 1/256 (f16), rtol 2c.
// - grouped-query: dk and dv sum G = H / Hkv query heads' gradients, each
//   within the bounds above, so their absolute bound is G times (ours); for
//   cuDNN c scales with the largest dk, dv value, which already grows with G.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/attention.h"
#include "zeroshard/runtime/figures.h"
#include "zeroshard/tests/kernels/attention_bound.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::GpuTol;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;
using ::zeroshard::testing::Tol;

struct Shape4 {
  int64_t B, H, T, D;
  int64_t Hkv = 0;  // k and v heads; 0: H (multi-head)
  int64_t KvHeads() const { return Hkv == 0 ? H : Hkv; }
  std::string Name() const {
    return absl::StrCat("[", B, ", ", H, ", ", T, ", ", D, "]",
                        KvHeads() == H ? "" : absl::StrCat(" Hkv ", KvHeads()));
  }
};

struct Problem {
  Tensor q, k, v, dout;         // CPU, [B, H, T, D]
  AttentionOutputs fwd;         // CPU reference
  AttentionGrads grads;         // CPU reference
};

Problem MakeProblem(const Shape4& s, DType dtype, bool causal, uint64_t seed) {
  Problem p;
  p.q = RandomTensor({s.B, s.H, s.T, s.D}, dtype, -2, 2, seed);
  p.k = RandomTensor({s.B, s.KvHeads(), s.T, s.D}, dtype, -2, 2, seed + 1);
  p.v = RandomTensor({s.B, s.KvHeads(), s.T, s.D}, dtype, -1, 1, seed + 2);
  p.dout = RandomTensor({s.B, s.H, s.T, s.D}, dtype, -1, 1, seed + 3);
  p.fwd = AttentionForward(p.q, p.k, p.v, {.causal = causal}).value();
  p.grads = AttentionBackward(p.dout, p.q, p.k, p.v, p.fwd.out, p.fwd.lse, {.causal = causal}).value();
  return p;
}

Tol OwnTol(DType dtype, bool gradient) {
  if (dtype == DType::kF32) return gradient ? Tol{1e-4, 1e-3} : Tol{1e-5, 1e-4};
  Tol t = GpuTol(dtype);
  t.atol += 1e-3;
  return t;
}

double MaxAbs(const Tensor& t) {
  double m = 0;
  for (double x : ToDoubles(t)) m = std::max(m, std::fabs(x));
  return m;
}

Tol CudnnTol(DType dtype, const Tensor& want) {
  const double c = dtype == DType::kBF16 ? 1.0 / 32 : 1.0 / 256;
  return {c * std::max(MaxAbs(want), 1e-3), 2 * c};
}

std::vector<Shape4> Shapes() {
  // Shrunk (testing::ShrinkGpuTests: the simulator, the sanitizer runs): the
  // shapes up to T 64, still every D class (odd, 8, 33, 64).
  if (testing::ShrinkGpuTests()) return {{1, 1, 1, 8}, {2, 3, 17, 8}, {1, 2, 33, 7}, {1, 1, 40, 33}, {1, 2, 64, 64}};
  return {{1, 1, 1, 8},   {2, 3, 17, 8},   {1, 2, 33, 7},   {1, 1, 40, 33},  {1, 2, 64, 64},
          {2, 4, 129, 64}, {1, 2, 257, 128}, {1, 1, 50, 256}, {3, 1, 70, 48}};
}

// Runs forward and backward on the GPU with `impl`; false when the
// implementation refused the case (kCudnn and kTensorCore only), with the reason in *why.
bool RunOnGpu(const Problem& p, Allocator* gpu, const AttentionOptions& options,
              AttentionOutputs* fwd, AttentionGrads* grads, std::string* why) {
  const Tensor q = OnGpu(p.q, gpu), k = OnGpu(p.k, gpu), v = OnGpu(p.v, gpu);
  absl::StatusOr<AttentionOutputs> f = AttentionForward(q, k, v, options);
  if (!f.ok()) {
    *why = f.status().ToString();
    EXPECT_TRUE(options.impl != AttentionImpl::kAuto && options.impl != AttentionImpl::kOwn &&
                absl::IsUnimplemented(f.status()))
        << *why;
    return false;
  }
  absl::StatusOr<AttentionGrads> g =
      AttentionBackward(OnGpu(p.dout, gpu), q, k, v, f->out, f->lse, options);
  if (!g.ok()) {
    *why = g.status().ToString();
    EXPECT_TRUE(options.impl != AttentionImpl::kAuto && options.impl != AttentionImpl::kOwn &&
                absl::IsUnimplemented(g.status()))
        << *why;
    return false;
  }
  *fwd = *std::move(f);
  *grads = *std::move(g);
  return true;
}

// Query heads per kv head of a problem.
int64_t Group(const Problem& p) { return p.q.size(1) / p.k.size(1); }

// G times the absolute bound: a grouped dk, dv sums G heads' gradients.
Tol Grouped(Tol t, int64_t group) {
  t.atol *= static_cast<double>(group);
  return t;
}

void ExpectMatches(const AttentionOutputs& fwd, const AttentionGrads& grads, const Problem& p,
                   bool cudnn, DType dtype, const std::string& what) {
  auto tol = [&](const Tensor& want, bool gradient) {
    return cudnn ? CudnnTol(dtype, want) : OwnTol(dtype, gradient);
  };
  auto kv_tol = [&](const Tensor& want) {
    return cudnn ? CudnnTol(dtype, want) : Grouped(OwnTol(dtype, true), Group(p));
  };
  ExpectClose(fwd.out, p.fwd.out, tol(p.fwd.out, false), what + " out");
  // lse is f32 on both sides; cuDNN's comes from its fp32 softmax.
  ExpectClose(fwd.lse, p.fwd.lse, cudnn ? Tol{1e-3, 1e-3} : Tol{1e-5, 1e-5}, what + " lse");
  ExpectClose(grads.dq, p.grads.dq, tol(p.grads.dq, true), what + " dq");
  ASSERT_EQ(grads.dk.shape(), p.k.shape()) << what;
  ASSERT_EQ(grads.dv.shape(), p.v.shape()) << what;
  ExpectClose(grads.dk, p.grads.dk, kv_tol(p.grads.dk), what + " dk");
  ExpectClose(grads.dv, p.grads.dv, kv_tol(p.grads.dv), what + " dv");
}

std::vector<Shape4> GqaShapes() {
  // Grouped (Hkv 2, 3) and multi-query (Hkv 1); odd T and D for ours.
  if (testing::ShrinkGpuTests()) return {{2, 4, 17, 8, 2}, {1, 4, 33, 7, 1}, {1, 6, 64, 64, 3}};
  return {{2, 4, 17, 8, 2},    {1, 4, 33, 7, 1},    {1, 6, 64, 64, 3}, {1, 6, 64, 64, 1},
          {2, 8, 129, 64, 2},  {1, 4, 257, 128, 1}, {1, 4, 50, 256, 2}, {3, 4, 70, 48, 2}};
}

TEST(CudaAttention, OwnKernelMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (const Shape4& s : Shapes()) {
      for (bool causal : {true, false}) {
        const std::string what = absl::StrCat("own ", DTypeName(dtype), " ", s.Name(),
                                              causal ? " causal" : "");
        const Problem p = MakeProblem(s, dtype, causal, seed += 10);
        AttentionOutputs fwd;
        AttentionGrads grads;
        std::string why;
        ASSERT_TRUE(RunOnGpu(p, &gpu, {.causal = causal, .impl = AttentionImpl::kOwn}, &fwd,
                             &grads, &why))
            << what << ": " << why;
        ExpectMatches(fwd, grads, p, /*cudnn=*/false, dtype, what);
      }
    }
  }
}

TEST(CudaAttention, CudnnMatchesCpuWhereItTakesTheCase) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  CudaAllocator gpu(0);
  uint64_t seed = 500;
  int ran = 0, refused = 0;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape4& s : Shapes()) {
      if (s.D % 8 != 0) continue;
      for (bool causal : {true, false}) {
        const std::string what = absl::StrCat("cudnn ", DTypeName(dtype), " ", s.Name(),
                                              causal ? " causal" : "");
        const Problem p = MakeProblem(s, dtype, causal, seed += 10);
        AttentionOutputs fwd;
        AttentionGrads grads;
        std::string why;
        if (!RunOnGpu(p, &gpu, {.causal = causal, .impl = AttentionImpl::kCudnn}, &fwd, &grads,
                      &why)) {
          std::printf("  %s: cuDNN refused: %s\n", what.c_str(), why.c_str());
          ++refused;
          continue;
        }
        ++ran;
        ExpectMatches(fwd, grads, p, /*cudnn=*/true, dtype, what);
      }
    }
  }
  std::printf("cuDNN fused attention ran %d cases, refused %d\n", ran, refused);
  // For the GPU record (tools/gpu_bundle): which cases cuDNN took, as a figure.
  EmitFigure("cuda_attention_test", "cudnn attention refused", refused, "count", {{"ran", ran}});
  // bf16, D = 64, T = 64 is the flash engines' home ground: a refusal there
  // means the graph or the binding is wrong, not that the shape is exotic.
  const Problem p = MakeProblem({1, 2, 64, 64}, DType::kBF16, true, 9);
  AttentionOutputs fwd;
  AttentionGrads grads;
  std::string why;
  EXPECT_TRUE(RunOnGpu(p, &gpu, {.causal = true, .impl = AttentionImpl::kCudnn}, &fwd, &grads, &why))
      << why;
}

TEST(CudaAttention, AutoPicksAWorkingImplementation) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 900;
  for (DType dtype : kFloatDTypes) {
    for (const Shape4& s : {Shape4{2, 3, 17, 8}, Shape4{1, 4, 128, 64}, Shape4{1, 2, 33, 7}}) {
      const std::string what = absl::StrCat("auto ", DTypeName(dtype), " ", s.Name());
      const Problem p = MakeProblem(s, dtype, true, seed += 10);
      AttentionOutputs fwd;
      AttentionGrads grads;
      std::string why;
      ASSERT_TRUE(RunOnGpu(p, &gpu, {.causal = true}, &fwd, &grads, &why)) << what << ": " << why;
      // Either implementation may have run: the looser (cuDNN) tolerance for 16-bit.
      ExpectMatches(fwd, grads, p, /*cudnn=*/dtype != DType::kF32, dtype, what);
    }
  }
}

// q, k, v as views of one fused [B, T, 3, H, D] buffer (GPT's c_attn output),
// gradients into views of a fused [B, T, 3, H, D] buffer: strided in T and H,
// unit stride in D, and a transposed layout with a strided D for our kernel.
TEST(CudaAttention, FusedAndTransposedViews) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t B = 2, T = 45, H = 3, D = 16;
  for (DType dtype : kFloatDTypes) {
    for (AttentionImpl impl : {AttentionImpl::kOwn, AttentionImpl::kAuto}) {
      const std::string what = absl::StrCat("fused ", DTypeName(dtype), impl == AttentionImpl::kOwn ? " own" : " auto");
      const Tensor qkv = RandomTensor({B, T, 3, H, D}, dtype, -2, 2, 77);
      const Tensor dout = RandomTensor({B, H, T, D}, dtype, -1, 1, 78);
      auto heads = [](const Tensor& fused, int64_t i) {
        return fused.Narrow(2, i, 1).value().Squeeze(2).value().Permute({0, 2, 1, 3}).value();
      };
      // CPU reference on the same views.
      const Tensor q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
      ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs want, AttentionForward(q, k, v));
      ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads want_g,
                              AttentionBackward(dout, q, k, v, want.out, want.lse));
      const Tensor qkv_d = OnGpu(qkv, &gpu), dout_d = OnGpu(dout, &gpu);
      const Tensor qd = heads(qkv_d, 0), kd = heads(qkv_d, 1), vd = heads(qkv_d, 2);
      ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs got, AttentionForward(qd, kd, vd, {.impl = impl}));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor dqkv, Tensor::Zeros({B, T, 3, H, D}, dtype, &gpu));
      ZS_ASSERT_OK(AttentionBackward(dout_d, qd, kd, vd, got.out, got.lse, heads(dqkv, 0),
                                     heads(dqkv, 1), heads(dqkv, 2), {.impl = impl}));
      const bool loose = impl == AttentionImpl::kAuto && dtype != DType::kF32;
      auto tol = [&](const Tensor& w, bool g) { return loose ? CudnnTol(dtype, w) : OwnTol(dtype, g); };
      ExpectClose(got.out, want.out, tol(want.out, false), what + " out");
      ExpectClose(heads(dqkv, 0), want_g.dq, tol(want_g.dq, true), what + " dq");
      ExpectClose(heads(dqkv, 1), want_g.dk, tol(want_g.dk, true), what + " dk");
      ExpectClose(heads(dqkv, 2), want_g.dv, tol(want_g.dv, true), what + " dv");
    }
    // D strided: a [B, H, D, T] buffer seen as [B, H, T, D] (ours only takes it).
    const Tensor qt = RandomTensor({1, 2, D, T}, dtype, -2, 2, 80);
    const Tensor q = qt.Transpose(2, 3).value();
    ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs want, AttentionForward(q, q, q));
    const Tensor qd = OnGpu(qt, &gpu).Transpose(2, 3).value();
    ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs got, AttentionForward(qd, qd, qd));
    ExpectClose(got.out, want.out, OwnTol(dtype, false), "strided D out");
  }
}

// The GPT's packed layout as ops::QkvAttention hands it over (Note [Packed
// attention]): q, k, v views of [B, T, 3, H, D], the output written into a
// [B, T, H, D] buffer read as [B, H, T, D], the gradients into views of one
// [B, T, 3, H, D] buffer. cuDNN must take it (kCudnn): a refusal here would
// send every GPT step to our kernel under kAuto.
TEST(CudaAttention, CudnnTakesTheGptPackedLayout) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  CudaAllocator gpu(0);
  const int64_t B = 2, T = 128, H = 4, D = 64;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const std::string what = absl::StrCat("packed ", DTypeName(dtype));
    SCOPED_TRACE(what);
    auto heads = [](const Tensor& fused, int64_t i) {
      return fused.Narrow(2, i, 1).value().Squeeze(2).value().Permute({0, 2, 1, 3}).value();
    };
    auto merged = [](const Tensor& bthd) { return bthd.Permute({0, 2, 1, 3}).value(); };
    const Tensor qkv = RandomTensor({B, T, 3, H, D}, dtype, -2, 2, 91);
    const Tensor dout_bthd = RandomTensor({B, T, H, D}, dtype, -1, 1, 92);
    const Tensor q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
    ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs want, AttentionForward(q, k, v, {.causal = true}));
    ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads want_g, AttentionBackward(merged(dout_bthd), q, k, v, want.out,
                                                                     want.lse, {.causal = true}));
    const Tensor qkv_d = OnGpu(qkv, &gpu), dout_d = merged(OnGpu(dout_bthd, &gpu));
    const Tensor qd = heads(qkv_d, 0), kd = heads(qkv_d, 1), vd = heads(qkv_d, 2);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out_bthd, Tensor::Empty({B, T, H, D}, dtype, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor lse, Tensor::Empty({B, H, T}, DType::kF32, &gpu));
    const AttentionOptions cudnn{.causal = true, .impl = AttentionImpl::kCudnn};
    ZS_ASSERT_OK(AttentionForward(qd, kd, vd, merged(out_bthd), lse, cudnn));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dqkv, Tensor::Zeros({B, T, 3, H, D}, dtype, &gpu));
    ZS_ASSERT_OK(AttentionBackward(dout_d, qd, kd, vd, merged(out_bthd), lse, heads(dqkv, 0), heads(dqkv, 1),
                                   heads(dqkv, 2), cudnn));
    ExpectClose(merged(out_bthd), want.out, CudnnTol(dtype, want.out), what + " out");
    ExpectClose(heads(dqkv, 0), want_g.dq, CudnnTol(dtype, want_g.dq), what + " dq");
    ExpectClose(heads(dqkv, 1), want_g.dk, CudnnTol(dtype, want_g.dk), what + " dk");
    ExpectClose(heads(dqkv, 2), want_g.dv, CudnnTol(dtype, want_g.dv), what + " dv");
  }
}

// ---------------------------------------------------------------- tensor cores

// Our tensor-core kernels (Note [Tensor-core attention]) through the op entry
// (kTensorCore) against attention in double, within the bound derived in
// tests/kernels/attention_bound.h; every call counted as a tensor-core run;
// two runs give the same bits (no atomics).
TEST(CudaAttention, TensorCoreWithinTheDerivedBound) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const std::vector<Shape4> shapes =
      testing::ShrinkGpuTests()
          ? std::vector<Shape4>{{1, 2, 70, 64}, {1, 2, 17, 128, 1}, {1, 1, 33, 80}}
          : std::vector<Shape4>{{1, 2, 130, 64}, {2, 4, 129, 64, 2}, {1, 2, 257, 128}, {1, 4, 64, 128, 1},
                                {1, 1, 1, 64},   {1, 2, 65, 16},     {1, 2, 100, 80}, {1, 2, 70, 96, 1}};
  uint64_t seed = 2100;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape4& s : shapes) {
      for (bool causal : {true, false}) {
        const std::string what = absl::StrCat("tensor-core ", DTypeName(dtype), " ", s.Name(),
                                              causal ? " causal" : "");
        SCOPED_TRACE(what);
        const Problem p = MakeProblem(s, dtype, causal, seed += 10);
        const AttentionOptions tc{.causal = causal, .impl = AttentionImpl::kTensorCore};
        const AttentionKernelCounts before = AttentionKernelCountsNow();
        AttentionOutputs fwd, fwd2;
        AttentionGrads grads, grads2;
        std::string why;
        ASSERT_TRUE(RunOnGpu(p, &gpu, tc, &fwd, &grads, &why)) << why;
        ASSERT_TRUE(RunOnGpu(p, &gpu, tc, &fwd2, &grads2, &why)) << why;
        const AttentionKernelCounts after = AttentionKernelCountsNow();
        EXPECT_EQ(after.tensor_core - before.tensor_core, 4);  // two forwards, two backwards
        EXPECT_EQ(after.scalar - before.scalar, 0);
        EXPECT_EQ(ToDoubles(fwd.out), ToDoubles(fwd2.out));
        EXPECT_EQ(ToDoubles(grads.dk), ToDoubles(grads2.dk));
        EXPECT_EQ(ToDoubles(grads.dq), ToDoubles(grads2.dq));
        const Tensor out = fwd.out.To(DefaultCpuAllocator()).value(), lse = fwd.lse.To(DefaultCpuAllocator()).value();
        const testing::AttentionBound ref = testing::ReferenceAttention(
            p.q, p.k, p.v, p.dout, out, lse, 1.0 / std::sqrt(static_cast<double>(s.D)), causal, dtype);
        testing::ExpectWithinBound(out, ref.out, ref.out_bound, what + " out");
        testing::ExpectWithinBound(lse, ref.lse, ref.lse_bound, what + " lse");
        testing::ExpectWithinBound(grads.dq.To(DefaultCpuAllocator()).value(), ref.dq, ref.dq_bound, what + " dq");
        testing::ExpectWithinBound(grads.dk.To(DefaultCpuAllocator()).value(), ref.dk, ref.dk_bound, what + " dk");
        testing::ExpectWithinBound(grads.dv.To(DefaultCpuAllocator()).value(), ref.dv, ref.dv_bound, what + " dv");
      }
    }
  }
}

TEST(CudaAttention, TensorCoreRefusesWhatItDoesNotTake) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const AttentionOptions tc{.causal = true, .impl = AttentionImpl::kTensorCore};
  struct Refused {
    Shape4 shape;
    DType dtype;
    const char* why;
  };
  for (const Refused& r : {Refused{{1, 1, 16, 64}, DType::kF32, "takes bf16 or f16"},
                           Refused{{1, 1, 16, 72}, DType::kBF16, "takes multiples of 16 up to 128"},
                           Refused{{1, 1, 16, 256}, DType::kF16, "takes multiples of 16 up to 128"}}) {
    const Problem p = MakeProblem(r.shape, r.dtype, true, 2500);
    absl::StatusOr<AttentionOutputs> f =
        AttentionForward(OnGpu(p.q, &gpu), OnGpu(p.k, &gpu), OnGpu(p.v, &gpu), tc);
    ASSERT_FALSE(f.ok()) << r.shape.Name();
    EXPECT_TRUE(absl::IsUnimplemented(f.status())) << f.status();
    EXPECT_THAT(std::string(f.status().message()), ::testing::HasSubstr(r.why));
  }
  // A strided head dim: our scalar kernel takes it under kAuto, the tensor-core one refuses.
  const Tensor qt = OnGpu(RandomTensor({1, 2, 64, 32}, DType::kBF16, -1, 1, 2600), &gpu);
  const Tensor q = qt.Transpose(2, 3).value();
  absl::StatusOr<AttentionOutputs> f = AttentionForward(q, q, q, tc);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), ::testing::HasSubstr("strided along the head dim"));
  const AttentionKernelCounts before = AttentionKernelCountsNow();
  ZS_EXPECT_OK(AttentionForward(q, q, q, {.causal = true}).status());
  EXPECT_EQ(AttentionKernelCountsNow().scalar - before.scalar, 1);
}

// kAuto never runs the scalar kernel where cuDNN or the tensor-core kernel
// takes the call (on the simulator, without cuDNN, the tensor-core kernel).
TEST(CudaAttention, AutoRunsTheScalarKernelOnlyWhereNothingFasterTakesTheCall) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const Problem p = MakeProblem({1, 2, 64, 64}, dtype, true, 2700);
    const AttentionKernelCounts before = AttentionKernelCountsNow();
    AttentionOutputs fwd;
    AttentionGrads grads;
    std::string why;
    ASSERT_TRUE(RunOnGpu(p, &gpu, {.causal = true}, &fwd, &grads, &why)) << why;
    const AttentionKernelCounts after = AttentionKernelCountsNow();
    EXPECT_EQ(after.scalar - before.scalar, 0) << DTypeName(dtype);
    EXPECT_EQ((after.cudnn - before.cudnn) + (after.tensor_core - before.tensor_core), 2) << DTypeName(dtype);
    std::printf("auto %s [1, 2, 64, 64]: %lld cuDNN, %lld tensor-core runs\n", std::string(DTypeName(dtype)).c_str(),
                static_cast<long long>(after.cudnn - before.cudnn),
                static_cast<long long>(after.tensor_core - before.tensor_core));
  }
}

// SetDefaultAttentionImpl steers the calls that leave impl at kAuto (what the
// GPT and Llama make): the scalar kernel when set to kOwn, and back.
TEST(CudaAttention, DefaultImplSteersAutoCalls) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const Problem p = MakeProblem({1, 2, 64, 64}, DType::kBF16, true, 2800);
  SetDefaultAttentionImpl(AttentionImpl::kOwn);
  const AttentionKernelCounts before = AttentionKernelCountsNow();
  AttentionOutputs fwd;
  AttentionGrads grads;
  std::string why;
  const bool ran = RunOnGpu(p, &gpu, {.causal = true}, &fwd, &grads, &why);
  SetDefaultAttentionImpl(AttentionImpl::kAuto);
  ASSERT_TRUE(ran) << why;
  EXPECT_EQ(AttentionKernelCountsNow().scalar - before.scalar, 2);
  ExpectMatches(fwd, grads, p, /*cudnn=*/false, DType::kBF16, "default kOwn");
}

// ---------------------------------------------------------------- grouped-query

TEST(CudaAttention, GroupedQueryOwnKernelMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  uint64_t seed = 1100;
  for (DType dtype : kFloatDTypes) {
    for (const Shape4& s : GqaShapes()) {
      for (bool causal : {true, false}) {
        const std::string what = absl::StrCat("own gqa ", DTypeName(dtype), " ", s.Name(),
                                              causal ? " causal" : "");
        const Problem p = MakeProblem(s, dtype, causal, seed += 10);
        AttentionOutputs fwd;
        AttentionGrads grads;
        std::string why;
        ASSERT_TRUE(RunOnGpu(p, &gpu, {.causal = causal, .impl = AttentionImpl::kOwn}, &fwd,
                             &grads, &why))
            << what << ": " << why;
        ExpectMatches(fwd, grads, p, /*cudnn=*/false, dtype, what);
      }
    }
  }
}

TEST(CudaAttention, GroupedQueryOwnBackwardIsBitwiseRepeatable) {
  // The group's dK, dV are summed in a fixed order (no atomics): two runs give
  // the same bits.
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  for (int64_t kv_heads : {2, 1}) {
    const Problem p = MakeProblem({2, 4, 45, 16, kv_heads}, DType::kBF16, true, 1300 + kv_heads);
    const AttentionOptions own{.causal = true, .impl = AttentionImpl::kOwn};
    AttentionOutputs f1, f2;
    AttentionGrads g1, g2;
    std::string why;
    ASSERT_TRUE(RunOnGpu(p, &gpu, own, &f1, &g1, &why)) << why;
    ASSERT_TRUE(RunOnGpu(p, &gpu, own, &f2, &g2, &why)) << why;
    EXPECT_EQ(ToDoubles(g1.dk), ToDoubles(g2.dk)) << "Hkv " << kv_heads;
    EXPECT_EQ(ToDoubles(g1.dv), ToDoubles(g2.dv)) << "Hkv " << kv_heads;
    EXPECT_EQ(ToDoubles(g1.dq), ToDoubles(g2.dq)) << "Hkv " << kv_heads;
  }
}

TEST(CudaAttention, GroupedQueryCudnnMatchesCpuWhereItTakesTheCase) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  CudaAllocator gpu(0);
  uint64_t seed = 1500;
  int ran = 0, refused = 0;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape4& s : GqaShapes()) {
      if (s.D % 8 != 0) continue;
      for (bool causal : {true, false}) {
        const std::string what = absl::StrCat("cudnn gqa ", DTypeName(dtype), " ", s.Name(),
                                              causal ? " causal" : "");
        const Problem p = MakeProblem(s, dtype, causal, seed += 10);
        AttentionOutputs fwd;
        AttentionGrads grads;
        std::string why;
        if (!RunOnGpu(p, &gpu, {.causal = causal, .impl = AttentionImpl::kCudnn}, &fwd, &grads,
                      &why)) {
          std::printf("  %s: cuDNN refused: %s\n", what.c_str(), why.c_str());
          ++refused;
          continue;
        }
        ++ran;
        ExpectMatches(fwd, grads, p, /*cudnn=*/true, dtype, what);
      }
    }
  }
  std::printf("cuDNN fused grouped-query attention ran %d cases, refused %d\n", ran, refused);
  // Named like the figure above, so gpu_record --check flags a refusal here too.
  EmitFigure("cuda_attention_test", "cudnn attention refused (gqa)", refused, "count", {{"ran", ran}});
  // bf16, D = 64: cuDNN's SDPA takes h_k dividing h_q (its frontend builds
  // this very graph), so a refusal means our graph or binding is wrong.
  for (int64_t kv_heads : {2, 1}) {
    const Problem p = MakeProblem({1, 4, 64, 64, kv_heads}, DType::kBF16, true, 19 + kv_heads);
    AttentionOutputs fwd;
    AttentionGrads grads;
    std::string why;
    EXPECT_TRUE(RunOnGpu(p, &gpu, {.causal = true, .impl = AttentionImpl::kCudnn}, &fwd, &grads,
                         &why))
        << "Hkv " << kv_heads << ": " << why;
  }
}

// Llama's layout: one projection [B, T, (H + 2 Hkv) D] seen as
// [B, T, H + 2 Hkv, D], q the first H heads, k and v the next Hkv each, as
// [B, heads, T, D] views; gradients into the same views of one buffer.
TEST(CudaAttention, GroupedQueryFusedProjectionViews) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const int64_t B = 2, T = 45, H = 4, D = 16;
  for (DType dtype : kFloatDTypes) {
    for (int64_t kv_heads : {2, 1}) {
      for (AttentionImpl impl : {AttentionImpl::kOwn, AttentionImpl::kAuto}) {
        const int64_t W = H + 2 * kv_heads, G = H / kv_heads;
        const std::string what = absl::StrCat("fused gqa ", DTypeName(dtype), " Hkv ", kv_heads,
                                              impl == AttentionImpl::kOwn ? " own" : " auto");
        const Tensor fused = RandomTensor({B, T, W, D}, dtype, -2, 2, 90 + kv_heads);
        const Tensor dout = RandomTensor({B, H, T, D}, dtype, -1, 1, 95);
        auto heads = [](const Tensor& t, int64_t first, int64_t n) {
          return t.Narrow(2, first, n).value().Permute({0, 2, 1, 3}).value();
        };
        const Tensor q = heads(fused, 0, H), k = heads(fused, H, kv_heads),
                     v = heads(fused, H + kv_heads, kv_heads);
        ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs want, AttentionForward(q, k, v));
        ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads want_g,
                                AttentionBackward(dout, q, k, v, want.out, want.lse));
        const Tensor fused_d = OnGpu(fused, &gpu), dout_d = OnGpu(dout, &gpu);
        const Tensor qd = heads(fused_d, 0, H), kd = heads(fused_d, H, kv_heads),
                     vd = heads(fused_d, H + kv_heads, kv_heads);
        ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs got, AttentionForward(qd, kd, vd, {.impl = impl}));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dfused, Tensor::Zeros({B, T, W, D}, dtype, &gpu));
        ZS_ASSERT_OK(AttentionBackward(dout_d, qd, kd, vd, got.out, got.lse,
                                       heads(dfused, 0, H), heads(dfused, H, kv_heads),
                                       heads(dfused, H + kv_heads, kv_heads), {.impl = impl}));
        const bool loose = impl == AttentionImpl::kAuto && dtype != DType::kF32;
        auto tol = [&](const Tensor& w, bool g) { return loose ? CudnnTol(dtype, w) : OwnTol(dtype, g); };
        auto kv_tol = [&](const Tensor& w) {
          return loose ? CudnnTol(dtype, w) : Grouped(OwnTol(dtype, true), G);
        };
        ExpectClose(got.out, want.out, tol(want.out, false), what + " out");
        ExpectClose(heads(dfused, 0, H), want_g.dq, tol(want_g.dq, true), what + " dq");
        ExpectClose(heads(dfused, H, kv_heads), want_g.dk, kv_tol(want_g.dk), what + " dk");
        ExpectClose(heads(dfused, H + kv_heads, kv_heads), want_g.dv, kv_tol(want_g.dv),
                    what + " dv");
      }
    }
  }
}

TEST(CudaAttention, ForcedCudnnSaysWhyNot) {
  ZS_SKIP_WITHOUT_CUDA();
  ZS_SKIP_ON_CUDA_SIM("cuDNN");
  CudaAllocator gpu(0);
  const Tensor q = OnGpu(RandomTensor({1, 1, 8, 8}, DType::kF32, -1, 1, 3), &gpu);
  EXPECT_THAT(AttentionForward(q, q, q, {.impl = AttentionImpl::kCudnn}).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kUnimplemented,
                                             ::testing::HasSubstr("dtype f32")));
  const Tensor big = OnGpu(RandomTensor({1, 1, 4, 264}, DType::kF32, -1, 1, 4), &gpu);
  EXPECT_THAT(AttentionForward(big, big, big).status(),
              ::zeroshard::testing::StatusIs(absl::StatusCode::kUnimplemented,
                                             ::testing::HasSubstr("at most 256")));
}

}  // namespace
}  // namespace zeroshard
