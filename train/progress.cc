#include "zeroshard/train/progress.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/kernels/cpu/gemm.h"
#include "zeroshard/kernels/cpu/isa.h"

namespace zeroshard {

PeakFlops MeasurePeakFlops() {
  // One thread, best of many short runs: on a shared machine the best run is
  // the least disturbed one; then times the threads OpenMP may use.
  constexpr int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  double best = 0;
  for (int i = 0; i < 12; ++i) {  // the first warms the caches
    const auto t0 = std::chrono::steady_clock::now();
    cpu::Gemm(cpu::ConstMatrixRef{a.data(), n, n, n, 1}, cpu::ConstMatrixRef{b.data(), n, n, n, 1},
              cpu::MatrixRef{c.data(), n, n, n, 1}, 1.0f, 0.0f);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0 && s > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  omp_set_num_threads(threads);
  return PeakFlops{best * threads,
                   absl::StrFormat("%d threads x %.1f GFLOP/s (best single-thread f32 GEMM %d^3, %s) = %.1f GFLOP/s",
                                   threads, best / 1e9, n, cpu::CpuIsaName(cpu::ActiveCpuIsa()), best * threads / 1e9)};
}

double GptTrainFlopsPerToken(const nn::GptConfig& c, int64_t num_params) {
  return nn::Gpt::TrainFlopsPerToken(c, num_params, c.block_size);
}

std::string ProgressLine(const ProgressState& s, int bar_width) {
  const int64_t done = s.step + 1;
  const int filled = s.steps > 0 ? static_cast<int>(bar_width * std::min<int64_t>(done, s.steps) / s.steps) : 0;
  std::string bar(bar_width, ' ');
  for (int i = 0; i < filled; ++i) bar[i] = '=';
  if (filled < bar_width && filled > 0) bar[filled] = '>';
  std::string line = absl::StrFormat("\r\33[2K[%s] %d/%d steps, loss %.4f lr %.2e %.0f tok/s %.0f ms/step", bar, done,
                                     s.steps, s.loss, s.lr, s.tokens_per_s, s.ms_per_step);
  if (s.mfu >= 0) absl::StrAppendFormat(&line, " MFU %.1f%%", 100.0 * s.mfu);
  if (!s.peak_bytes.empty()) {  // "mem 25.0/25.0/24.9/24.9 MiB": per rank
    absl::StrAppend(&line, " mem");
    for (size_t r = 0; r < s.peak_bytes.size(); ++r) {
      absl::StrAppendFormat(&line, "%s%.1f", r == 0 ? " " : "/", s.peak_bytes[r] / 1048576.0);
    }
    absl::StrAppend(&line, " MiB");
  }
  return line;
}

}  // namespace zeroshard
