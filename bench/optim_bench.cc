// Host optimizer benchmark: the fused AdamW step over flat fp32 buffers,
// reported beside memcpy of the same bytes in the same run (the roofline the
// issue names) and beside a kernel with AdamW's exact memory traffic.
//
//   bazel run -c opt //bench:optim_bench -- --benchmark_min_time=0.1
//   bazel run -c opt //bench:optim_bench -- --optim_sizes=10M,100M,1B --optim_threads=1,2
// (1B needs about 16 GB for the AdamW rows and 28 GB for the Memcpy row.)
//
// Rows (n = parameters, T = OpenMP threads):
//   AdamW/<grad>/<copy>/n/T   one AdamWStep over n parameters. Bytes moved per
//                             parameter: param, exp_avg, exp_avg_sq read and written
//                             (24), grad read (4 f32, 2 bf16/f16), the param copy
//                             written (0, or 2 for bf16/f16): 28 bytes for f32 and for
//                             the bf16-grad + bf16-copy mixed-precision step.
//       params/s      parameters updated per second
//       GB/s          bytes moved (read + written) per second
//       memcpy_GB/s   memcpy on the same buffers and threads, measured in the same
//                     row just before (param -> exp_avg, grad -> exp_avg_sq, each
//                     thread copying its slice), counted the same way: 2 bytes
//                     moved per byte copied
//       of_memcpy     GB/s / memcpy_GB/s. Above 1 where memcpy moves bytes more
//                     slowly than a read-modify-write stream does (glibc's memcpy
//                     uses non-temporal stores for large copies): the case on the
//                     2-vCPU EPYC VMs here; SameTraffic is then the tighter bound
//   SameTraffic/n/T           AdamW's exact traffic (4 streams read, 3 written) with
//                             one add per stream: the bandwidth bound of this access
//                             pattern on this machine
//   Memcpy/n/T                memcpy of 14n bytes (28n moved, AdamW's traffic) on
//                             separate buffers; GB/s counts moved bytes, copy_GB/s
//                             counts copied bytes once (the figure ANCHORS.md quotes)
// Each AdamW row checks its result: after the timed steps, 1024 sampled elements
// equal a scalar replay of the same steps with the same per-element math.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "zeroshard/bench/bench_util.h"
#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/adamw_math.h"

