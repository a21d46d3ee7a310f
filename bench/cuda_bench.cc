// GPU benchmarks (make gpu-bench): each figure beside its baseline, measured
// in the same run on the same stream with CUDA events, and each kernel's
// result checked before it is timed.
//
//   memory-bound kernels  GB/s = bytes read + written per call / time, beside a
//                         device-to-device cudaMemcpyAsync moving the same
//                         bytes (half read, half written): "of memcpy" is the ratio
//   GEMM                  TFLOP/s = 2 M N K / time, beside a plain cublasGemmEx
//                         call of the same shape and types (cuBLAS's default
//                         algorithm): "of cuBLAS" is the ratio
//   attention             TFLOP/s of causal attention forward and backward, our
//                         kernel beside cuDNN's fused attention (cuda_bench_attention.cc)
//   GPT training step     tokens/s and MFU of a GPT-2 small step (sharded, world 1,
//                         bf16 gathers) against the datasheet peak and the best
//                         GEMM rate of this run (cuda_bench_step.cc)
//   NCCL                  all-gather / reduce-scatter busbw through our
//                         communicator beside raw NCCL calls (cuda_bench_nccl.cc)
//
// `cuda_bench --quick` (and every run on the CPU simulator) does the same with
// small shapes and 2 timed iterations (BenchMode in cuda_bench_util.h).
// `--json_out=<file>` writes the figures in our schema too (Report() in
// cuda_bench_util.h, bench/bench_json.h); the tables are unchanged.
// Prints a clear message and exits 0 when no device is present. See docs/gpu.md.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/cuda/cast_launch.h"
#include "zeroshard/kernels/cuda/cross_entropy_launch.h"
#include "zeroshard/kernels/cuda/dropout_launch.h"
#include "zeroshard/kernels/cuda/elementwise_launch.h"
#include "zeroshard/kernels/cuda/embedding_launch.h"
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/kernels/cuda/layernorm_launch.h"
#include "zeroshard/kernels/cuda/reduce_launch.h"
#include "zeroshard/kernels/cuda/softmax_launch.h"
#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/matmul.h"
#include "zeroshard/kernels/softmax.h"
#include "zeroshard/optim/adamw_math.h"
#include "zeroshard/optim/cuda/adamw_launch.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/bench/cuda_bench_util.h"

namespace zeroshard::bench {
namespace {

void Launch(int rc, const char* what) { Must(cuda::CudaLaunchStatus(rc, what), what); }

// " (x% of its roofline)" where the card is known.
std::string RooflineText(double flops, double bytes, double flops_per_s, double peak_flops) {
  const double roof = RooflineFlops(peak_flops, Card().hbm_bytes_per_s, flops, bytes);
  return roof > 0 ? absl::StrCat("  roofline ", static_cast<int>(std::lround(100.0 * flops_per_s / roof)), "%")
                  : std::string();
}

// The dense tensor-core (or f32) peak for products of `dtype`.
double PeakFor(DType dtype, bool tf32) {
  if (dtype == DType::kBF16 || dtype == DType::kF16) return Card().half_flops;
  return tf32 ? Card().tf32_flops : Card().fp32_flops;
}

// An element count as the figures name it: 124000000 -> "124M", 64000 -> "64K".
std::string Count(int64_t n) {
  if (n % 1'000'000 == 0) return absl::StrCat(n / 1'000'000, "M");
  if (n % 1'000 == 0) return absl::StrCat(n / 1'000, "K");
  return absl::StrCat(n);
}

// ---------------------------------------------------------------- memory-bound

struct MemoryBench {
  std::string name;
  int64_t bytes;  // read + written per call
  std::function<void()> run;
};

void RunMemoryBenches(const Stream& stream, CudaAllocator& gpu, std::vector<MemoryBench>& benches) {
  std::printf("\n%-44s %12s %10s %10s %10s %8s\n", "memory-bound kernel", "bytes", "us", "GB/s",
              "memcpy", "of cpy");
  for (MemoryBench& b : benches) {
    const int iters = Iters(b.bytes > (int64_t{256} << 20) ? 10 : 50);
    const double ms = TimeMs(stream, b.run, iters);
    // The baseline: one D2D copy moving the same bytes (bytes / 2 read, bytes / 2 written).
    const int64_t half = b.bytes / 2;
    void* src = Must(gpu.Allocate(half), "alloc");
    void* dst = Must(gpu.Allocate(half), "alloc");
    const double copy_ms = TimeMs(
        stream,
        [&] {
          Must(cuda::CudaMemcpy(dst, src, half, cuda::CopyKind::kDeviceToDevice,
                                stream.native_handle()),
               "memcpy");
        },
        iters);
    gpu.Deallocate(src, half);
    gpu.Deallocate(dst, half);
    const double gbs = b.bytes / (ms * 1e6), copy_gbs = 2.0 * half / (copy_ms * 1e6);
    const double hbm = Card().hbm_bytes_per_s;
    std::printf("%-44s %12lld %10.1f %10.1f %10.1f %7.0f%%%s\n", b.name.c_str(), static_cast<long long>(b.bytes),
                ms * 1e3, gbs, copy_gbs, 100.0 * gbs / copy_gbs,
                hbm > 0 ? absl::StrCat("  roofline ", static_cast<int>(std::lround(100.0 * gbs * 1e9 / hbm)), "%").c_str()
                        : "");
    const std::string json = "cuda/memory/" + Slug(b.name) + "/";
    Report().Add(json + "memcpy", "GB/s", /*higher_is_better=*/true, {copy_gbs});
    Report().Add(json + "ours", "GB/s", true, {gbs}, json + "memcpy");
    std::vector<std::pair<std::string, double>> fields = {
        {"us", ms * 1e3}, {"bytes", static_cast<double>(b.bytes)}, {"baseline", copy_gbs}, {"of_baseline", gbs / copy_gbs}};
    if (hbm > 0) fields.push_back({"of_roofline", gbs * 1e9 / hbm});  // Note [Roofline]: HBM bandwidth
    EmitFigure("cuda_bench", "memory " + b.name, gbs, "GB/s", fields,
               "baseline: a device-to-device cudaMemcpyAsync of the same bytes");
  }
}

// Checks one CUDA op-entry result against the CPU op on the same inputs.
void CheckClose(const Tensor& gpu_result, const Tensor& cpu_result, double tol, const char* what) {
  const std::vector<double> g = Must(gpu_result.ToVector<double>(), "to host");
  const std::vector<double> c = Must(cpu_result.ToVector<double>(), "to host");
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - c[i]) <= tol * (1 + std::fabs(c[i])))) {
      Fail(std::string(what) + ": element " + std::to_string(i) + " " + std::to_string(g[i]) +
           " vs cpu " + std::to_string(c[i]));
      return;
    }
  }
}

