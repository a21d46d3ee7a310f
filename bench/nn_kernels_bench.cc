// Benchmarks of the row kernels: softmax, LayerNorm, cross-entropy, embedding
// (f32, all threads). Each reports bytes/s, counting one input tensor's bytes
// once per iteration (the convention of BM_Memcpy and the rows of
// kernels_bench.cc), so it reads directly against a memcpy of the same bytes:
//   Softmax, LogSoftmax /<bytes>        x [bytes / 4096, 1024]
//   LayerNormForward /<bytes>           x [bytes / 3072, 768] (also writes out, mean, rstd)
//   LayerNormBackward /<bytes>          x [bytes / 3072, 768] (also reads dy; writes dx, dweight, dbias)
//   CrossEntropyForward /<rows>/<V>     logits [rows, V]
//   CrossEntropyBackward /<rows>/<V>    logits [rows, V] (writes dlogits, another [rows, V])
//   Embedding /<rows>                   out [rows, 768] gathered from a [8192, 768] table
//   EmbeddingBackward /<rows>           dout [rows, 768] scatter-added into [8192, 768]
//   MemcpySameBytes /<bytes>            memcpy baselines at the byte counts above that
//                                       BM_Memcpy (4 MiB, 64 MiB) does not cover
// Each benchmark checks one result against a double computation and fails its row if wrong.
//
//   bazel run -c opt //bench:kernels_bench -- --benchmark_filter='Softmax|LayerNorm|CrossEntropy|Embedding|Memcpy'
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "zeroshard/bench/bench_util.h"
#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/embedding.h"
#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/softmax.h"

