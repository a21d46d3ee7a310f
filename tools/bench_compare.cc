// bench_compare: compares two benchmark results and fails on a regression beyond noise.
//
//   tools/bench_compare OLD.json NEW.json [--floor=0.05]
//   tools/bench_compare OLD_DIR NEW_DIR           (every *.json file present in both, by name)
//
// Reads both formats that `make bench` writes (docs/benchmarks.md, "Results as data"):
//   - ours, "schema": "zeroshard-bench/1" (bench/bench_json.h): results[] with name, unit,
//     higher_is_better and the repeats of each figure;
//   - Google Benchmark's --benchmark_out JSON: "benchmarks"[] rows, per repetition
//     (run_type "iteration") or aggregated (run_type "aggregate": mean/median/stddev). Per
//     benchmark the figure is bytes_per_second, else items_per_second (both higher is
//     better), else real_time (lower is better); rows that failed their check
//     (error_occurred) are reported as such.
// Results are matched by name. It prints one row per name (old median, new median, the
// change, the noise band, a verdict) and the names present in only one file, and exits
//   0  no figure got worse beyond its noise band
//   1  at least one did (named in the table as REGRESSION), or a NEW row failed its check
//   2  usage error or malformed input (what was expected and what was found is printed)
//
// The noise rule. For each side, spread = MAD / median of its repeats (the median absolute
// deviation, relative: a robust half-width that one descheduled repeat does not blow up,
// as it would the range; 0 with one repeat; from Google Benchmark aggregates only, the
// stddev row times 0.6745, which is MAD for normal noise). A figure regressed when it got
// worse by more than
//     band = max(floor, 3 * sqrt(spread_old^2 + spread_new^2))
// - sqrt(..): the two runs' noises are independent, so they add in quadrature;
// - 3 *: for normal noise 3 MAD is about 2 standard deviations of one repeat, and the
//   median of several repeats varies less than one repeat, so a real 3-MAD shift of the
//   median is rarely noise;
// - floor (default 5%, --floor): repeats within one run do not see what differs between
//   two runs (other load, clock frequency, memory placement), which on a shared machine
//   moves figures by a few percent; a figure with tight repeats needs the floor.
// Improvements never fail. A figure whose units differ between the files is reported and
// not compared.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "zeroshard/bench/bench_results.h"
#include "zeroshard/bench/robust_stats.h"