namespace zeroshard::bench {
namespace {

using optim::AdamWOptions;
using optim::AdamWState;
using optim::ParamGroup;
using optim::StepOptions;

constexpr double kLr = 1e-3, kWd = 0.1;

// Each of `threads` threads copies its slice of [dst, dst + bytes).
void ParallelMemcpy(char* dst, const char* src, int64_t bytes, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = bytes * t / threads, end = bytes * (t + 1) / threads;
    std::memcpy(dst + begin, src + begin, end - begin);
  }
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// n values uniform in [-1, 1), a hash of (seed, index), written in parallel
// (fast set-up of 100M-element rows).
Tensor UniformTensor(int64_t n, DType dtype, uint64_t seed) {
  Tensor t = Tensor::Empty({n}, dtype).value();
  DispatchFloatDType(dtype, [&]<typename T>() {
    T* p = static_cast<T*>(t.raw_data());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint64_t h = (static_cast<uint64_t>(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
      h *= 0x94D049BB133111EBull;
      h ^= h >> 29;
      p[i] = ConvertElement<T>(static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
  });
  return t;
}

// Element i of a float tensor, as float.
float ElementAsFloat(const Tensor& t, int64_t i) {
  return DispatchFloatDType(t.dtype(), [&]<typename T>() {
    return ConvertElement<float>(static_cast<const T*>(t.raw_data())[i]);
  });
}

// v rounded to `dtype` and back.
float RoundTo(DType dtype, float v) {
  return DispatchFloatDType(dtype, [&]<typename T>() { return ConvertElement<float>(ConvertElement<T>(v)); });
}

void BM_AdamW(benchmark::State& state, DType grad_dtype, std::optional<DType> copy_dtype) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Tensor param = UniformTensor(n, DType::kF32, 1);
  const Tensor grad = UniformTensor(n, grad_dtype, 2);
  AdamWState adam = AdamWState::Create(n).value();
  StepOptions step;
  step.num_threads = threads;
  if (copy_dtype) step.param_copy = Tensor::Zeros({n}, *copy_dtype).value();
  const std::vector<ParamGroup> groups = {ParamGroup::Whole(n, kLr, kWd)};
  const AdamWOptions options;

  // memcpy baseline on the same buffers and threads (the moments are zeroed after).
  double best_copy = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    ParallelMemcpy(static_cast<char*>(adam.exp_avg.raw_data()),
                   static_cast<const char*>(param.raw_data()), n * 4, threads);
    ParallelMemcpy(static_cast<char*>(adam.exp_avg_sq.raw_data()),
                   static_cast<const char*>(grad.raw_data()), n * grad.itemsize(), threads);
    best_copy = std::min(best_copy, Seconds(t0, std::chrono::steady_clock::now()));
  }
  const double memcpy_gbps = 2.0 * n * (4 + grad.itemsize()) / best_copy / 1e9;
  if (!adam.exp_avg.Fill(0).ok() || !adam.exp_avg_sq.Fill(0).ok()) return state.SkipWithError("fill");

  // Initial values of sampled elements, for the check.
  constexpr int kSamples = 1024;
  std::vector<int64_t> idx(kSamples);
  std::vector<float> p0(kSamples), g0(kSamples);
  for (int k = 0; k < kSamples; ++k) {
    idx[k] = (n - 1) * k / (kSamples - 1);
    p0[k] = param.data<float>()[idx[k]];
    g0[k] = ElementAsFloat(grad, idx[k]);
  }

  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (!optim::AdamWStep(options, groups, param, grad, adam, step).ok()) {
      return state.SkipWithError("AdamWStep failed");
    }
    benchmark::ClobberMemory();
  }
  const double elapsed = Seconds(start, std::chrono::steady_clock::now());

  // Check: replay the same number of steps on the samples with the scalar math.
  bool ok = true;
  for (int k = 0; k < kSamples && ok; ++k) {
    float p = p0[k], m = 0, v = 0;
    for (int64_t t = 1; t <= adam.step; ++t) {
      const optim::AdamScalars s =
          optim::MakeAdamScalars({options.beta1, options.beta2, options.eps}, t, kLr, kWd);
      optim::AdamWUpdate(p, g0[k], m, v, s);
    }
    const int64_t i = idx[k];
    ok = p == param.data<float>()[i] && m == adam.exp_avg.data<float>()[i] &&
         v == adam.exp_avg_sq.data<float>()[i];
    if (ok && copy_dtype) ok = ElementAsFloat(step.param_copy, i) == RoundTo(*copy_dtype, p);
  }
  Check(state, ok, "AdamW result differs from the scalar replay");

  const double bytes =
      static_cast<double>(n) * (24 + grad.itemsize() + (copy_dtype ? DTypeSize(*copy_dtype) : 0));
  const double gbps = bytes * static_cast<double>(state.iterations()) / elapsed / 1e9;
  state.counters["params/s"] = static_cast<double>(n) * state.iterations() / elapsed;
  state.counters["GB/s"] = gbps;
  state.counters["memcpy_GB/s"] = memcpy_gbps;
  state.counters["of_memcpy"] = gbps / memcpy_gbps;
  state.SetLabel(std::string(cpu::CpuIsaName(cpu::ActiveCpuIsa())));
}

// The roofline kernel: AdamW's exact traffic (read param, grad, exp_avg,
// exp_avg_sq; write param, exp_avg, exp_avg_sq) with one add per stream, in the
// same chunks, threads and vector code path.
void BM_SameTraffic(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  omp_set_num_threads(threads);
  std::vector<float> p(n, 1.0f), g(n, 0.0f), m(n, 2.0f), v(n, 3.0f);
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = c * kChunk, len = std::min(kChunk, n - b);
      cpu::RunWithIsa([&] {
        float* __restrict pp = p.data() + b;
        const float* __restrict gg = g.data() + b;
        float* __restrict mm = m.data() + b;
        float* __restrict vv = v.data() + b;
        for (int64_t i = 0; i < len; ++i) {
          const float gi = gg[i];
          pp[i] = pp[i] + gi;
          mm[i] = mm[i] + gi;
          vv[i] = vv[i] + gi;
        }
      });
    }
    benchmark::ClobberMemory();
  }
  const double elapsed = Seconds(start, std::chrono::steady_clock::now());
  Check(state, p[n - 1] == 1.0f && m[n / 2] == 2.0f && v[0] == 3.0f, "same-traffic result");
  state.counters["GB/s"] = 28.0 * n * state.iterations() / elapsed / 1e9;
  state.counters["params/s"] = static_cast<double>(n) * state.iterations() / elapsed;
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const int64_t bytes = 14 * n;  // 28n moved: AdamW's traffic for n parameters
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ParallelMemcpy(dst.data(), src.data(), bytes, threads);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double elapsed = Seconds(start, std::chrono::steady_clock::now());
  Check(state, dst[bytes - 1] == 1 && dst[0] == 1 && dst[bytes / 2] == 1, "memcpy result");
  const double copied = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = 2 * copied / elapsed / 1e9;
  state.counters["copy_GB/s"] = copied / elapsed / 1e9;
  state.counters["params/s"] = static_cast<double>(n) * state.iterations() / elapsed;  // at AdamW's 28 B/param
}