std::vector<MemoryBench> MemoryBenches(const Stream& stream, CudaAllocator& gpu) {
  void* const s = stream.native_handle();
  std::vector<MemoryBench> benches;
  // GPT-2 small, B*T = 8192, and a 124M-parameter shard; quick: 64 rows of 64,
  // a vocabulary of 512, a 64K shard.
  const bool quick = Mode().quick;
  const int64_t rows = quick ? 64 : 8 * 1024, c = quick ? 64 : 768, vocab = quick ? 512 : 50304;
  const int64_t shard = quick ? 64'000 : 124'000'000;

  {  // Casts: f32 -> bf16 of a parameter shard.
    const int64_t n = shard;
    Tensor x = Random({n}, DType::kF32, -1, 1, 1, &gpu);
    Tensor y = Must(Tensor::Empty({n}, DType::kBF16, &gpu), "alloc");
    benches.push_back({absl::StrCat("cast f32 -> bf16 (", Count(n), ")"), n * 6, [=] {
                         Launch(cuda::LaunchCast(0, 1, x.raw_data(), y.raw_data(), n, s), "cast");
                       }});
  }
  {  // Softmax and LayerNorm rows (bf16), checked on a small input first.
    const Tensor xs = Random({64, 1000}, DType::kBF16, -5, 5, 2);
    CheckClose(Must(Softmax(Must(xs.To(&gpu), "to gpu")), "softmax"), Must(Softmax(xs), "softmax"),
               1.0 / 64, "softmax");
    Tensor x = Random({rows, vocab}, DType::kBF16, -5, 5, 3, &gpu);
    Tensor y = Must(Tensor::Empty({rows, vocab}, DType::kBF16, &gpu), "alloc");
    benches.push_back({absl::StrCat("softmax bf16 [", rows, ", ", vocab, "]"), rows * vocab * 4,
                       [=] {
                         Launch(cuda::LaunchSoftmax(false, 1, 1, x.raw_data(), vocab, y.raw_data(),
                                                    vocab, rows, vocab, s),
                                "softmax");
                       }});
    Tensor h = Random({rows, c}, DType::kBF16, -3, 3, 4, &gpu);
    Tensor o = Must(Tensor::Empty({rows, c}, DType::kBF16, &gpu), "alloc");
    Tensor m = Must(Tensor::Empty({rows}, DType::kF32, &gpu), "alloc");
    Tensor r = Must(Tensor::Empty({rows}, DType::kF32, &gpu), "alloc");
    benches.push_back({absl::StrCat("layernorm fwd bf16 [", rows, ", ", c, "]"), rows * c * 4, [=] {
                         Launch(cuda::LaunchLayerNormForward(
                                    1, 1, h.raw_data(), c, 0, nullptr, 0, nullptr, 1e-5f,
                                    o.raw_data(), c,
                                    static_cast<float*>(m.raw_data()),
                                    static_cast<float*>(r.raw_data()), rows, c, s),
                                "layernorm");
                       }});
    // LayerNorm backward with the parameter gradients (GPT-2's weight, as the
    // model runs it): reads dy, x, mean, rstd; writes dx, the per-block partial
    // sums, which the second launch reads back, and dweight, dbias (f32).
    Tensor dy = Random({rows, c}, DType::kBF16, -1, 1, 10, &gpu);
    Tensor dx = Must(Tensor::Empty({rows, c}, DType::kBF16, &gpu), "alloc");
    Tensor w = Random({c}, DType::kF32, 0.5, 1.5, 11, &gpu);
    Tensor dw = Must(Tensor::Empty({c}, DType::kF32, &gpu), "alloc");
    Tensor db = Must(Tensor::Empty({c}, DType::kF32, &gpu), "alloc");
    const int64_t blocks = cuda::LayerNormBackwardBlocks(rows);
    Tensor partials = Must(Tensor::Empty({blocks * 2 * c}, DType::kF32, &gpu), "alloc");
    // The backward's two launches with the weight and the parameter gradients
    // in `pw`'s dtype (dweight, dbias written, rounded once from the f32 sums).
    auto layernorm_backward = [=](Tensor pw, Tensor pdw, Tensor pdb) {
      return [=] {
        Launch(cuda::LaunchLayerNormBackward(1, 1, dy.raw_data(), c, h.raw_data(), c,
                                             static_cast<const float*>(m.raw_data()),
                                             static_cast<const float*>(r.raw_data()),
                                             static_cast<int>(pw.dtype()), pw.raw_data(),
                                             dx.raw_data(), c,
                                             static_cast<float*>(partials.raw_data()), rows, c, s),
               "layernorm backward");
        Launch(cuda::LaunchLayerNormParamGrads(static_cast<const float*>(partials.raw_data()),
                                               blocks, c, static_cast<int>(pdw.dtype()),
                                               pdw.raw_data(), 1, static_cast<int>(pdb.dtype()),
                                               pdb.raw_data(), 1, false, s),
               "layernorm param grads");
      };
    };
    const int64_t bwd_bytes = rows * c * 6 + rows * 8 + blocks * 2 * c * 4 * 2;
    benches.push_back({absl::StrCat("layernorm bwd bf16 [", rows, ", ", c, "] + dw, db"),
                       bwd_bytes + c * 8, layernorm_backward(w, dw, db)});
    // The same two with bf16 parameters and parameter gradients, as a
    // mixed-precision model's gathered LayerNorm runs them: the kernels read
    // the bf16 weight and bias themselves (no cast kernel before the launch)
    // and round dweight, dbias once into bf16. The f32-parameter rows above
    // stay as they were, to compare with earlier records.
    Tensor w16 = Random({c}, DType::kBF16, 0.5, 1.5, 14, &gpu);
    Tensor b16 = Random({c}, DType::kBF16, -0.5, 0.5, 15, &gpu);
    Tensor dw16 = Must(Tensor::Empty({c}, DType::kBF16, &gpu), "alloc");
    Tensor db16 = Must(Tensor::Empty({c}, DType::kBF16, &gpu), "alloc");
    benches.push_back({absl::StrCat("layernorm fwd bf16 [", rows, ", ", c, "], bf16 weight, bias"),
                       rows * c * 4 + c * 4, [=] {
                         Launch(cuda::LaunchLayerNormForward(
                                    1, 1, h.raw_data(), c, 1, w16.raw_data(), 1, b16.raw_data(),
                                    1e-5f, o.raw_data(), c, static_cast<float*>(m.raw_data()),
                                    static_cast<float*>(r.raw_data()), rows, c, s),
                                "layernorm");
                       }});
    benches.push_back({absl::StrCat("layernorm bwd bf16 [", rows, ", ", c, "] + dw, db, bf16 params"),
                       bwd_bytes + c * 2 + c * 4, layernorm_backward(w16, dw16, db16)});
    // The residual add of a block, x + f(x): two reads, one write.
    {
      const Tensor as = Random({64, 1000}, DType::kBF16, -3, 3, 12);
      const Tensor bs = Random({64, 1000}, DType::kBF16, -3, 3, 13);
      Tensor sum = Must(Tensor::Empty({64, 1000}, DType::kBF16, &gpu), "alloc");
      Must(Binary(BinaryOp::kAdd, Must(as.To(&gpu), "to gpu"), Must(bs.To(&gpu), "to gpu"), sum),
           "add");
      Tensor want = Must(Tensor::Empty({64, 1000}, DType::kBF16), "alloc");
      Must(Binary(BinaryOp::kAdd, as, bs, want), "add");
      CheckClose(sum, want, 0, "residual add");
    }
    benches.push_back({absl::StrCat("residual add bf16 [", rows, ", ", c, "] a + b"), rows * c * 6,
                       [=] {
                         Launch(cuda::LaunchBinary(static_cast<int>(BinaryOp::kAdd), 1, 1,
                                                   h.raw_data(), dy.raw_data(), o.raw_data(),
                                                   rows * c, s),
                                "residual add");
                       }});
    // Cross-entropy forward over the logits: the one big read.
    Tensor targets = Must(Tensor::Zeros({rows}, DType::kI32, &gpu), "alloc");
    Tensor losses = Must(Tensor::Empty({rows}, DType::kF32, &gpu), "alloc");
    Tensor lse = Must(Tensor::Empty({rows}, DType::kF32, &gpu), "alloc");
    benches.push_back({absl::StrCat("cross-entropy fwd bf16 [", rows, ", ", vocab, "]"),
                       rows * vocab * 2, [=] {
                         Launch(cuda::LaunchCrossEntropyForward(
                                    1, x.raw_data(), vocab, 3, targets.raw_data(), -100,
                                    static_cast<float*>(losses.raw_data()),
                                    static_cast<float*>(lse.raw_data()), rows, vocab, s),
                                "cross-entropy");
                       }});
    benches.push_back({absl::StrCat("dropout bf16 [", rows, ", ", c, "] p=0.1"), rows * c * 4, [=] {
                         Launch(cuda::LaunchDropout(1, h.raw_data(), o.raw_data(), rows * c, 7, 0,
                                                    0.9f, 1.0f / 0.9f, false, s),
                                "dropout");
                       }});
    Tensor wte = Random({vocab, c}, DType::kBF16, -1, 1, 5, &gpu);
    Tensor ids = Random({rows}, DType::kF32, 0, std::min<int64_t>(50000, vocab - 1), 6);
    ids = Must(Must(ids.To(DType::kI32), "ids").To(&gpu), "ids");
    benches.push_back({absl::StrCat("embedding fwd bf16 [", rows, "] x ", c), rows * c * 4, [=] {
                         Launch(cuda::LaunchEmbeddingForward(1, 1, wte.raw_data(), c, 3,
                                                             ids.raw_data(), vocab, o.raw_data(), c,
                                                             rows, c, s),
                                "embedding");
                       }});
  }
  {  // The fused AdamW step over the shard with the bf16 param copy.
    const int64_t n = shard;
    Tensor p = Random({n}, DType::kF32, -1, 1, 8, &gpu);
    Tensor g = Random({n}, DType::kBF16, -1, 1, 9, &gpu);
    Tensor m = Must(Tensor::Zeros({n}, DType::kF32, &gpu), "alloc");
    Tensor v = Must(Tensor::Zeros({n}, DType::kF32, &gpu), "alloc");
    Tensor copy = Must(Tensor::Empty({n}, DType::kBF16, &gpu), "alloc");
    const optim::AdamScalars sc = optim::MakeAdamScalars({}, 1, 6e-4, 0.1);
    // reads p, g, m, v; writes p, m, v, copy
    benches.push_back({absl::StrCat("AdamW step f32 + bf16 grad/copy (", Count(n), ")"),
                       n * (4 + 2 + 4 + 4 + 4 + 4 + 4 + 2),
                       [=] {
                         Launch(optim::cuda::LaunchAdamStep(
                                    true, sc, static_cast<float*>(p.raw_data()), g.raw_data(), 1,
                                    static_cast<float*>(m.raw_data()),
                                    static_cast<float*>(v.raw_data()), copy.raw_data(), 1, n, s),
                                "adamw");
                       }});
  }
  return benches;
}