namespace zeroshard::bench {
namespace {

// ---------------------------------------------------------------- softmax

void SoftmaxBench(benchmark::State& state, bool log) {
  const int64_t cols = 1024;
  const int64_t rows = state.range(0) / (4 * cols);
  Tensor x = Random({rows, cols}, DType::kF32, -8, 8);
  Tensor y = Tensor::Empty({rows, cols}, DType::kF32).value();
  for (auto _ : state) {
    if (!(log ? LogSoftmax(x, y) : Softmax(x, y)).ok()) return state.SkipWithError("Softmax failed");
    benchmark::DoNotOptimize(y.raw_data());
  }
  const int64_t r = rows / 2;
  const float* xr = x.data<float>() + r * cols;
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < cols; ++i) m = std::max<double>(m, xr[i]);
  for (int64_t i = 0; i < cols; ++i) s += std::exp(xr[i] - m);
  const double want = log ? xr[5] - m - std::log(s) : std::exp(xr[5] - m) / s;
  Check(state, std::fabs(y.data<float>()[r * cols + 5] - want) <= 1e-5 * std::fabs(want) + 1e-6,
        "wrong Softmax result");
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
}

void BM_Softmax(benchmark::State& state) { SoftmaxBench(state, false); }
BENCHMARK(BM_Softmax)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_LogSoftmax(benchmark::State& state) { SoftmaxBench(state, true); }
BENCHMARK(BM_LogSoftmax)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

// ---------------------------------------------------------------- LayerNorm

constexpr int64_t kC = 768;  // GPT-2 small

void BM_LayerNormForward(benchmark::State& state) {
  const int64_t rows = state.range(0) / (4 * kC);
  Tensor x = Random({rows, kC}, DType::kF32, -2, 2, 1);
  Tensor w = Random({kC}, DType::kF32, 0.5, 1.5, 2);
  Tensor b = Random({kC}, DType::kF32, -1, 1, 3);
  Tensor out = Tensor::Empty({rows, kC}, DType::kF32).value();
  Tensor mean = Tensor::Empty({rows}, DType::kF32).value();
  Tensor rstd = Tensor::Empty({rows}, DType::kF32).value();
  for (auto _ : state) {
    if (!LayerNormForward(x, w, b, 1e-5, out, mean, rstd).ok()) return state.SkipWithError("LayerNorm failed");
    benchmark::DoNotOptimize(out.raw_data());
  }
  const float* xr = x.data<float>() + 3 * kC;
  double m = 0, v = 0;
  for (int64_t i = 0; i < kC; ++i) m += xr[i];
  m /= kC;
  for (int64_t i = 0; i < kC; ++i) v += (xr[i] - m) * (xr[i] - m);
  const double want = (xr[7] - m) / std::sqrt(v / kC + 1e-5) * w.data<float>()[7] + b.data<float>()[7];
  Check(state, std::fabs(out.data<float>()[3 * kC + 7] - want) < 1e-4, "wrong LayerNorm result");
  state.SetBytesProcessed(state.iterations() * rows * kC * 4);
}
BENCHMARK(BM_LayerNormForward)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

void BM_LayerNormBackward(benchmark::State& state) {
  const int64_t rows = state.range(0) / (4 * kC);
  Tensor x = Random({rows, kC}, DType::kF32, -2, 2, 1);
  Tensor dy = Random({rows, kC}, DType::kF32, -1, 1, 4);
  Tensor w = Random({kC}, DType::kF32, 0.5, 1.5, 2);
  Tensor out = Tensor::Empty({rows, kC}, DType::kF32).value();
  Tensor mean = Tensor::Empty({rows}, DType::kF32).value();
  Tensor rstd = Tensor::Empty({rows}, DType::kF32).value();
  Tensor dx = Tensor::Empty({rows, kC}, DType::kF32).value();
  Tensor dw = Tensor::Empty({kC}, DType::kF32).value();
  Tensor db = Tensor::Empty({kC}, DType::kF32).value();
  if (!LayerNormForward(x, w, Tensor(), 1e-5, out, mean, rstd).ok()) return state.SkipWithError("forward failed");
  for (auto _ : state) {
    if (!LayerNormBackward(dy, x, mean, rstd, w, dx, dw, db, GradMode::kOverwrite).ok()) {
      return state.SkipWithError("LayerNormBackward failed");
    }
    benchmark::DoNotOptimize(dx.raw_data());
  }
  double want = 0;  // dbias[5] = sum of dy[:, 5]
  for (int64_t r = 0; r < rows; ++r) want += dy.data<float>()[r * kC + 5];
  Check(state, std::fabs(db.data<float>()[5] - want) < 1e-5 * rows, "wrong LayerNormBackward result");
  state.SetBytesProcessed(state.iterations() * rows * kC * 4);
}
BENCHMARK(BM_LayerNormBackward)->Arg(4 << 20)->Arg(64 << 20)->UseRealTime();

// ---------------------------------------------------------------- cross-entropy

Tensor Targets(int64_t rows, int64_t vocab) {
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7919) % vocab;
  return Tensor::FromVector(t, {rows}, DType::kI64).value();
}

void BM_CrossEntropyForward(benchmark::State& state) {
  const int64_t rows = state.range(0), vocab = state.range(1);
  Tensor logits = Random({rows, vocab}, DType::kF32, -8, 8);
  Tensor targets = Targets(rows, vocab);
  Tensor losses = Tensor::Empty({rows}, DType::kF32).value();
  Tensor lse = Tensor::Empty({rows}, DType::kF32).value();
  for (auto _ : state) {
    if (!CrossEntropyForward(logits, targets, losses, lse).ok()) return state.SkipWithError("forward failed");
    benchmark::DoNotOptimize(losses.raw_data());
  }
  const int64_t r = rows - 1;
  const float* xr = logits.data<float>() + r * vocab;
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < vocab; ++i) m = std::max<double>(m, xr[i]);
  for (int64_t i = 0; i < vocab; ++i) s += std::exp(xr[i] - m);
  const double want = m + std::log(s) - xr[targets.data<int64_t>()[r]];
  Check(state, std::fabs(losses.data<float>()[r] - want) < 1e-4, "wrong CrossEntropy loss");
  state.SetBytesProcessed(state.iterations() * rows * vocab * 4);
}
BENCHMARK(BM_CrossEntropyForward)->Args({16384, 256})->Args({64, 50257})->UseRealTime();