// "10M", "100M", "1B", "12345" -> elements.
std::optional<int64_t> ParseCount(absl::string_view text) {
  int64_t scale = 1;
  if (!text.empty() && (text.back() == 'M' || text.back() == 'B' || text.back() == 'K')) {
    scale = text.back() == 'K' ? 1000 : text.back() == 'M' ? 1000000 : 1000000000;
    text.remove_suffix(1);
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v <= 0) return std::nullopt;
  return v * scale;
}

}  // namespace
}  // namespace zeroshard::bench

int main(int argc, char** argv) {
  using namespace zeroshard;
  using namespace zeroshard::bench;
  // --optim_sizes=10M,100M (default) selects the parameter counts,
  // --optim_threads=1,2 the thread counts (default: the OpenMP default only);
  // the other flags go to Google Benchmark.
  std::vector<int64_t> sizes = {10000000, 100000000};
  std::vector<int> thread_counts = {omp_get_max_threads()};
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (absl::ConsumePrefix(&arg, "--optim_sizes=")) {
      sizes.clear();
      for (absl::string_view part : absl::StrSplit(arg, ',')) {
        const std::optional<int64_t> v = ParseCount(part);
        if (!v) {
          std::fprintf(stderr, "optim_bench: bad --optim_sizes entry \"%s\"\n", std::string(part).c_str());
          return 2;
        }
        sizes.push_back(*v);
      }
    } else if (absl::ConsumePrefix(&arg, "--optim_threads=")) {
      thread_counts.clear();
      for (absl::string_view part : absl::StrSplit(arg, ',')) {
        int t = 0;
        if (!absl::SimpleAtoi(part, &t) || t < 1) {
          std::fprintf(stderr, "optim_bench: bad --optim_threads entry \"%s\"\n", std::string(part).c_str());
          return 2;
        }
        thread_counts.push_back(t);
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  struct Variant {
    const char* name;
    DType grad;
    std::optional<DType> copy;
  };
  const Variant variants[] = {{"AdamW/f32grad/nocopy", DType::kF32, std::nullopt},
                              {"AdamW/bf16grad/bf16copy", DType::kBF16, DType::kBF16},
                              {"AdamW/f16grad/f16copy", DType::kF16, DType::kF16}};
  for (int64_t n : sizes) {
    for (int t : thread_counts) {
      benchmark::RegisterBenchmark("Memcpy", BM_Memcpy)
          ->Args({n, t})
          ->ArgNames({"n", "threads"})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("SameTraffic", BM_SameTraffic)
          ->Args({n, t})
          ->ArgNames({"n", "threads"})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      for (const Variant& v : variants) {
        benchmark::RegisterBenchmark(v.name, [v](benchmark::State& s) { BM_AdamW(s, v.grad, v.copy); })
            ->Args({n, t})
            ->ArgNames({"n", "threads"})
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