// ---------------------------------------------------------------- GEMM

// The weight gradient of the MLP's first linear with its bias gradient, dW [4C,
// C] = dy^T x and db = dy's column sums (Note [Bias gradient in the GEMM]): in
// cuBLASLt's BGRADB epilogue, beside the plain GEMM followed by our column
// reduction (what runs when cuBLASLt refuses the epilogue), in the same run.
// db is checked against sums in double; a refused epilogue is a figure the GPU
// record fails on.
void RunBiasGradBench(const Stream& stream, CudaAllocator& gpu, cuda::CublasLtGemm& lt,
                      int64_t rows, int64_t width) {
  const int64_t n_out = 4 * width, n_in = width;
  const std::string name =
      absl::StrCat("mlp fc dW bf16 ", n_out, "x", n_in, "x", rows, " +bias grad");
  Tensor dy = Random({rows, n_out}, DType::kBF16, -1, 1, 11, &gpu);
  Tensor x = Random({rows, n_in}, DType::kBF16, -1, 1, 12, &gpu);
  Tensor dw = Must(Tensor::Empty({n_out, n_in}, DType::kBF16, &gpu), "alloc");
  Tensor db = Must(Tensor::Empty({n_out}, DType::kBF16, &gpu), "alloc");
  void* const s = stream.native_handle();
  cuda::GemmCall call;
  call.shape = {.m = n_out, .n = n_in, .k = rows, .transpose_a = true, .lda = n_out, .ldb = n_in,
                .ldc = n_in};
  call.ab_dtype = call.c_dtype = DType::kBF16;
  call.a = dy.raw_data();
  call.b = x.raw_data();
  call.c = dw.raw_data();
  cuda::GemmCall fused = call;
  fused.bias_grad = db.raw_data();
  const absl::Status took = lt.Run(fused, s);
  const bool refused = absl::IsUnimplemented(took);
  if (!refused) Must(took, "gemm with the bias-gradient epilogue");
  EmitFigure("cuda_bench", "gemm bias-grad epilogue refused " + name, refused ? 1 : 0, "count",
             {}, refused ? std::string(took.message()) : std::string());
  auto reduce = [&] {
    Launch(cuda::LaunchReduceAxis(0, 1, 1, dy.raw_data(), db.raw_data(), 1, rows, n_out, s),
           "bias grad reduce");
  };
  if (refused) {
    std::printf("%-44s cuBLASLt refused the epilogue: %s\n", name.c_str(),
                std::string(took.message()).c_str());
    Must(lt.Run(call, s), "gemm");
    reduce();
  }
  // Check db: 8 columns against sums in double. fp32 summation of `rows`
  // terms errs by at most (rows - 1) 2^-24 sum |terms| (any order), then one
  // bf16 rounding (2^-8 relative).
  Must(stream.Synchronize(), "sync");
  const std::vector<double> dyv =
      Must(Must(dy.To(DefaultCpuAllocator()), "to host").ToVector<double>(), "values");
  const std::vector<double> dbv =
      Must(Must(db.To(DefaultCpuAllocator()), "to host").ToVector<double>(), "values");
  for (int64_t j = 0; j < n_out; j += std::max<int64_t>(1, n_out / 8)) {
    double want = 0, mag = 0;
    for (int64_t r = 0; r < rows; ++r) {
      want += dyv[r * n_out + j];
      mag += std::fabs(dyv[r * n_out + j]);
    }
    const double tol = (rows - 1) * std::ldexp(mag, -24) + std::ldexp(std::fabs(want), -8);
    if (std::fabs(dbv[j] - want) > tol) {
      Fail(name + ": db[" + std::to_string(j) + "] = " + std::to_string(dbv[j]) + ", want " +
           std::to_string(want));
    }
  }
  const double flops = 2.0 * n_out * n_in * rows;
  const double ms = refused ? 0.0
                            : TimeMs(stream, [&] { Must(lt.Run(fused, s), "gemm"); }, Iters(20));
  const double base_ms = TimeMs(
      stream,
      [&] {
        Must(lt.Run(call, s), "gemm");
        reduce();
      },
      Iters(20));
  const double reduce_ms = TimeMs(stream, reduce, Iters(20));
  const double reduce_bytes = 2.0 * (rows * n_out + n_out);
  const double tflops = refused ? 0.0 : flops / (ms * 1e9), base = flops / (base_ms * 1e9);
  // dy, x and dW once each, db written (bf16).
  const double bytes = 2.0 * (rows * n_out + rows * n_in + n_out * n_in + n_out);
  std::printf("%-44s %10.1f %10.1f %10.1f %7.0f%%  (baseline: GEMM, then our reduction)%s\n", name.c_str(),
              ms * 1e3, tflops, base, base > 0 ? 100.0 * tflops / base : 0.0,
              RooflineText(flops, bytes, tflops * 1e12, Card().half_flops).c_str());
  std::printf("%-44s %10.1f us, %7.1f GB/s\n",
              absl::StrCat("  our column reduction bf16 [", rows, ", ", n_out, "]").c_str(),
              reduce_ms * 1e3, reduce_bytes / (reduce_ms * 1e6));
  const std::string json = "cuda/gemm/" + Slug(name) + "/";
  Report().Add(json + "gemm_then_reduce", "TFLOP/s", true, {base});
  if (!refused) Report().Add(json + "ours", "TFLOP/s", true, {tflops}, json + "gemm_then_reduce");
  std::vector<std::pair<std::string, double>> fields = {
      {"us", ms * 1e3}, {"baseline", base}, {"of_baseline", base > 0 ? tflops / base : 0.0}};
  for (auto& f : RooflineFields(flops, bytes, tflops * 1e12, Card().half_flops)) fields.push_back(f);
  EmitFigure("cuda_bench", "gemm " + name, tflops, "TFLOP/s", fields,
             "baseline: the same GEMM, then our column reduction");
  EmitFigure("cuda_bench", absl::StrCat("memory bias grad reduce bf16 [", rows, ", ", n_out, "]"),
             reduce_bytes / (reduce_ms * 1e6), "GB/s", {{"us", reduce_ms * 1e3}});
}

