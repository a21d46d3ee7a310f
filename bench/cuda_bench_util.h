// Helpers shared by the sections of bench/cuda_bench (make gpu-bench): fatal
// checks, deterministic inputs, timing with CUDA events, the count of failed
// result checks (any failure makes the program exit 1), and the run's figures in
// our JSON schema (--json_out=<file>; bench/bench_json.h).
#ifndef ZEROSHARD_BENCH_CUDA_BENCH_UTIL_H_
#define ZEROSHARD_BENCH_CUDA_BENCH_UTIL_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/figures.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::bench {

inline constexpr int kDevice = 0;

// How this run measures, set once by main. Quick mode (`cuda_bench --quick`,
// and always on the CPU simulator, tools/cuda/sim) takes small shapes
// everywhere and few iterations, so that the whole program, every result check
// included, runs in seconds on one CPU core and the bench cannot rot between
// GPU visits. Its figures carry the small shapes in their names; they say
// nothing about a GPU's speed.
struct BenchMode {
  bool quick = false;
  bool simulator = false;  // the device is the simulator's "cuda_sim"
};

inline BenchMode& Mode() {
  static BenchMode mode;
  return mode;
}

// `normal` timed iterations, or 2 in quick mode.
// Note [Roofline]
// A kernel's distance to its roofline: the datasheet's dense peaks of the card
// (tensor cores by input type, HBM bandwidth) and the kernel's own FLOPs and
// bytes (read plus written once each) give the most it could reach,
//     roofline = min(peak(type), FLOPs / bytes * HBM bandwidth)   (FLOP/s)
// and each record line carries `flops`, `bytes` and `of_roofline` = its rate /
// roofline (memory-bound rows: GB/s / HBM bandwidth). Cards by the CUDA device
// name; an unknown card (the simulator's "cuda_sim" included) has zeros, and
// its lines no `of_roofline`. Figures from NVIDIA's datasheets, dense (no
// sparsity): H100 SXM 989 TFLOP/s bf16/f16, 495 TF32, 3.35 TB/s HBM3; H100
// PCIe 756 / 378, 2.0 TB/s; H200 SXM the H100 SXM's compute, 4.8 TB/s HBM3e;
// A100 80 GB SXM 312 / 156, 2.039 TB/s (40 GB: 1.555 TB/s).
struct Datasheet {
  double half_flops = 0;  // bf16 / f16 tensor cores, dense
  double tf32_flops = 0;
  double fp32_flops = 0;  // CUDA cores (non-tensor)
  double hbm_bytes_per_s = 0;
};

inline Datasheet DatasheetOf(const std::string& device_name) {
  auto has = [&](const char* s) { return device_name.find(s) != std::string::npos; };
  if (has("H200")) return {989e12, 494.7e12, 66.9e12, 4.8e12};
  if (has("H100") && has("PCIe")) return {756e12, 378e12, 51.2e12, 2.0e12};
  if (has("H100")) return {989e12, 494.7e12, 66.9e12, 3.35e12};
  if (has("A100")) return {312e12, 156e12, 19.5e12, has("40GB") ? 1.555e12 : 2.039e12};
  return {};
}

// The datasheet of device 0, read once (zeros on an unknown card).
inline const Datasheet& Card() {
  static const Datasheet card = [] {
    const absl::StatusOr<std::string> name = cuda::CudaDeviceName(kDevice);
    return name.ok() ? DatasheetOf(*name) : Datasheet{};
  }();
  return card;
}

// The roofline in FLOP/s of a kernel of `flops` and `bytes` whose products run
// at `peak_flops` (0: unknown card).
inline double RooflineFlops(double peak_flops, double hbm_bytes_per_s, double flops, double bytes) {
  if (peak_flops <= 0 || hbm_bytes_per_s <= 0) return 0;
  return bytes > 0 ? std::min(peak_flops, flops / bytes * hbm_bytes_per_s) : peak_flops;
}

// Figures' fields for Note [Roofline]: the kernel's FLOPs and bytes, and its
// rate's fraction of the roofline where the card is known.
inline std::vector<std::pair<std::string, double>> RooflineFields(double flops, double bytes, double flops_per_s,
                                                                  double peak_flops) {
  std::vector<std::pair<std::string, double>> f = {{"flops", flops}, {"bytes", bytes}};
  const double roof = RooflineFlops(peak_flops, Card().hbm_bytes_per_s, flops, bytes);
  if (roof > 0) f.push_back({"of_roofline", flops_per_s / roof});
  return f;
}

inline int Iters(int normal) { return Mode().quick ? std::min(normal, 2) : normal; }

inline int& Failures() {
  static int failures = 0;
  return failures;
}

// The figures of this run in our schema, written by main to --json_out=<file>
// (beside the ZEROSHARD_FIGURES lines of runtime/figures.h, which the GPU record
// reads). Names: "cuda/<section>/<case>/<figure>", <case> being the printed
// row's name in lower case with "_" for anything not [a-z0-9.] ("softmax_bf16_64_512").
inline JsonReport& Report() {
  static JsonReport report("cuda_bench");
  return report;
}

inline std::string Slug(const std::string& text) {
  std::string out;
  for (char c : text) {
    const char l = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    const bool keep = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.';
    if (keep) {
      out += l;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

inline void Fail(const std::string& what) {
  std::printf("  CHECK FAILED: %s\n", what.c_str());
  ++Failures();
}

template <typename T>
T Must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

inline void Must(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

inline Tensor Random(absl::Span<const int64_t> shape, DType dtype, float lo, float hi, uint64_t seed,
                     Allocator* allocator = nullptr) {
  const int64_t n = NumElements(shape);
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  Tensor host = Must(Tensor::FromVector(v, shape, dtype), "FromVector");
  return allocator == nullptr ? host : Must(host.To(allocator), "to device");
}

// Milliseconds per call of `fn` (which enqueues on `stream`), after a warm-up.
inline double TimeMs(const Stream& stream, const std::function<void()>& fn, int iters) {
  fn();
  Must(stream.Synchronize(), "sync");
  Event start = Must(Event::Create(stream.device(), true), "event");
  Event end = Must(Event::Create(stream.device(), true), "event");
  Must(start.Record(stream), "record");
  for (int i = 0; i < iters; ++i) fn();
  Must(end.Record(stream), "record");
  Must(end.Synchronize(), "sync");
  return Must(Event::ElapsedMs(start, end), "elapsed") / iters;
}

// The sections beyond memory-bound kernels and GEMM (one file each).
// Attention TFLOP/s, our kernel beside cuDNN's fused attention (cuda_bench_attention.cc).
void RunAttentionBenches();
// A GPT-2 small training step on one GPU: tokens/s and MFU (cuda_bench_step.cc);
// `gemm_tflops` is the best bf16 GEMM rate measured in this run (a practical peak).
void RunStepBench(double gemm_tflops);
// All-gather / reduce-scatter bus bandwidth through our NCCL communicator
// beside raw NCCL calls, over every visible GPU (cuda_bench_nccl.cc).
void RunNcclBenches();

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_CUDA_BENCH_UTIL_H_