void BM_CrossEntropyBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), vocab = state.range(1);
  Tensor logits = Random({rows, vocab}, DType::kF32, -8, 8);
  Tensor targets = Targets(rows, vocab);
  Tensor lse = Tensor::Empty({rows}, DType::kF32).value();
  Tensor dloss = Tensor::Full({1}, 1.0 / rows, DType::kF32).value();
  Tensor dlogits = Tensor::Empty({rows, vocab}, DType::kF32).value();
  if (!CrossEntropyForward(logits, targets, Tensor(), lse).ok()) return state.SkipWithError("forward failed");
  for (auto _ : state) {
    if (!CrossEntropyBackward(logits, targets, lse, dloss, dlogits).ok()) {
      return state.SkipWithError("backward failed");
    }
    benchmark::DoNotOptimize(dlogits.raw_data());
  }
  double s = 0;  // each row of softmax - onehot sums to 0
  for (int64_t i = 0; i < vocab; ++i) s += dlogits.data<float>()[i];
  Check(state, std::fabs(s) < 1e-5 / rows, "wrong CrossEntropy gradient");
  state.SetBytesProcessed(state.iterations() * rows * vocab * 4);
}
BENCHMARK(BM_CrossEntropyBackward)->Args({16384, 256})->Args({64, 50257})->UseRealTime();

// ---------------------------------------------------------------- embedding

constexpr int64_t kVocab = 8192;

Tensor Ids(int64_t rows) {
  std::vector<int32_t> ids(rows);
  for (int64_t p = 0; p < rows; ++p) ids[p] = static_cast<int32_t>((p * 2654435761u) % kVocab);
  return Tensor::FromVector(ids, {rows}, DType::kI32).value();
}

void BM_Embedding(benchmark::State& state) {
  const int64_t rows = state.range(0);
  Tensor w = Random({kVocab, kC}, DType::kF32, -1, 1);
  Tensor ids = Ids(rows);
  Tensor out = Tensor::Empty({rows, kC}, DType::kF32).value();
  for (auto _ : state) {
    if (!Embedding(w, ids, out).ok()) return state.SkipWithError("Embedding failed");
    benchmark::DoNotOptimize(out.raw_data());
  }
  const int64_t p = rows / 3;
  Check(state, out.data<float>()[p * kC + 9] == w.data<float>()[ids.data<int32_t>()[p] * kC + 9],
        "wrong Embedding result");
  state.SetBytesProcessed(state.iterations() * rows * kC * 4);
}
BENCHMARK(BM_Embedding)->Arg(1365)->Arg(21845)->UseRealTime();

void BM_EmbeddingBackward(benchmark::State& state) {
  const int64_t rows = state.range(0);
  Tensor dout = Random({rows, kC}, DType::kF32, -1, 1);
  Tensor ids = Ids(rows);
  Tensor dw = Tensor::Empty({kVocab, kC}, DType::kF32).value();
  for (auto _ : state) {
    // Accumulate: the common case (the table's gradient buffer is zeroed once per step elsewhere).
    if (!EmbeddingBackward(dout, ids, dw, GradMode::kAccumulate).ok()) {
      return state.SkipWithError("EmbeddingBackward failed");
    }
    benchmark::DoNotOptimize(dw.raw_data());
  }
  if (!EmbeddingBackward(dout, ids, dw, GradMode::kOverwrite).ok()) return state.SkipWithError("overwrite failed");
  const int32_t id = ids.data<int32_t>()[0];
  double want = 0;
  for (int64_t p = 0; p < rows; ++p) {
    if (ids.data<int32_t>()[p] == id) want += dout.data<float>()[p * kC + 11];
  }
  Check(state, std::fabs(dw.data<float>()[id * kC + 11] - want) < 1e-5, "wrong EmbeddingBackward result");
  state.SetBytesProcessed(state.iterations() * rows * kC * 4);
}
BENCHMARK(BM_EmbeddingBackward)->Arg(1365)->Arg(21845)->UseRealTime();

// ---------------------------------------------------------------- baselines

// memcpy at the byte counts of the cross-entropy rows (16 MiB; 64 * 50257 * 4).
void BM_MemcpySameBytes(benchmark::State& state) { MemcpyBaseline(state, state.range(0)); }
BENCHMARK(BM_MemcpySameBytes)->Arg(16384 * 256 * 4)->Arg(64 * 50257 * 4)->UseRealTime();

}  // namespace
}  // namespace zeroshard::bench
