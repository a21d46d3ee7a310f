// The machine's load average, printed by the bench programs beside figures
// taken on machines that other work shares.
#ifndef ZEROSHARD_BENCH_LOAD_AVERAGE_H_
#define ZEROSHARD_BENCH_LOAD_AVERAGE_H_

#include <fstream>
#include <string>

namespace zeroshard::bench {

// The 1, 5 and 15-minute load averages, e.g. "0.52 1.10 2.31".
inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_LOAD_AVERAGE_H_
