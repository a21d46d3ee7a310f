// Attention and dropout benchmarks (part of //bench:kernels_bench):
//   AttentionForward/causal:<0|1>   GFLOP/s at B 8, H 4, T 128, D 64 (f32)
//   AttentionBackward/causal:<0|1>  the same shapes
//   Dropout/<bytes>                 bytes/s of f32 input (compare with Memcpy/<bytes>)
// FLOPs count the useful matrix products: forward 4 B H T^2 D (QK^T and PV),
// backward 2.5 times that (QK^T recomputed, dV, dP, dQ, dK); causal halves both
// (the masked half is not useful work). Each benchmark checks a result.
//
//   bazel run -c opt //bench:kernels_bench -- --benchmark_filter='Attention|Dropout|Memcpy'
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "zeroshard/bench/bench_util.h"
#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/dropout.h"
#include "zeroshard/kernels/math/dropout_math.h"
#include "zeroshard/kernels/math/philox.h"

namespace zeroshard::bench {
namespace {

constexpr int64_t kB = 8, kH = 4, kT = 128, kD = 64;

double AttentionForwardFlops(bool causal) {
  const double full = 4.0 * kB * kH * kT * kT * kD;
  return causal ? full / 2 : full;
}

// P (T x T) of head (0, 0) in double.
std::vector<double> HeadProbs(const Tensor& q, const Tensor& k, bool causal) {
  const float* Q = q.data<float>();
  const float* K = k.data<float>();
  const double scale = 1.0 / std::sqrt(double(kD));
  std::vector<double> p(kT * kT, 0.0);
  for (int64_t i = 0; i < kT; ++i) {
    const int64_t n = causal ? i + 1 : kT;
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t d = 0; d < kD; ++d) s += double(Q[i * kD + d]) * K[j * kD + d];
      p[i * kT + j] = s * scale;
      m = std::max(m, p[i * kT + j]);
    }
    for (int64_t j = 0; j < n; ++j) l += std::exp(p[i * kT + j] - m);
    for (int64_t j = 0; j < n; ++j) p[i * kT + j] = std::exp(p[i * kT + j] - m) / l;
  }
  return p;
}

void BM_AttentionForward(benchmark::State& state) {
  const bool causal = state.range(0) != 0;
  Tensor q = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 1);
  Tensor k = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 2);
  Tensor v = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 3);
  Tensor out = Tensor::Empty({kB, kH, kT, kD}, DType::kF32).value();
  Tensor lse = Tensor::Empty({kB, kH, kT}, DType::kF32).value();
  const AttentionOptions opt{.causal = causal};
  for (auto _ : state) {
    if (!AttentionForward(q, k, v, out, lse, opt).ok()) return state.SkipWithError("failed");
    benchmark::DoNotOptimize(out.raw_data());
  }
  // Check row 77 of head (0, 0): out = P V.
  const std::vector<double> p = HeadProbs(q, k, causal);
  double err = 0;
  for (int64_t d = 0; d < kD; ++d) {
    double ref = 0;
    for (int64_t j = 0; j < kT; ++j) ref += p[77 * kT + j] * v.data<float>()[j * kD + d];
    err = std::max(err, std::fabs(out.data<float>()[77 * kD + d] - ref));
  }
  Check(state, err < 1e-5, "wrong AttentionForward result");
  state.counters["GFLOP/s"] = benchmark::Counter(AttentionForwardFlops(causal),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(std::string(cpu::CpuIsaName(cpu::ActiveCpuIsa())));
}
BENCHMARK(BM_AttentionForward)->ArgName("causal")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionBackward(benchmark::State& state) {
  const bool causal = state.range(0) != 0;
  Tensor q = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 1);
  Tensor k = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 2);
  Tensor v = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 3);
  Tensor dout = Random({kB, kH, kT, kD}, DType::kF32, -1, 1, 4);
  const AttentionOptions opt{.causal = causal};
  const AttentionOutputs fwd = AttentionForward(q, k, v, opt).value();
  Tensor dq = Tensor::Empty({kB, kH, kT, kD}, DType::kF32).value();
  Tensor dk = Tensor::Empty({kB, kH, kT, kD}, DType::kF32).value();
  Tensor dv = Tensor::Empty({kB, kH, kT, kD}, DType::kF32).value();
  for (auto _ : state) {
    if (!AttentionBackward(dout, q, k, v, fwd.out, fwd.lse, dq, dk, dv, opt).ok()) {
      return state.SkipWithError("failed");
    }
    benchmark::DoNotOptimize(dq.raw_data());
  }
  // Check row 5 of dV of head (0, 0): dV = P^T dO.
  const std::vector<double> p = HeadProbs(q, k, causal);
  double err = 0;
  for (int64_t d = 0; d < kD; ++d) {
    double ref = 0;
    for (int64_t i = 0; i < kT; ++i) ref += p[i * kT + 5] * dout.data<float>()[i * kD + d];
    err = std::max(err, std::fabs(dv.data<float>()[5 * kD + d] - ref));
  }
  Check(state, err < 1e-4, "wrong AttentionBackward result");
  state.counters["GFLOP/s"] = benchmark::Counter(2.5 * AttentionForwardFlops(causal),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(std::string(cpu::CpuIsaName(cpu::ActiveCpuIsa())));
}
BENCHMARK(BM_AttentionBackward)->ArgName("causal")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Dropout(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor x = Random({n}, DType::kF32, -1, 1);
  Tensor y = Tensor::Empty({n}, DType::kF32).value();
  const PhiloxStream s{.seed = 1234, .offset = 0};
  for (auto _ : state) {
    if (!Dropout(x, 0.1, s, y).ok()) return state.SkipWithError("Dropout failed");
    benchmark::DoNotOptimize(y.raw_data());
  }
  bool ok = true;
  const DropoutParams dp = MakeDropoutParams(0.1);
  for (int64_t i : {int64_t{0}, int64_t{7}, n / 3, n - 1}) {
    const float want = DropoutKeep(PhiloxWordAt(s.seed, s.offset + i), dp)
                           ? x.data<float>()[i] * dp.scale : 0.0f;
    ok = ok && y.data<float>()[i] == want;
  }
  Check(state, ok, "wrong Dropout result");
  state.SetBytesProcessed(state.iterations() * n * 4);
  state.SetLabel(std::string(cpu::CpuIsaName(cpu::ActiveCpuIsa())));
}
BENCHMARK(BM_Dropout)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

}  // namespace
}  // namespace zeroshard::bench
