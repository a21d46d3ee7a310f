// The robust figures of a bench's repeats: their median and their spread as
// the median absolute deviation over the median. bench_json.cc writes them
// into a result and tools/bench_compare.cc recomputes them from the repeats,
// so both read repeats the same way (docs/benchmarks.md, "Results as data").
#ifndef ZEROSHARD_BENCH_ROBUST_STATS_H_
#define ZEROSHARD_BENCH_ROBUST_STATS_H_

#include <algorithm>
#include <cmath>
#include <vector>

namespace zeroshard::bench {

// The middle value, or the mean of the two middle ones; `v` must not be empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// MAD / |median|; 0 for fewer than two values or a zero median.
inline double RelativeMad(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Median(v);
  if (m == 0) return 0;
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return Median(dev) / std::fabs(m);
}

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_ROBUST_STATS_H_