// Note [GELU in the GEMM]: the MLP's fc GEMM with its bias and GELU, keeping
// GELU's input (GELU_AUX_BIAS), beside the GEMM with its bias and then our GELU
// kernel; and the proj layer's input-gradient GEMM times gelu'(h) (DGELU)
// beside the GEMM and then our GELU backward: what each fallback runs, in the
// same run. Each fused result is checked against its baseline on a sample of
// elements; a refused epilogue is a figure the GPU record fails on.
void RunGeluEpilogueBench(const Stream& stream, CudaAllocator& gpu, cuda::CublasLtGemm& lt, int64_t rows,
                          int64_t width) {
  const int64_t hidden = 4 * width, n = rows * hidden;
  void* const s = stream.native_handle();
  const int bf16 = static_cast<int>(DType::kBF16);
  Tensor x = Random({rows, width}, DType::kBF16, -1, 1, 21, &gpu);
  Tensor w1 = Random({hidden, width}, DType::kBF16, -0.1f, 0.1f, 22, &gpu);
  Tensor b1 = Random({hidden}, DType::kBF16, -1, 1, 23, &gpu);
  Tensor dy = Random({rows, width}, DType::kBF16, -1, 1, 24, &gpu);
  Tensor w2 = Random({width, hidden}, DType::kBF16, -0.1f, 0.1f, 25, &gpu);
  auto empty = [&] { return Must(Tensor::Empty({rows, hidden}, DType::kBF16, &gpu), "alloc"); };
  Tensor h = empty(), a_ref = empty(), a = empty(), h_fused = empty(), da = empty(), dh_ref = empty(),
         dh = empty();
  cuda::GemmCall fc;  // h = x w1^T + b1
  fc.shape = {.m = rows, .n = hidden, .k = width, .transpose_b = true, .lda = width, .ldb = width, .ldc = hidden};
  fc.ab_dtype = fc.c_dtype = DType::kBF16;
  fc.a = x.raw_data();
  fc.b = w1.raw_data();
  fc.c = h.raw_data();
  fc.bias = b1.raw_data();
  cuda::GemmCall fc_fused = fc;  // a = gelu(x w1^T + b1), h_fused = its input
  fc_fused.c = a.raw_data();
  fc_fused.gelu = true;
  fc_fused.gelu_aux = h_fused.raw_data();
  fc_fused.aux_ld = hidden;
  cuda::GemmCall dx;  // da = dy w2
  dx.shape = {.m = rows, .n = hidden, .k = width, .lda = width, .ldb = hidden, .ldc = hidden};
  dx.ab_dtype = dx.c_dtype = DType::kBF16;
  dx.a = dy.raw_data();
  dx.b = w2.raw_data();
  dx.c = da.raw_data();
  cuda::GemmCall dx_fused = dx;  // dh = (dy w2) gelu'(h)
  dx_fused.c = dh.raw_data();
  dx_fused.dgelu_aux = h.raw_data();
  dx_fused.aux_ld = hidden;
  auto fc_then_gelu = [&] {
    Must(lt.Run(fc, s), "gemm");
    Launch(cuda::LaunchUnary(static_cast<int>(UnaryOp::kGelu), bf16, bf16, h.raw_data(), a_ref.raw_data(), n, s),
           "gelu");
  };
  auto dx_then_gelu_backward = [&] {
    Must(lt.Run(dx, s), "gemm");
    Launch(cuda::LaunchBinary(static_cast<int>(BinaryOp::kGeluBackward), bf16, bf16, h.raw_data(), da.raw_data(),
                              dh_ref.raw_data(), n, s),
           "gelu backward");
  };
  fc_then_gelu();
  dx_then_gelu_backward();
  struct Pass {
    std::string name;
    const cuda::GemmCall* fused;
    std::function<void()> baseline;
    const char* baseline_what;
  };
  const std::string shape = absl::StrCat(rows, "x", hidden, "x", width);
  const Pass passes[] = {
      {"mlp fc bf16 " + shape + " +bias+gelu, input kept", &fc_fused, fc_then_gelu,
       "the GEMM with its bias, then our GELU kernel"},
      {"mlp proj dx bf16 " + shape + " +gelu grad", &dx_fused, dx_then_gelu_backward,
       "the GEMM, then our GELU backward kernel"},
  };
  auto host = [](const Tensor& t) {
    return Must(Must(t.To(DefaultCpuAllocator()), "to host").ToVector<double>(), "values");
  };
  for (const Pass& pass : passes) {
    const absl::Status took = lt.Run(*pass.fused, s);
    const bool refused = absl::IsUnimplemented(took);
    if (!refused) Must(took, "gemm with a GELU epilogue");
    EmitFigure("cuda_bench", "gemm gelu epilogue refused " + pass.name, refused ? 1 : 0, "count", {},
               refused ? std::string(took.message()) : std::string());
    if (refused) {
      std::printf("%-44s cuBLASLt refused the epilogue: %s\n", pass.name.c_str(), std::string(took.message()).c_str());
      continue;
    }
    // Check against the baseline, every 97th element. The fused epilogue
    // applies GELU (or multiplies by gelu') to the fp32 product, the baseline
    // to it rounded to bf16 (2^-9 relative; the backward's gelu'(h) reads the
    // same stored h in both); |gelu'| <= 1.13; each result is rounded to bf16
    // once (2^-9 relative each way; 2^-7 allows for the product's own
    // rounding in the forward too); cuBLASLt's GELU may be the erf form, within
    // 4.8e-4 of the tanh form in value and 8.7e-4 in slope; and the two GEMMs
    // may sum in another order: at most K 2^-24 times the sum of |terms|, at
    // most K |x| |w| <= K 0.1 (inputs in [-1, 1], weights in [-0.1, 0.1]).
    Must(stream.Synchronize(), "sync");
    const bool forward = pass.fused == &fc_fused;
    const std::vector<double> hv = host(h), got = host(forward ? a : dh), want = host(forward ? a_ref : dh_ref);
    const std::vector<double> dav = forward ? std::vector<double>() : host(da);
    const double order = 1.13 * std::ldexp(static_cast<double>(width) * static_cast<double>(width) * 0.1, -24);
    for (int64_t i = 0; i < n; i += 97) {
      const double tol = forward ? 1.13 * std::ldexp(std::fabs(hv[i]), -9) + std::ldexp(std::fabs(want[i]), -7) +
                                       4.8e-4 + order
                                 : std::fabs(dav[i]) * (1.13 * std::ldexp(1.0, -8) + 8.7e-4) +
                                       std::ldexp(std::fabs(want[i]), -7) + order;
      if (std::fabs(got[i] - want[i]) > tol) {
        Fail(pass.name + ": element " + std::to_string(i) + " = " + std::to_string(got[i]) + ", the baseline's " +
             std::to_string(want[i]));
        break;
      }
    }
    if (forward) {  // the kept input is the GEMM with its bias, as the baseline's h
      const std::vector<double> hf = host(h_fused);
      for (int64_t i = 0; i < n; i += 97) {
        if (std::fabs(hf[i] - hv[i]) > std::ldexp(std::fabs(hv[i]), -7) + order) {
          Fail(pass.name + ": GELU's kept input " + std::to_string(hf[i]) + ", the GEMM's " + std::to_string(hv[i]));
          break;
        }
      }
    }
    const double flops = 2.0 * rows * hidden * width;
    const double ms = TimeMs(stream, [&] { Must(lt.Run(*pass.fused, s), "gemm"); }, Iters(20));
    const double base_ms = TimeMs(stream, pass.baseline, Iters(20));
    const double tflops = flops / (ms * 1e9), base = flops / (base_ms * 1e9);
    // x (or dy), the weight, the output and GELU's input once each (bf16), the bias.
    const double bytes = 2.0 * (rows * width + hidden * width + 2.0 * n + (forward ? hidden : 0));
    std::printf("%-44s %10.1f %10.1f %10.1f %7.0f%%  (baseline: %s)%s\n", pass.name.c_str(), ms * 1e3, tflops, base,
                100.0 * tflops / base, pass.baseline_what,
                RooflineText(flops, bytes, tflops * 1e12, Card().half_flops).c_str());
    const std::string json = "cuda/gemm/" + Slug(pass.name) + "/";
    Report().Add(json + "unfused", "TFLOP/s", true, {base});
    Report().Add(json + "ours", "TFLOP/s", true, {tflops}, json + "unfused");
    std::vector<std::pair<std::string, double>> fields = {
        {"us", ms * 1e3}, {"baseline", base}, {"baseline_us", base_ms * 1e3}, {"of_baseline", tflops / base}};
    for (auto& f : RooflineFields(flops, bytes, tflops * 1e12, Card().half_flops)) fields.push_back(f);
    EmitFigure("cuda_bench", "gemm " + pass.name, tflops, "TFLOP/s", fields,
               std::string("baseline: ") + pass.baseline_what);
  }
}

