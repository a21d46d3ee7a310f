// Attention TFLOP/s: our scalar kernel (kernels/cuda/attention.cu) and our
// tensor-core kernel (kernels/cuda/attention_tc.cu, Note [Tensor-core
// attention]) beside cuDNN's fused flash attention, forward and backward,
// causal, bf16, GPT shapes.
// FLOPs of causal attention (half the T x T scores):
//   forward  = 2 matmuls of 2 T^2 D each, halved = 2 B H T^2 D
//   backward = 5 matmuls (S, dV, dP, dQ, dK) halved = 5 B H T^2 D
// Checks before timing: ours (both) against the CPU kernel on a small case, and
// the tensor-core kernel's and cuDNN's outputs against the scalar kernel's on
// the timed shapes (bf16 tolerances). Quick mode: two small shapes; on the
// simulator, which has no cuDNN, ours only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/bench/cuda_bench_util.h"
#include "zeroshard/kernels/attention.h"
#include "zeroshard/runtime/cuda/caching_allocator.h"

namespace zeroshard::bench {

namespace {

// max |a - b| <= tol * max |b| (the error of a bf16 softmax-weighted sum scales with its largest value).
bool CloseScaled(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const std::vector<double> x = Must(a.ToVector<double>(), "to host");
  const std::vector<double> y = Must(b.ToVector<double>(), "to host");
  double scale = 1e-3, err = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    scale = std::max(scale, std::fabs(y[i]));
    err = std::max(err, std::fabs(x[i] - y[i]));
  }
  if (!(err <= tol * scale)) {
    Fail(absl::StrCat(what, ": max |difference| ", err, " > ", tol, " x max ", scale));
    return false;
  }
  return true;
}

const char* ImplName(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::kCudnn: return "cuDNN";
    case AttentionImpl::kTensorCore: return "ours (tensor cores)";
    default: return "ours";
  }
}

}  // namespace

