// A GPT-2 small (124M) training step on one GPU: the model sharded with world
// 1 over NCCL (FULL_SHARD by Block, bf16 gathered parameters and compute, fp32
// master, reduce and AdamW state), memory from the caching allocator bound to
// the compute stream, B x T = 8 x 1024 random tokens.
//
//   tokens/s   B T / step time (wall clock of forward + backward + AdamW, GPU synchronised)
//   MFU        model FLOPs / step time / peak, model FLOPs per token = 6 N + 12 L C T
//              (llm.c's count: the matmuls of forward and backward plus attention),
//              against the datasheet dense bf16 peak (H100/H200 989 TFLOP/s, A100 312)
//              and against the best bf16 GEMM rate measured earlier in this run
//              ("of GEMM": how close the step comes to what its GEMMs could do).
// Check: the loss is finite and near ln(V) at the start, and falls over the steps.
// Quick mode: a tiny GPT (2 layers, 64 wide, V 256, B 2 x T 32), 1 + 2 steps.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/bench/cuda_bench_util.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/runtime/gpu_timeline.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tools/trace_summary.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard::bench {

namespace {

Tensor RandomTokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed, Allocator* gpu) {
  std::vector<int64_t> v(B * T);
  uint64_t s = seed;
  for (auto& t : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return Must(Must(Tensor::FromVector(v, {B, T}), "tokens").To(gpu), "tokens to gpu");
}

}  // namespace

