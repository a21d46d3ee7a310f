// Attention TFLOP/s: our kernel (kernels/cuda/attention.cu) beside cuDNN's
// fused flash attention, forward and backward, causal, bf16, GPT shapes.
// FLOPs of causal attention (half the T x T scores):
//   forward  = 2 matmuls of 2 T^2 D each, halved = 2 B H T^2 D
//   backward = 5 matmuls (S, dV, dP, dQ, dK) halved = 5 B H T^2 D
// Checks before timing: ours against the CPU kernel on a small case, and
// cuDNN's outputs against ours on the timed shapes (bf16 tolerances).
// Quick mode: two small shapes; on the simulator, which has no cuDNN, ours only.
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
    const AttentionOutputs got =
        Must(AttentionForward(Must(q.To(&gpu), "q"), Must(k.To(&gpu), "k"), Must(v.To(&gpu), "v"),
                              {.impl = AttentionImpl::kOwn}),
             "our attention");
    CloseScaled(got.out, want.out, 1.0 / 64, "our attention vs cpu");
  }
  std::printf("\n%-36s %9s %9s %9s %9s %9s %9s\n", "attention (causal, bf16)", "fwd us",
              "fwd TF/s", "bwd us", "bwd TF/s", "cuDNN f", "cuDNN b");
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
        std::printf("  %s: %s\n", impl == AttentionImpl::kCudnn ? "cuDNN" : "ours",
                    f.status().ToString().c_str());
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
    const Timing cudnn = try_cudnn ? measure(AttentionImpl::kCudnn) : Timing{};
    const std::string name = absl::StrCat("B", c.B, " H", c.H, " T", c.T, " D", c.D);
    if (own.ran && cudnn.ran) {
      CloseScaled(cudnn.out.out, own.out.out, 1.0 / 32, name + " out, cuDNN vs ours");
      CloseScaled(cudnn.grads.dq, own.grads.dq, 1.0 / 16, name + " dq, cuDNN vs ours");
      CloseScaled(cudnn.grads.dv, own.grads.dv, 1.0 / 16, name + " dv, cuDNN vs ours");
    }
    auto tf = [](double flops, double ms) { return flops / (ms * 1e9); };
    std::printf("%-36s", (name + " ours").c_str());
    if (own.ran) {
      std::printf(" %9.1f %9.1f %9.1f %9.1f", own.fwd_ms * 1e3, tf(fwd_flops, own.fwd_ms),
                  own.bwd_ms * 1e3, tf(bwd_flops, own.bwd_ms));
    }
    if (cudnn.ran) {
      std::printf(" %9.1f %9.1f\n%-36s %9.1f %9.1f %9.1f %9.1f\n", tf(fwd_flops, cudnn.fwd_ms),
                  tf(bwd_flops, cudnn.bwd_ms), (name + " cuDNN").c_str(), cudnn.fwd_ms * 1e3,
                  tf(fwd_flops, cudnn.fwd_ms), cudnn.bwd_ms * 1e3, tf(bwd_flops, cudnn.bwd_ms));
    } else {
      std::printf(try_cudnn ? "   (cuDNN did not run)\n" : "   (no cuDNN on the simulator)\n");
    }
    const std::string json = "cuda/attention/" + Slug(name) + "/";
    if (cudnn.ran) {
      Report().Add(json + "fwd_cudnn", "TFLOP/s", /*higher_is_better=*/true, {tf(fwd_flops, cudnn.fwd_ms)});
      Report().Add(json + "bwd_cudnn", "TFLOP/s", true, {tf(bwd_flops, cudnn.bwd_ms)});
    }
    if (own.ran) {
      Report().Add(json + "fwd_ours", "TFLOP/s", true, {tf(fwd_flops, own.fwd_ms)},
                   cudnn.ran ? json + "fwd_cudnn" : "");
      Report().Add(json + "bwd_ours", "TFLOP/s", true, {tf(bwd_flops, own.bwd_ms)},
                   cudnn.ran ? json + "bwd_cudnn" : "");
    }
    if (own.ran) {
      EmitFigure("cuda_bench", "attention fwd ours " + name, tf(fwd_flops, own.fwd_ms), "TFLOP/s",
                 roofline(fwd_flops, fwd_bytes, own.fwd_ms));
      EmitFigure("cuda_bench", "attention bwd ours " + name, tf(bwd_flops, own.bwd_ms), "TFLOP/s",
                 roofline(bwd_flops, bwd_bytes, own.bwd_ms));
    }
    if (cudnn.ran) {
      EmitFigure("cuda_bench", "attention fwd cudnn " + name, tf(fwd_flops, cudnn.fwd_ms), "TFLOP/s",
                 roofline(fwd_flops, fwd_bytes, cudnn.fwd_ms));
      EmitFigure("cuda_bench", "attention bwd cudnn " + name, tf(bwd_flops, cudnn.bwd_ms), "TFLOP/s",
                 roofline(bwd_flops, bwd_bytes, cudnn.bwd_ms));
    }
    // The record's checker fails a run where cuDNN refused a case it is expected to take.
    if (try_cudnn) {
      EmitFigure("cuda_bench", "attention cudnn refused " + name, cudnn.ran ? 0 : 1, "count");
    }
  }
}

}  // namespace zeroshard::bench