void RunAttentionBenches() {
  // Operands and scratch (cuDNN's workspace, the backward's dQ accumulator and
  // row sums, our kernel's delta) from the caching allocator, as in a training
  // step. With a plain CudaAllocator every call made a cudaMalloc and a
  // synchronising cudaFree of its scratch inside the timed region: on the H100
  // record the backward at the GPT-2 shape read 268-314 us here against about
  // 150 us inside the step's trace.
  CudaBacking backing(kDevice);
  CachingAllocator cache(&backing, {.device = Device::Cuda(kDevice)});
  CachingStreamAllocator gpu(&cache, /*stream=*/nullptr, "compute");  // the legacy default stream
  const Stream stream = Stream::Default(Device::Cuda(kDevice));  // where the op entries launch
  {  // Ours against the CPU twin.
    const Tensor q = Random({1, 2, 77, 64}, DType::kBF16, -2, 2, 1);
    const Tensor k = Random({1, 2, 77, 64}, DType::kBF16, -2, 2, 2);
    const Tensor v = Random({1, 2, 77, 64}, DType::kBF16, -1, 1, 3);
    const AttentionOutputs want = Must(AttentionForward(q, k, v), "cpu attention");
    for (AttentionImpl impl : {AttentionImpl::kOwn, AttentionImpl::kTensorCore}) {
      const AttentionOutputs got =
          Must(AttentionForward(Must(q.To(&gpu), "q"), Must(k.To(&gpu), "k"), Must(v.To(&gpu), "v"),
                                {.impl = impl}),
               "our attention");
      CloseScaled(got.out, want.out, 1.0 / 64,
                  impl == AttentionImpl::kOwn ? "our scalar attention vs cpu" : "our tensor-core attention vs cpu");
    }
  }
  std::printf("\n%-40s %9s %9s %9s %9s\n", "attention (causal, bf16)", "fwd us", "fwd TF/s", "bwd us",
              "bwd TF/s");
  struct Case {
    int64_t B, H, T, D;
  };
  const std::vector<Case> cases =
      Mode().quick ? std::vector<Case>{{1, 2, 64, 64}, {1, 2, 128, 128}}
                   : std::vector<Case>{{8, 12, 1024, 64}, {4, 16, 2048, 128}, {2, 32, 4096, 128}};
  // cuDNN cannot create a handle on the simulator (docs/gpu.md): not a refusal
  // to record there, where the record's checker would fail on it.
  const bool try_cudnn = !Mode().simulator;
  for (const Case& c : cases) {
    const Tensor q = Random({c.B, c.H, c.T, c.D}, DType::kBF16, -2, 2, 11, &gpu);
    const Tensor k = Random({c.B, c.H, c.T, c.D}, DType::kBF16, -2, 2, 12, &gpu);
    const Tensor v = Random({c.B, c.H, c.T, c.D}, DType::kBF16, -1, 1, 13, &gpu);
    const Tensor dout = Random({c.B, c.H, c.T, c.D}, DType::kBF16, -1, 1, 14, &gpu);
    const double fwd_flops = 2.0 * c.B * c.H * c.T * c.T * c.D;
    const double bwd_flops = 2.5 * fwd_flops;
    // Note [Roofline]: each pass's bf16 tensors once (scores stay on chip) and
    // the f32 log-sum-exp: forward reads q, k, v and writes out and lse;
    // backward reads q, k, v, out, dout and lse and writes dq, dk, dv.
    const double qkvo = 2.0 * c.B * c.H * c.T * c.D, lse = 4.0 * c.B * c.H * c.T;
    const double fwd_bytes = 4 * qkvo + lse, bwd_bytes = 8 * qkvo + lse;
    auto roofline = [&](double flops, double bytes, double ms) {
      std::vector<std::pair<std::string, double>> f = {{"us", ms * 1e3}};
      for (auto& r : RooflineFields(flops, bytes, flops / (ms * 1e-3), Card().half_flops)) f.push_back(r);
      return f;
    };
    struct Timing {
      bool ran = false;
      double fwd_ms = 0, bwd_ms = 0;
      AttentionOutputs out;
      AttentionGrads grads;
    };
    auto measure = [&](AttentionImpl impl) {
      Timing t;
      const AttentionOptions o{.causal = true, .impl = impl};
      absl::StatusOr<AttentionOutputs> f = AttentionForward(q, k, v, o);
      if (!f.ok()) {
        std::printf("  %s: %s\n", ImplName(impl), f.status().ToString().c_str());
        return t;
      }
      t.out = *std::move(f);
      absl::StatusOr<AttentionGrads> g = AttentionBackward(dout, q, k, v, t.out.out, t.out.lse, o);
      if (!g.ok()) {
        std::printf("  backward: %s\n", g.status().ToString().c_str());
        return t;
      }
      t.grads = *std::move(g);
      // Into preallocated outputs, so that the timing is the kernels'.
      t.fwd_ms = TimeMs(stream, [&] { Must(AttentionForward(q, k, v, t.out.out, t.out.lse, o), "fwd"); }, Iters(10));
      t.bwd_ms = TimeMs(stream, [&] {
        Must(AttentionBackward(dout, q, k, v, t.out.out, t.out.lse, t.grads.dq, t.grads.dk,
                               t.grads.dv, o),
             "bwd");
      }, Iters(10));
      t.ran = true;
      return t;
    };
    const Timing own = measure(AttentionImpl::kOwn);
    const Timing tc = measure(AttentionImpl::kTensorCore);
    const Timing cudnn = try_cudnn ? measure(AttentionImpl::kCudnn) : Timing{};
    const std::string name = absl::StrCat("B", c.B, " H", c.H, " T", c.T, " D", c.D);
    if (own.ran && tc.ran) {
      // The bound of tests/kernels/attention_bound.h is about 2 u16 max|v|
      // for out: 1/64 is twice that; the gradients sum over T terms, 1/16.
      CloseScaled(tc.out.out, own.out.out, 1.0 / 64, name + " out, tensor-core vs scalar");
      CloseScaled(tc.grads.dq, own.grads.dq, 1.0 / 16, name + " dq, tensor-core vs scalar");
      CloseScaled(tc.grads.dv, own.grads.dv, 1.0 / 16, name + " dv, tensor-core vs scalar");
    }
    if (own.ran && cudnn.ran) {
      CloseScaled(cudnn.out.out, own.out.out, 1.0 / 32, name + " out, cuDNN vs ours");
      CloseScaled(cudnn.grads.dq, own.grads.dq, 1.0 / 16, name + " dq, cuDNN vs ours");
      CloseScaled(cudnn.grads.dv, own.grads.dv, 1.0 / 16, name + " dv, cuDNN vs ours");
    }
    auto tf = [](double flops, double ms) { return flops / (ms * 1e9); };
    const std::string json = "cuda/attention/" + Slug(name) + "/";
    // One line, JSON entries and figures per implementation that ran; the
    // scalar kernel's rows are the baseline of the tensor-core ones, cuDNN's
    // of both where it ran.
    struct Row {
      const Timing* t;
      const char* label;  // figure and JSON name part
    };
    for (const Row& row : {Row{&own, "ours"}, Row{&tc, "tensor-core"}, Row{&cudnn, "cudnn"}}) {
      const std::string line = name + " " + row.label;
      if (!row.t->ran) {
        if (row.t != &cudnn || try_cudnn) std::printf("%-40s   (did not run)\n", line.c_str());
        continue;
      }
      std::printf("%-40s %9.1f %9.1f %9.1f %9.1f\n", line.c_str(), row.t->fwd_ms * 1e3,
                  tf(fwd_flops, row.t->fwd_ms), row.t->bwd_ms * 1e3, tf(bwd_flops, row.t->bwd_ms));
      const std::string slug = row.t == &own ? "ours" : row.t == &tc ? "tensor_core" : "cudnn";
      const std::string base = row.t == &cudnn ? "" : cudnn.ran ? "cudnn" : row.t == &tc && own.ran ? "ours" : "";
      Report().Add(json + "fwd_" + slug, "TFLOP/s", /*higher_is_better=*/true, {tf(fwd_flops, row.t->fwd_ms)},
                   base.empty() ? "" : json + "fwd_" + base);
      Report().Add(json + "bwd_" + slug, "TFLOP/s", true, {tf(bwd_flops, row.t->bwd_ms)},
                   base.empty() ? "" : json + "bwd_" + base);
      EmitFigure("cuda_bench", std::string("attention fwd ") + row.label + " " + name, tf(fwd_flops, row.t->fwd_ms),
                 "TFLOP/s", roofline(fwd_flops, fwd_bytes, row.t->fwd_ms));
      EmitFigure("cuda_bench", std::string("attention bwd ") + row.label + " " + name, tf(bwd_flops, row.t->bwd_ms),
                 "TFLOP/s", roofline(bwd_flops, bwd_bytes, row.t->bwd_ms));
    }
    if (!tc.ran) Fail(name + ": our tensor-core attention did not run");
    // The record's checker fails a run where cuDNN refused a case it is expected to take.
    if (try_cudnn) {
      EmitFigure("cuda_bench", "attention cudnn refused " + name, cudnn.ran ? 0 : 1, "count");
    }
  }
}

}  // namespace zeroshard::bench