void RunStepBench(double gemm_tflops) {
  const bool quick = Mode().quick;
  nn::GptConfig config =
      quick ? nn::GptConfig{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2,
                            .n_embd = 64}
            : nn::GptConfig{.vocab_size = 50304, .block_size = 1024, .n_layer = 12, .n_head = 12,
                            .n_embd = 768};
  const int64_t B = quick ? 2 : 8, T = config.block_size;
  const int warmup = quick ? 1 : 2, steps = Iters(5);
  const std::string model =
      quick ? absl::StrCat("GPT L", config.n_layer, " C", config.n_embd, " V", config.vocab_size)
            : "GPT-2 124M";

  auto comms = Must(LocalCommunicator::CreateGroup(1), "bootstrap");
  std::unique_ptr<NcclCommunicator> nccl =
      Must(NcclCommunicator::Create(*comms[0], Device::Cuda(kDevice)), "nccl world 1");
  CudaBacking backing(kDevice);
  CachingAllocator cache(&backing, {.device = Device::Cuda(kDevice)});
  CachingStreamAllocator gpu(&cache, /*stream=*/nullptr, "compute");  // the legacy default stream

  auto gpt = std::make_shared<nn::Gpt>(config);  // shapes only: the shard is initialised on the GPU
  ShardingOptions options;
  options.wrap = WrapPolicy::ByType({"Block"});
  options.init_seed = 1337;
  options.forward_prefetch = true;
  options.mixed_precision.param_dtype = DType::kBF16;
  auto sharded = Must(ShardedModel::Create(gpt, *nccl, options, &gpu), "sharded model");
  optim::ShardedOptimizer opt =
      Must(optim::ShardedOptimizer::Create(*sharded, {.lr = 6e-4, .weight_decay = 0.1}), "optimizer");
  const int64_t n_params = gpt->NumParameters();
  const Tensor inputs = RandomTokens(B, T, config.vocab_size, 1, &gpu);
  const Tensor targets = RandomTokens(B, T, config.vocab_size, 2, &gpu);
  const Stream compute = Stream::Default(Device::Cuda(kDevice));

  std::vector<double> losses;
  auto step = [&]() {
    nn::GptOutput out = Must(gpt->Forward(inputs, targets), "forward");
    Must(autograd::Backward(out.loss), "backward");
    Must(opt.Step(6e-4), "adamw");
    Must(sharded->ZeroGrad(), "zero grad");
    losses.push_back(Must(out.loss.value().Item(), "loss"));
  };
  const cuda::BiasGradEpilogueCounts bgrad_before = cuda::BiasGradEpilogueCountsNow();
  const cuda::EpilogueCounts gelu_before = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
  const AttentionKernelCounts attention_before = AttentionKernelCountsNow();
  for (int i = 0; i < warmup; ++i) step();
  Must(compute.Synchronize(), "sync");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  Must(compute.Synchronize(), "sync");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const double tokens_per_s = static_cast<double>(B * T * steps) / seconds;
  const double flops_per_token = 6.0 * n_params + 12.0 * config.n_layer * config.n_embd * T;
  const double achieved = flops_per_token * tokens_per_s;
  const std::string device = Must(cuda::CudaDeviceName(kDevice), "device name");
  const double peak = Card().half_flops;  // Note [Roofline]; 0 on an unknown card: only "of GEMM" is printed
  std::printf("\n%s training step (%lld params, B %lld x T %lld, bf16 gathers, FULL_SHARD world 1)\n",
              quick ? model.c_str() : "GPT-2 small", static_cast<long long>(n_params),
              static_cast<long long>(B), static_cast<long long>(T));
  std::printf("  %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s model FLOPs", 1e3 * seconds / steps,
              tokens_per_s, achieved / 1e12);
  if (peak > 0) std::printf(", MFU %.1f%% of %.0f TFLOP/s bf16 peak", 100.0 * achieved / peak, peak / 1e12);
  if (gemm_tflops > 0) std::printf(", %.1f%% of the best GEMM rate (%.1f TFLOP/s)", 100.0 * achieved / (gemm_tflops * 1e12), gemm_tflops);
  std::printf("\n  loss %.4f -> %.4f over %d steps; peak memory %s (caching allocator: %s)\n",
              losses.front(), losses.back(), warmup + steps, FormatBytes(gpu.stats().peak_bytes_in_use).c_str(),
              cache.stats().ToString().c_str());
  const std::string shape = absl::StrCat(model, " B", B, " T", T, " bf16 FULL_SHARD world 1");
  const std::string json = "cuda/step/" + Slug(shape) + "/";
  Report().Add(json + "tokens_per_s", "tokens/s", /*higher_is_better=*/true, {tokens_per_s});
  Report().Add(json + "ms_per_step", "ms", false, {1e3 * seconds / steps});
  if (peak > 0) Report().Add(json + "mfu_pct", "%", true, {100.0 * achieved / peak});
  EmitFigure("cuda_bench", "step tokens/s " + shape, tokens_per_s, "tokens/s",
             {{"ms_per_step", 1e3 * seconds / steps}, {"model_tflops", achieved / 1e12},
              {"mfu", peak > 0 ? achieved / peak : 0.0}, {"peak_tflops", peak / 1e12},
              {"of_best_gemm", gemm_tflops > 0 ? achieved / (gemm_tflops * 1e12) : 0.0},
              {"first_loss", losses.front()}, {"last_loss", losses.back()},
              {"peak_bytes", static_cast<double>(gpu.stats().peak_bytes_in_use)}},
             "MFU: model FLOPs 6N + 12 L C T per token over the datasheet dense bf16 peak");
  // The per-op breakdown (Note [Per-op breakdown] in tools/trace_summary.h):
  // one more step traced with GPU spans (Note [GPU spans]), every op forward
  // and backward, each op's device time as a fraction of the step.
  {
    TraceRecorder trace;
    GpuTimeline timeline(Device::Cuda(kDevice), &trace, /*pid=*/0, {.events = true, .nvtx = false});
    sharded->set_trace(&trace, &timeline);
    {
      ScopedSpan traced(&trace, "step traced", "step", {0, TraceRow::kCompute});
      step();  // ends with the loss read back: the device is done
    }
    sharded->set_trace(nullptr, nullptr);
    Must(timeline.Flush(), "GPU spans");
    const std::string path = absl::StrCat(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp",
                                          "/cuda_bench_step_trace.json");
    Must(trace.WriteJson(path), "trace");
    const tools::TraceSummary summary = Must(tools::SummarizeTraceFile(path), "trace summary");
    if (summary.ranks.empty() || summary.ranks[0].ops.empty()) {
      Fail("GPT step: the traced step has no op spans");
    } else {
      const tools::RankSummary& r = summary.ranks[0];
      std::printf("  per-op breakdown of one traced step (%s, %.1f ms with tracing; ops forward + backward):\n",
                  r.gpu_rows ? "device time from CUDA events" : "host time", r.total.dur_us / 1e3);
      const tools::OpFigures* largest = nullptr;
      double gemm = 0;
      for (const tools::OpFigures& o : r.ops) {
        const bool is_gemm = tools::IsGemmOp(o.name);
        if (is_gemm) gemm += o.fraction;
        if (!is_gemm && largest == nullptr) largest = &o;
        std::printf("    %-20s %5lld calls %9.3f ms %6.1f%%%s\n", o.name.c_str(), static_cast<long long>(o.count),
                    o.total_us / 1e3, 100.0 * o.fraction, is_gemm ? "  GEMM" : "");
        EmitFigure("cuda_bench", absl::StrCat("step op ", o.name, " ", shape), o.fraction, "of step",
                   {{"ms", o.total_us / 1e3}, {"calls", static_cast<double>(o.count)}, {"gemm", is_gemm ? 1.0 : 0.0}});
      }
      std::printf("    GEMM ops %.1f%% of the step; largest other op: %s %.1f%% (aim: none above 5%%)\n",
                  100.0 * gemm, largest != nullptr ? largest->name.c_str() : "none",
                  largest != nullptr ? 100.0 * largest->fraction : 0.0);
      EmitFigure("cuda_bench", "step largest non-GEMM op " + shape, largest != nullptr ? largest->fraction : 0.0,
                 "of step", {{"gemm_fraction", gemm}}, largest != nullptr ? largest->name : "");
    }
  }
  // Every linear's bias gradient rides in its weight-gradient GEMM (Note
  // [Bias gradient in the GEMM]); the record fails on any fallback.
  const cuda::BiasGradEpilogueCounts bgrad = cuda::BiasGradEpilogueCountsNow();
  const int64_t fused = bgrad.fused - bgrad_before.fused;
  const int64_t fallbacks = bgrad.fallback - bgrad_before.fallback;
  std::printf("  bias gradients: %lld in the GEMM epilogue, %lld fallbacks to our reduction\n",
              static_cast<long long>(fused), static_cast<long long>(fallbacks));
  EmitFigure("cuda_bench", "step bias-grad epilogue fallbacks " + shape, static_cast<double>(fallbacks),
             "count", {{"fused", static_cast<double>(fused)}});
  if (fused + fallbacks == 0) Fail("GPT step: no bias gradient went through MatMul's bias_grad");
  // The MLPs' GELU and its gradient in the GEMMs (Note [GELU in the GEMM]).
  const cuda::EpilogueCounts gelu = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
  const int64_t gelu_fused = gelu.fused - gelu_before.fused;
  const int64_t gelu_fallbacks = gelu.fallback - gelu_before.fallback;
  std::printf("  GELU: %lld GEMMs with GELU or its gradient in the epilogue, %lld fallbacks to our kernels\n",
              static_cast<long long>(gelu_fused), static_cast<long long>(gelu_fallbacks));
  EmitFigure("cuda_bench", "step gelu epilogue fallbacks " + shape, static_cast<double>(gelu_fallbacks), "count",
             {{"fused", static_cast<double>(gelu_fused)}});
  if (gelu_fused + gelu_fallbacks == 0) Fail("GPT step: no MLP went through MatMul's GELU epilogues");
  // Which attention ran (no silent fallback): cuDNN's, our tensor-core
  // kernel, or our scalar one, which the GPU record's checker fails at GPT-2's
  // shapes (head dim 64, where one of the other two takes every call).
  const AttentionKernelCounts attention = AttentionKernelCountsNow();
  const int64_t att_cudnn = attention.cudnn - attention_before.cudnn;
  const int64_t att_tc = attention.tensor_core - attention_before.tensor_core;
  const int64_t att_scalar = attention.scalar - attention_before.scalar;
  std::printf("  attention: %lld cuDNN, %lld tensor-core, %lld scalar-kernel calls\n", static_cast<long long>(att_cudnn),
              static_cast<long long>(att_tc), static_cast<long long>(att_scalar));
  EmitFigure("cuda_bench", "step attention scalar runs " + shape, static_cast<double>(att_scalar), "count",
             {{"cudnn", static_cast<double>(att_cudnn)}, {"tensor_core", static_cast<double>(att_tc)},
              {"head_dim", static_cast<double>(config.n_embd / config.n_head)}});
  // The same steps with the GELU epilogues switched off (what a refusal falls
  // back to: the GEMMs, then our GELU kernels), timed the same way in the same
  // run: what the fusion is worth on this card. After the counts above, so its
  // fallbacks are not the record's.
  {
    cuda::SetEpilogueEnabled(cuda::FusedEpilogue::kGelu, false);
    step();
    Must(compute.Synchronize(), "sync");
    const auto u0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    Must(compute.Synchronize(), "sync");
    const double unfused_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - u0).count();
    cuda::SetEpilogueEnabled(cuda::FusedEpilogue::kGelu, true);
    const double unfused_tokens_per_s = static_cast<double>(B * T * steps) / unfused_s;
    std::printf("  with GELU unfused (the GEMMs, then our GELU kernels): %.1f ms/step, %.0f tokens/s; the fusion "
                "%.3fx\n",
                1e3 * unfused_s / steps, unfused_tokens_per_s, tokens_per_s / unfused_tokens_per_s);
    Report().Add(json + "tokens_per_s_gelu_unfused", "tokens/s", true, {unfused_tokens_per_s});
    EmitFigure("cuda_bench", "step gelu fusion " + shape, tokens_per_s / unfused_tokens_per_s, "x",
               {{"tokens_per_s", tokens_per_s}, {"baseline", unfused_tokens_per_s},
                {"baseline_ms_per_step", 1e3 * unfused_s / steps}},
               "baseline: the same steps with the GELU epilogues off (GEMMs, then our GELU kernels)");
  }
  // Where cuDNN ran the step's attention, the same steps again with our
  // tensor-core kernel in its place (SetDefaultAttentionImpl: the model's
  // kAuto calls follow it), timed the same way in the same run: how far our
  // kernel is from cuDNN's inside the step (Note [Tensor-core attention]).
  if (att_cudnn > 0) {
    SetDefaultAttentionImpl(AttentionImpl::kTensorCore);
    step();
    Must(compute.Synchronize(), "sync");
    const auto a0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    Must(compute.Synchronize(), "sync");
    const double tc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
    SetDefaultAttentionImpl(AttentionImpl::kAuto);
    const double tc_tokens_per_s = static_cast<double>(B * T * steps) / tc_s;
    std::printf("  with our tensor-core attention in place of cuDNN's: %.1f ms/step, %.0f tokens/s (%.3fx)\n",
                1e3 * tc_s / steps, tc_tokens_per_s, tc_tokens_per_s / tokens_per_s);
    Report().Add(json + "tokens_per_s_tensor_core_attention", "tokens/s", true, {tc_tokens_per_s},
                 json + "tokens_per_s");
    EmitFigure("cuda_bench", "step tensor-core attention " + shape, tc_tokens_per_s / tokens_per_s, "x",
               {{"tokens_per_s", tc_tokens_per_s}, {"baseline", tokens_per_s},
                {"ms_per_step", 1e3 * tc_s / steps}},
               "baseline: the same steps with cuDNN's fused attention");
  } else {
    std::printf("  (cuDNN did not run the step's attention: no tensor-core-attention rerun)\n");
  }
  const double ln_v = std::log(static_cast<double>(config.vocab_size));
  if (!std::isfinite(losses.back()) || std::fabs(losses.front() - ln_v) > 0.5 ||
      !(losses.back() < losses.front())) {
    Fail("GPT step: the loss should start near ln(V) = " + std::to_string(ln_v) +
         " and fall; got " + std::to_string(losses.front()) + " -> " + std::to_string(losses.back()));
  }
}

}  // namespace zeroshard::bench
