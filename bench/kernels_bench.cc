// CPU kernel benchmarks (Google Benchmark). Each kernel is reported beside its
// baseline measured in the same run:
//   MatMul/<n>            GFLOP/s of our MatMul (f32, n x n x n)
//   EigenGemmNative/<n>   GFLOP/s of Eigen's GEMM called directly, -march=native
//   <Kernel>/<elements>   bytes/s, counting the input tensor's bytes once
//   Memcpy/<bytes>        memcpy of the same number of bytes (counted the same way)
// Each benchmark checks its output once and fails its row if it is wrong.
//
//   make bench     (or: bazel run -c opt //bench:kernels_bench)
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "zeroshard/bench/bench_util.h"
#include "zeroshard/bench/eigen_baseline.h"
#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/matmul.h"
#include "zeroshard/kernels/reduce.h"

namespace zeroshard::bench {
namespace {

// ---------------------------------------------------------------- GEMM

void BM_MatMul(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Random({n, n}, DType::kF32, -1, 1, 1);
  Tensor b = Random({n, n}, DType::kF32, -1, 1, 2);
  Tensor c = Tensor::Empty({n, n}, DType::kF32).value();
  for (auto _ : state) {
    if (!MatMul(a, b, c).ok()) return state.SkipWithError("MatMul failed");
    benchmark::DoNotOptimize(c.raw_data());
  }
  // Check one element against a double dot product.
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  double ref = 0;
  for (int64_t k = 0; k < n; ++k) ref += double(A[3 * n % (n * n) + k]) * B[k * n + 5 % n];
  const float got = c.data<float>()[(3 * n % (n * n)) + 5 % n];
  Check(state, std::fabs(got - ref) <= 1e-3 * std::sqrt(double(n)), "wrong MatMul result");
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(std::string(cpu::CpuIsaName(cpu::ActiveCpuIsa())));
}
BENCHMARK(BM_MatMul)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EigenGemmNative(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Random({n, n}, DType::kF32, -1, 1, 1);
  Tensor b = Random({n, n}, DType::kF32, -1, 1, 2);
  std::vector<float> c(n * n);
  for (auto _ : state) {
    EigenGemmNative(a.data<float>(), b.data<float>(), c.data(), n, 1);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_EigenGemmNative)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------- memory-bound

void BM_Memcpy(benchmark::State& state) { MemcpyBaseline(state, state.range(0)); }
BENCHMARK(BM_Memcpy)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor x = Random({n}, DType::kF32, -4, 4);
  Tensor y = Tensor::Empty({n}, DType::kF32).value();
  for (auto _ : state) {
    if (!Gelu(x, y).ok()) return state.SkipWithError("Gelu failed");
    benchmark::DoNotOptimize(y.raw_data());
  }
  const float v = x.data<float>()[7];
  const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  Check(state, std::fabs(y.data<float>()[7] - ref) < 1e-5, "wrong Gelu result");
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_Gelu)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_GeluBackward(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor x = Random({n}, DType::kF32, -4, 4, 1);
  Tensor dy = Random({n}, DType::kF32, -1, 1, 2);
  Tensor dx = Tensor::Empty({n}, DType::kF32).value();
  for (auto _ : state) {
    if (!GeluBackward(x, dy, dx).ok()) return state.SkipWithError("GeluBackward failed");
    benchmark::DoNotOptimize(dx.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_GeluBackward)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor a = Random({n}, DType::kF32, -1, 1, 1);
  Tensor b = Random({n}, DType::kF32, -1, 1, 2);
  Tensor c = Tensor::Empty({n}, DType::kF32).value();
  for (auto _ : state) {
    if (!Add(a, b, c).ok()) return state.SkipWithError("Add failed");
    benchmark::DoNotOptimize(c.raw_data());
  }
  Check(state, c.data<float>()[9] == a.data<float>()[9] + b.data<float>()[9], "wrong Add result");
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_Add)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_CastF32ToBF16(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor x = Random({n}, DType::kF32, -4, 4);
  Tensor y = Tensor::Empty({n}, DType::kBF16).value();
  for (auto _ : state) {
    if (!Cast(x, y).ok()) return state.SkipWithError("Cast failed");
    benchmark::DoNotOptimize(y.raw_data());
  }
  Check(state, y.data<BFloat16>()[3].bits == BFloat16(x.data<float>()[3]).bits, "wrong cast");
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_CastF32ToBF16)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_SumRows(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  const int64_t cols = 1024;
  Tensor x = Random({n / cols, cols}, DType::kF32, -1, 1);
  Tensor y = Tensor::Empty({n / cols}, DType::kF32).value();
  for (auto _ : state) {
    if (!Sum(x, 1, y).ok()) return state.SkipWithError("Sum failed");
    benchmark::DoNotOptimize(y.raw_data());
  }
  double ref = 0;
  for (int64_t j = 0; j < cols; ++j) ref += x.data<float>()[j];
  Check(state, std::fabs(y.data<float>()[0] - ref) < 1e-3, "wrong Sum result");
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_SumRows)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

}  // namespace
}  // namespace zeroshard::bench
