// Reading back a results file of our schema "zeroshard-bench/1" (bench_json.h writes
// it): the one reader of the schema, used by tools/bench_compare (regressions beyond
// noise) and tools/bench_docs (the tables of docs/benchmarks.md).
//
//   absl::StatusOr<nlohmann::json> j = bench::ParseJsonFile(path);
//   if (!j.ok()) return j.status();                           // "<path>: cannot open" / "not valid JSON"
//   absl::StatusOr<bench::ResultFile> file = bench::ReadResultJson(path, *j);
//   for (const bench::ResultFigure& f : file->figures) ... f.name, f.median, f.spread, f.baseline ...
//
// Each figure's median and spread come from its repeats, the way bench_json.cc wrote
// them (robust_stats.h), so a file edited by hand cannot disagree with itself; a figure
// without repeats takes "value" and "spread". Machine, build and date are optional (a
// file without them reads with those fields empty); names, units, directions and numbers
// are checked, and an error says where, what was expected and what was found.
#ifndef ZEROSHARD_BENCH_BENCH_RESULTS_H_
#define ZEROSHARD_BENCH_BENCH_RESULTS_H_

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace zeroshard::bench {

struct ResultFigure {
  std::string name;
  std::string unit;
  bool higher_is_better = false;
  double median = 0;  // of the repeats ("value" without repeats)
  double spread = 0;  // MAD / median of the repeats (the file's "spread" without repeats)
  int repeats = 0;    // 1 when the file lists none
  // The figure measured beside it in the same run, when the file names one.
  std::string baseline;
  double baseline_value = std::nan("");
  std::string baseline_unit;
};

struct ResultFile {
  std::string path;
  std::string bench;                      // "tokenizer_bench"
  std::string cpu, hostname, isa;         // "machine"
  int cores = 0;
  std::string compiler, mode, commit;     // "build"
  std::string date;                       // UTC, "2026-11-27T08:55:20Z"
  std::vector<ResultFigure> figures;      // in file order
};

// The file at `path` parsed: NotFound "<path>: cannot open", InvalidArgument "<path>:
// not valid JSON" or "<path>: expected a JSON object, found <type>".
absl::StatusOr<nlohmann::json> ParseJsonFile(const std::string& path);

// `j` (the parsed file at `path`) as our schema. InvalidArgument "<path>: ..." names a
// wrong schema, a missing or mistyped field or a repeated name.
absl::StatusOr<ResultFile> ReadResultJson(const std::string& path, const nlohmann::json& j);

// Both of the above.
absl::StatusOr<ResultFile> ReadResultFile(const std::string& path);

// j[key] as a finite number; InvalidArgument "<path>: <where>: expected ..., found ..."
// otherwise.
absl::StatusOr<double> JsonNumber(const std::string& path, const std::string& where, const nlohmann::json& j,
                                  const char* key);

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_BENCH_RESULTS_H_
