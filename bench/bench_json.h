// JsonReport: a bench's figures as data, in our schema "zeroshard-bench/1", for the
// benches that are not Google Benchmark (those write --benchmark_out=<file>
// --benchmark_out_format=json). docs/benchmarks.md, "Results as data"; compared by
// tools/bench_compare.
//
//   int main(int argc, char** argv) {
//     const std::string json_out = bench::TakeJsonOutFlag(&argc, argv);  // before flag parsing
//     absl::ParseCommandLine(argc, argv);
//     bench::JsonReport report("tokenizer_bench");
//     report.Add("tokenizer/bytes", "MB/s", /*higher_is_better=*/true, {905, 900, 910});
//     report.Add("tokenizer/gpt2/fresh_cache", "MB/s", true, {20.1, 19.9, 20.0},
//                /*baseline=*/"tokenizer/bytes");
//     if (!json_out.empty()) CHECK_OK(report.Write(json_out));   // the printed table is unchanged
//   }
//
// The file:
//   {"schema": "zeroshard-bench/1", "bench": "tokenizer_bench",
//    "machine": {"cpu": <model name of /proc/cpuinfo>, "cores": N, "hostname": ..., "isa": <kernels/cpu/isa.h>},
//    "build": {"compiler": ..., "mode": "opt"|"dbg"|"fastbuild", "flags": ..., "commit": $ZEROSHARD_BENCH_COMMIT},
//    "date": "2024-01-01T12:00:00Z",
//    "results": [{"name": "a/b/c", "value": <median>, "unit": "MB/s", "higher_is_better": true,
//                 "baseline": {"name": ..., "value": ..., "unit": ...},   (when one was named)
//                 "repeats": [...], "median": ..., "spread": <MAD / median>}]}
// Names are slash-separated, lower case, bench first: "<bench>/<what>/<variant>".
#ifndef ZEROSHARD_BENCH_BENCH_JSON_H_
#define ZEROSHARD_BENCH_BENCH_JSON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zeroshard::bench {

class JsonReport {
 public:
  explicit JsonReport(std::string bench) : bench_(std::move(bench)) {}

  // One figure: its repeats (one value per timed run; value and median are their
  // median). `baseline` names another figure of this report, measured beside it in the
  // same run (it may be added later); Write fails when there is none of that name.
  void Add(std::string name, std::string unit, bool higher_is_better, std::vector<double> repeats,
           std::string baseline = "");

  // Writes the report; an error names the path, a repeated or empty name, a figure
  // without repeats or an unknown baseline.
  absl::Status Write(const std::string& path) const;

 private:
  struct Figure {
    std::string name, unit, baseline;
    bool higher_is_better;
    std::vector<double> repeats;
  };
  std::string bench_;
  std::vector<Figure> figures_;
};

// Removes every --json_out=<path> (or --json_out <path>) from argv, before Abseil or
// Google Benchmark parse the rest, and returns the last path ("" when none).
std::string TakeJsonOutFlag(int* argc, char** argv);

// The machine part of the file: {"cpu", "cores", "hostname", "isa"}, as a JSON text.
std::string MachineJson();

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_BENCH_JSON_H_