// Returns the best bf16 TFLOP/s measured (the step bench's practical peak).
double RunGemmBenches(const Stream& stream, CudaAllocator& gpu) {
  std::unique_ptr<cuda::CublasLtGemm> lt = Must(cuda::CublasLtGemm::Create(kDevice, &gpu), "cublasLt");
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuda_bench: cublasCreate failed\n");
    std::exit(1);
  }
  cublasSetStream(handle, static_cast<cudaStream_t>(stream.native_handle()));

  std::printf("\n%-44s %10s %10s %10s %8s\n", "GEMM (row-major C = A B^T)", "us", "TFLOP/s",
              "cuBLAS", "of cuBLAS");
  struct Case {
    const char* what;
    const char* types;
    int64_t m, n, k;
    DType dtype;
    bool tf32;
    bool bias_gelu;
    // A [m, k], B [n, k] and C [m, n], each once.
    int64_t traffic_bytes() const { return (m * k + n * k + m * n) * DTypeSize(dtype); }
    // "qkv bf16 8192x2304x768", "square f16 8192^3", "... +bias+gelu".
    std::string name() const {
      return absl::StrCat(what, " ", types, " ",
                          m == n && n == k ? absl::StrCat(m, "^3") : absl::StrCat(m, "x", n, "x", k),
                          bias_gelu ? " +bias+gelu" : "");
    }
  };
  // GPT-2 small's GEMMs at B*T = 8192 and squares; quick: C 64, V 512, 64 rows.
  const bool quick = Mode().quick;
  const int64_t rows = quick ? 64 : 8192, width = quick ? 64 : 768, vocab = quick ? 512 : 50304;
  const int64_t square = quick ? 128 : 8192;
  const Case cases[] = {
      {"qkv", "bf16", rows, 3 * width, width, DType::kBF16, false, false},
      {"mlp fc", "bf16", rows, 4 * width, width, DType::kBF16, false, true},
      {"mlp proj", "bf16", rows, width, 4 * width, DType::kBF16, false, false},
      {"lm head", "bf16", rows, vocab, width, DType::kBF16, false, false},
      {"square", "f16", square, square, square, DType::kF16, false, false},
      {"square", "f32 tf32", square, square, square, DType::kF32, true, false},
  };
  double best_bf16 = 0;
  for (const Case& k : cases) {
    const std::string name = k.name();
    Tensor a = Random({k.m, k.k}, k.dtype, -1, 1, 1, &gpu);
    Tensor b = Random({k.n, k.k}, k.dtype, -1, 1, 2, &gpu);
    Tensor bias = Random({k.n}, k.dtype, -1, 1, 3, &gpu);
    Tensor c = Must(Tensor::Empty({k.m, k.n}, k.dtype, &gpu), "alloc");
    cuda::GemmCall call;
    call.shape = {.m = k.m, .n = k.n, .k = k.k, .transpose_b = true, .lda = k.k, .ldb = k.k,
                  .ldc = k.n};
    call.ab_dtype = call.c_dtype = k.dtype;
    call.a = a.raw_data();
    call.b = b.raw_data();
    call.c = c.raw_data();
    call.allow_tf32 = k.tf32;
    if (k.bias_gelu) {
      call.bias = bias.raw_data();
      call.gelu = true;
    }
    Must(lt->Run(call, stream.native_handle()), "gemm");
    // Check: a few elements of C against double dot products on the host
    // (without the epilogue, which the GPU tests check).
    if (!k.bias_gelu) {
      Must(stream.Synchronize(), "sync");
      // The first 4 rows of A, B and C (contiguous slices) on the host.
      auto head = [&](const Tensor& t) {
        return Must(Must(Must(t.Narrow(0, 0, 4), "narrow").To(DefaultCpuAllocator()), "to host")
                        .ToVector<double>(),
                    "values");
      };
      const std::vector<double> av = head(a), bv = head(b), cv = head(c);
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          double want = 0;
          for (int64_t l = 0; l < k.k; ++l) want += av[i * k.k + l] * bv[j * k.k + l];
          const double tol = (k.dtype == DType::kF32 ? 2e-3 : 1e-2) * std::sqrt(double(k.k)) +
                             std::fabs(want) * (k.dtype == DType::kBF16 ? 1.0 / 64 : 1e-3);
          const double got = cv[i * k.n + j];
          if (std::fabs(got - want) > tol) {
            Fail(name + ": C[" + std::to_string(i) + "," + std::to_string(j) +
                 "] = " + std::to_string(got) + ", want " + std::to_string(want));
          }
        }
      }
    }
    const double flops = 2.0 * k.m * k.n * k.k;
    const double ms =
        TimeMs(stream, [&] { Must(lt->Run(call, stream.native_handle()), "gemm"); }, Iters(20));
    // The baseline: cublasGemmEx, column-major C^T = B A^T (the same product).
    const cudaDataType_t t = k.dtype == DType::kBF16 ? CUDA_R_16BF
                             : k.dtype == DType::kF16 ? CUDA_R_16F
                                                      : CUDA_R_32F;
    const cublasComputeType_t compute = k.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t base_status = CUBLAS_STATUS_SUCCESS;  // a refused baseline times nothing
    const double base_ms = TimeMs(
        stream,
        [&] {
          const cublasStatus_t s = cublasGemmEx(
              handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(k.n), static_cast<int>(k.m),
              static_cast<int>(k.k), &alpha, b.raw_data(), t, static_cast<int>(k.k), a.raw_data(),
              t, static_cast<int>(k.k), &beta, c.raw_data(), t, static_cast<int>(k.n), compute,
              CUBLAS_GEMM_DEFAULT);
          if (s != CUBLAS_STATUS_SUCCESS) base_status = s;
        },
        Iters(20));
    if (base_status != CUBLAS_STATUS_SUCCESS) {
      Fail(name + ": the cublasGemmEx baseline returned " + cublasGetStatusName(base_status));
    }
    const double tflops = flops / (ms * 1e9), base = flops / (base_ms * 1e9);
    // A, B and C once each, and the bias.
    const double bytes = static_cast<double>(k.traffic_bytes()) + (k.bias_gelu ? k.n * DTypeSize(k.dtype) : 0);
    std::printf("%-44s %10.1f %10.1f %10.1f %7.0f%%%s%s\n", name.c_str(), ms * 1e3, tflops, base,
                100.0 * tflops / base, k.bias_gelu ? "  (baseline without epilogue)" : "",
                RooflineText(flops, bytes, tflops * 1e12, PeakFor(k.dtype, k.tf32)).c_str());
    const std::string json = "cuda/gemm/" + Slug(name) + "/";
    Report().Add(json + "cublas", "TFLOP/s", /*higher_is_better=*/true, {base});
    Report().Add(json + "ours", "TFLOP/s", true, {tflops}, json + "cublas");
    std::vector<std::pair<std::string, double>> fields = {
        {"us", ms * 1e3}, {"baseline", base}, {"of_baseline", tflops / base}};
    for (auto& f : RooflineFields(flops, bytes, tflops * 1e12, PeakFor(k.dtype, k.tf32))) fields.push_back(f);
    EmitFigure("cuda_bench", "gemm " + name, tflops, "TFLOP/s", fields,
               k.bias_gelu ? "baseline: cublasGemmEx, default algorithm, without the epilogue"
                           : "baseline: cublasGemmEx, default algorithm");
    if (k.dtype == DType::kBF16) best_bf16 = std::max(best_bf16, tflops);
  }
  RunBiasGradBench(stream, gpu, *lt, rows, width);
  RunGeluEpilogueBench(stream, gpu, *lt, rows, width);
  cublasDestroy(handle);
  return best_bf16;
}

