// Helpers shared by the benchmarks: inputs, the memcpy baseline, result checks.
#ifndef ZEROSHARD_BENCH_BENCH_UTIL_H_
#define ZEROSHARD_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::bench {

// A tensor of values in [lo, hi), deterministic in (seed, index).
inline Tensor Random(absl::Span<const int64_t> shape, DType dtype, float lo, float hi,
                     uint64_t seed = 1) {
  const int64_t n = NumElements(shape);
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  return Tensor::FromVector(v, shape, dtype).value();
}

// Fails the benchmark (visibly, in its row) when `ok` is false.
inline bool Check(benchmark::State& state, bool ok, const char* what) {
  if (!ok) state.SkipWithError(what);
  return ok;
}

// Copies `bytes` bytes per iteration with memcpy: the bandwidth baseline that
// memory-bound kernels are reported beside.
inline void MemcpyBaseline(benchmark::State& state, int64_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_BENCH_UTIL_H_
