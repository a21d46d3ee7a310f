#include "zeroshard/bench/bench_json.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "zeroshard/bench/robust_stats.h"
#include "zeroshard/kernels/cpu/isa.h"

namespace zeroshard::bench {
namespace {

using Json = nlohmann::ordered_json;

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

Json Machine() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  Json m;
  m["cpu"] = CpuModel();
  m["cores"] = std::thread::hardware_concurrency();
  m["hostname"] = host;
  m["isa"] = std::string(cpu::CpuIsaName(cpu::ActiveCpuIsa()));
  return m;
}

Json Build() {
  Json b;
#if defined(__clang__)
  b["compiler"] = absl::StrCat("clang ", __clang_version__);
#elif defined(__GNUC__)
  b["compiler"] = absl::StrCat("gcc ", __VERSION__);
#else
  b["compiler"] = "unknown";
#endif
  // Bazel's compilation modes: opt defines NDEBUG and optimises, dbg neither.
#if defined(NDEBUG) && defined(__OPTIMIZE__)
  b["mode"] = "opt";
#elif defined(__OPTIMIZE__)
  b["mode"] = "optimized, assertions on";
#elif defined(NDEBUG)
  b["mode"] = "unoptimized, NDEBUG";
#else
  b["mode"] = "fastbuild or dbg (unoptimized)";
#endif
  b["flags"] = "tools/cc.bzl ZS_COPTS, .bazelrc (portable baseline, AVX2/AVX-512 paths picked at run time)";
  const char* commit = std::getenv("ZEROSHARD_BENCH_COMMIT");
  b["commit"] = commit != nullptr ? commit : "";
  return b;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

void JsonReport::Add(std::string name, std::string unit, bool higher_is_better, std::vector<double> repeats,
                     std::string baseline) {
  figures_.push_back({std::move(name), std::move(unit), std::move(baseline), higher_is_better, std::move(repeats)});
}

absl::Status JsonReport::Write(const std::string& path) const {
  std::map<std::string, const Figure*> by_name;
  for (const Figure& f : figures_) {
    if (f.name.empty()) return absl::InvalidArgumentError(absl::StrCat(bench_, ": a figure without a name"));
    if (f.repeats.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(bench_, ": figure \"", f.name, "\" has no repeats"));
    }
    if (!by_name.emplace(f.name, &f).second) {
      return absl::InvalidArgumentError(absl::StrCat(bench_, ": figure name \"", f.name, "\" repeated"));
    }
  }
  Json j;
  j["schema"] = "zeroshard-bench/1";
  j["bench"] = bench_;
  j["machine"] = Machine();
  j["build"] = Build();
  j["date"] = UtcNow();
  Json results = Json::array();
  for (const Figure& f : figures_) {
    const double median = Median(f.repeats);
    Json r;
    r["name"] = f.name;
    r["value"] = median;
    r["unit"] = f.unit;
    r["higher_is_better"] = f.higher_is_better;
    if (!f.baseline.empty()) {
      auto it = by_name.find(f.baseline);
      if (it == by_name.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(bench_, ": figure \"", f.name, "\" names baseline \"", f.baseline, "\", which is not in the report"));
      }
      r["baseline"] = {{"name", f.baseline}, {"value", Median(it->second->repeats)}, {"unit", it->second->unit}};
    }
    r["repeats"] = f.repeats;
    r["median"] = median;
    r["spread"] = RelativeMad(f.repeats);
    results.push_back(std::move(r));
  }
  j["results"] = std::move(results);
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write bench results to ", path, ": ", std::strerror(errno)));
  out << j.dump(1) << "\n";
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("writing bench results to ", path, " failed"));
  return absl::OkStatus();
}

std::string TakeJsonOutFlag(int* argc, char** argv) {
  std::string path;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--json_out=", 11) == 0) {
      path = a + 11;
    } else if (std::strcmp(a, "--json_out") == 0 && i + 1 < *argc) {
      path = argv[++i];
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  return path;
}

std::string MachineJson() { return Machine().dump(); }

}  // namespace zeroshard::bench