int Main(int argc, char** argv) {
  const std::string json_out = TakeJsonOutFlag(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      Mode().quick = true;
    } else {
      std::fprintf(stderr,
                   "cuda_bench: unknown argument '%s'\n"
                   "usage: cuda_bench [--quick] [--json_out=<file>]\n"
                   "  --quick     small shapes and 2 timed iterations in every section, results still\n"
                   "              checked (always so on the CPU simulator)\n"
                   "  --json_out  also the figures as data, our schema (bench/bench_json.h)\n",
                   argv[i]);
      return 2;
    }
  }
  const int devices = Must(cuda::CudaDeviceCount(), "device count");
  if (devices == 0) {
    std::printf("cuda_bench: no CUDA device on this machine: nothing to measure (exit 0%s). "
                "Run it on an H100/H200, see docs/gpu.md.\n",
                json_out.empty() ? "" : "; no --json_out file written");
    return 0;
  }
  const std::string device = Must(cuda::CudaDeviceName(kDevice), "device name");
  // The simulator runs kernels on one CPU thread: only the small shapes fit
  // (the same test as tests/testing.cc OnCudaSimulator).
  Mode().simulator = absl::StartsWith(device, "cuda_sim");
  if (Mode().simulator) Mode().quick = true;
  std::printf("cuda_bench on %s%s\n", device.c_str(),
              Mode().quick ? " (quick: small shapes, 2 timed iterations; not a GPU's speed)" : "");
  CudaAllocator gpu(kDevice);
  double gemm_tflops = 0;
  {
    Stream stream = Must(Stream::Create(Device::Cuda(kDevice)), "stream");
    std::vector<MemoryBench> benches = MemoryBenches(stream, gpu);
    RunMemoryBenches(stream, gpu, benches);
    gemm_tflops = RunGemmBenches(stream, gpu);
    Must(stream.Synchronize(), "sync");
  }
  RunAttentionBenches();
  RunStepBench(gemm_tflops);
  RunNcclBenches();
  Report().Add("cuda/checks/failed", "count", /*higher_is_better=*/false, {static_cast<double>(Failures())});
  if (!json_out.empty()) Must(Report().Write(json_out), "--json_out");
  if (Failures() > 0) {
    std::printf("\n%d result checks FAILED\n", Failures());
    EmitFigure("cuda_bench", "result checks failed", Failures(), "count");
    return 1;
  }
  EmitFigure("cuda_bench", "result checks failed", 0, "count");
  std::printf("\nall result checks passed\n");
  return 0;
}

}  // namespace
}  // namespace zeroshard::bench

int main(int argc, char** argv) { return zeroshard::bench::Main(argc, argv); }