namespace zeroshard::tools {
namespace {

using bench::Median;
using bench::RelativeMad;

using Json = nlohmann::json;  // bench_results.h reads with the same type

// One figure of one file.
struct Figure {
  std::string name;
  std::string unit;
  bool higher_is_better = false;
  double median = 0;
  double spread = 0;  // MAD / median
  int repeats = 0;
  bool failed = false;  // the bench's own check failed (Google Benchmark error_occurred)
  std::string error;
};

struct Results {
  std::vector<Figure> figures;  // in file order
};

absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

using bench::JsonNumber;

// Ours (bench/bench_results.h reads the schema): {"schema": "zeroshard-bench/1", "results": [...]}.
absl::StatusOr<Results> ReadOurs(const std::string& path, const Json& j) {
  absl::StatusOr<bench::ResultFile> file = bench::ReadResultJson(path, j);
  if (!file.ok()) return file.status();
  Results out;
  for (const bench::ResultFigure& r : file->figures) {
    Figure f;
    f.name = r.name;
    f.unit = r.unit;
    f.higher_is_better = r.higher_is_better;
    f.median = r.median;
    f.spread = r.spread;
    f.repeats = r.repeats;
    out.figures.push_back(std::move(f));
  }
  return out;
}

// Google Benchmark's JSON: {"context": ..., "benchmarks": [rows]}.
absl::StatusOr<Results> ReadGbench(const std::string& path, const Json& j) {
  if (!j.at("benchmarks").is_array()) return Malformed(path, "expected \"benchmarks\" to be an array");
  struct Group {
    std::vector<const Json*> iterations;
    std::map<std::string, const Json*> aggregates;  // "median", "mean", "stddev", ...
    bool failed = false;
    std::string error;
  };
  std::vector<std::string> order;
  std::map<std::string, Group> groups;
  int index = 0;
  for (const Json& row : j.at("benchmarks")) {
    const std::string where = absl::StrCat("benchmarks[", index++, "]");
    if (!row.is_object() || !row.contains("name") || !row.at("name").is_string()) {
      return Malformed(path, absl::StrCat(where, ": expected an object with a string \"name\""));
    }
    std::string name = row.value("run_name", row.at("name").get<std::string>());
    const std::string run_type = row.value("run_type", "iteration");
    const std::string aggregate = row.value("aggregate_name", "");
    if (run_type == "aggregate" && !row.contains("run_name") && !aggregate.empty() &&
        name.size() > aggregate.size() + 1 && name.ends_with("_" + aggregate)) {
      name.resize(name.size() - aggregate.size() - 1);
    }
    if (!groups.count(name)) order.push_back(name);
    Group& g = groups[name];
    if (row.value("error_occurred", false)) {
      g.failed = true;
      g.error = row.value("error_message", "error_occurred");
      continue;
    }
    if (run_type == "aggregate") {
      g.aggregates[aggregate] = &row;
    } else {
      g.iterations.push_back(&row);
    }
  }
  Results out;
  for (const std::string& name : order) {
    Group& g = groups[name];
    Figure f;
    f.name = name;
    if (g.failed) {
      f.failed = true;
      f.error = g.error;
      out.figures.push_back(std::move(f));
      continue;
    }
    const Json* any = !g.iterations.empty() ? g.iterations.front() : g.aggregates.begin()->second;
    const char* key = "real_time";
    if (any->contains("bytes_per_second")) {
      key = "bytes_per_second";
      f.unit = "B/s";
      f.higher_is_better = true;
    } else if (any->contains("items_per_second")) {
      key = "items_per_second";
      f.unit = "items/s";
      f.higher_is_better = true;
    } else {
      f.unit = any->value("time_unit", "ns");
    }
    const std::string where = absl::StrCat("benchmark \"", name, "\"");
    if (!g.iterations.empty()) {
      std::vector<double> v;
      for (const Json* row : g.iterations) {
        absl::StatusOr<double> x = JsonNumber(path, where, *row, key);
        if (!x.ok()) return x.status();
        v.push_back(*x);
      }
      f.median = Median(v);
      f.spread = RelativeMad(v);
      f.repeats = static_cast<int>(v.size());
    } else {
      const Json* center = g.aggregates.count("median") ? g.aggregates["median"]
                           : g.aggregates.count("mean") ? g.aggregates["mean"]
                                                        : nullptr;
      if (center == nullptr) {
        return Malformed(path, absl::StrCat(where, ": aggregate rows without a median or mean"));
      }
      absl::StatusOr<double> m = JsonNumber(path, where, *center, key);
      if (!m.ok()) return m.status();
      f.median = *m;
      f.repeats = center->value("repetitions", 0);
      if (g.aggregates.count("stddev") && f.median != 0) {
        absl::StatusOr<double> sd = JsonNumber(path, where, *g.aggregates["stddev"], key);
        if (!sd.ok()) return sd.status();
        f.spread = 0.6745 * *sd / std::fabs(f.median);
      }
    }
    out.figures.push_back(std::move(f));
  }
  return out;
}

absl::StatusOr<Results> ReadResults(const std::string& path) {
  absl::StatusOr<Json> parsed = bench::ParseJsonFile(path);
  if (!parsed.ok()) return parsed.status();
  const Json& j = *parsed;
  if (j.contains("schema")) return ReadOurs(path, j);
  if (j.contains("benchmarks")) return ReadGbench(path, j);
  return Malformed(path,
                   "expected a zeroshard-bench result (\"schema\": \"zeroshard-bench/1\") or Google Benchmark "
                   "JSON (\"benchmarks\"), found neither key");
}

std::string Format(double v, const std::string& unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s", v, unit.c_str());
  return buf;
}

// Compares two files; prints the table. Returns the number of regressions, or an error.
absl::StatusOr<int> CompareFiles(const std::string& old_path, const std::string& new_path, double floor) {
  absl::StatusOr<Results> old_r = ReadResults(old_path);
  if (!old_r.ok()) return old_r.status();
  absl::StatusOr<Results> new_r = ReadResults(new_path);
  if (!new_r.ok()) return new_r.status();
  std::map<std::string, const Figure*> olds, news;
  for (const Figure& f : old_r->figures) olds[f.name] = &f;
  for (const Figure& f : new_r->figures) news[f.name] = &f;

  size_t width = 4;
  for (const Figure& f : new_r->figures) width = std::max(width, f.name.size());
  std::printf("%-*s %16s %16s %9s %8s  %s\n", static_cast<int>(width), "name", "old median", "new median", "change",
              "noise", "verdict");
  int regressions = 0;
  std::vector<std::string> only_new, only_old;
  for (const Figure& n : new_r->figures) {
    auto it = olds.find(n.name);
    if (it == olds.end()) {
      only_new.push_back(n.name);
      continue;
    }
    const Figure& o = *it->second;
    const int w = static_cast<int>(width);
    if (n.failed) {
      std::printf("%-*s %16s %16s %9s %8s  FAILED (%s)\n", w, n.name.c_str(), o.failed ? "failed" : "", "failed", "",
                  "", n.error.c_str());
      ++regressions;
      continue;
    }
    if (o.failed) {
      std::printf("%-*s %16s %16s %9s %8s  old run failed (%s): not compared\n", w, n.name.c_str(), "failed",
                  Format(n.median, n.unit).c_str(), "", "", o.error.c_str());
      continue;
    }
    if (o.unit != n.unit || o.higher_is_better != n.higher_is_better) {
      std::printf("%-*s %16s %16s %9s %8s  units differ: not compared\n", w, n.name.c_str(),
                  Format(o.median, o.unit).c_str(), Format(n.median, n.unit).c_str(), "", "");
      continue;
    }
    // change: signed relative change of the median; worse: how much worse, in the
    // figure's own direction (negative when it improved).
    double change = 0;
    if (o.median != 0) {
      change = (n.median - o.median) / std::fabs(o.median);
    } else if (n.median != 0) {
      change = n.median > 0 ? INFINITY : -INFINITY;
    }
    const double worse = n.higher_is_better ? -change : change;
    const double band = std::max(floor, 3 * std::sqrt(o.spread * o.spread + n.spread * n.spread));
    const char* verdict = worse > band ? "REGRESSION" : worse < -band ? "better" : "within noise";
    if (worse > band) ++regressions;
    std::printf("%-*s %16s %16s %+8.1f%% %7.1f%%  %s\n", w, n.name.c_str(), Format(o.median, o.unit).c_str(),
                Format(n.median, n.unit).c_str(), 100 * change, 100 * band, verdict);
  }
  for (const Figure& o : old_r->figures) {
    if (!news.count(o.name)) only_old.push_back(o.name);
  }
  for (const std::string& name : only_old) std::printf("only in %s: %s\n", old_path.c_str(), name.c_str());
  for (const std::string& name : only_new) std::printf("only in %s: %s\n", new_path.c_str(), name.c_str());
  return regressions;
}

std::vector<std::string> JsonFiles(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

int Main(int argc, char** argv) {
  double floor = 0.05;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--floor=", 0) == 0) {
      char* end = nullptr;
      floor = std::strtod(a.c_str() + 8, &end);
      if (end == a.c_str() + 8 || *end != '\0' || !(floor >= 0)) {
        std::fprintf(stderr, "bench_compare: expected --floor=<fraction >= 0, e.g. 0.05>, found %s\n", a.c_str());
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: bench_compare OLD.json NEW.json | OLD_DIR NEW_DIR [--floor=0.05]\n");
      return 0;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 2) {
    std::fprintf(stderr, "usage: bench_compare OLD.json NEW.json | OLD_DIR NEW_DIR [--floor=0.05] (found %zu paths)\n",
                 paths.size());
    return 2;
  }
  namespace fs = std::filesystem;
  const bool old_dir = fs::is_directory(paths[0]), new_dir = fs::is_directory(paths[1]);
  if (old_dir != new_dir) {
    std::fprintf(stderr, "bench_compare: expected two files or two directories, found %s and %s\n",
                 paths[0].c_str(), paths[1].c_str());
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  if (old_dir) {
    const std::vector<std::string> olds = JsonFiles(paths[0]), news = JsonFiles(paths[1]);
    for (const std::string& f : olds) {
      if (std::find(news.begin(), news.end(), f) == news.end()) {
        std::printf("only in %s: file %s\n", paths[0].c_str(), f.c_str());
      } else {
        pairs.emplace_back((fs::path(paths[0]) / f).string(), (fs::path(paths[1]) / f).string());
      }
    }
    for (const std::string& f : news) {
      if (std::find(olds.begin(), olds.end(), f) == olds.end()) {
        std::printf("only in %s: file %s\n", paths[1].c_str(), f.c_str());
      }
    }
  } else {
    pairs.emplace_back(paths[0], paths[1]);
  }
  int regressions = 0;
  bool malformed = false;
  for (const auto& [o, n] : pairs) {
    if (old_dir) std::printf("\n== %s\n", fs::path(n).filename().c_str());
    absl::StatusOr<int> r = CompareFiles(o, n, floor);
    if (!r.ok()) {
      std::fprintf(stderr, "bench_compare: %s\n", std::string(r.status().message()).c_str());
      malformed = true;
      continue;
    }
    regressions += *r;
  }
  if (malformed) return 2;
  if (regressions) {
    std::printf("bench_compare: %d regression(s) beyond noise\n", regressions);
    return 1;
  }
  std::printf("bench_compare: no regression beyond noise\n");
  return 0;
}

}  // namespace
}  // namespace zeroshard::tools

int main(int argc, char** argv) { return zeroshard::tools::Main(argc, argv); }
