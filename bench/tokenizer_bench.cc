// tokenizer_bench: GPT-2 BPE encoding speed on one core, beside baselines measured in
// the same run, with the ids checked against the golden file.
//
//   bazel build -c opt //bench:tokenizer_bench && bazel-bin/bench/tokenizer_bench [--repeats=7]
//       [--json_out=<file>]   also the figures as data (bench/bench_json.h)
//
// Rows (MB/s of text per second of this thread's CPU time, the median of --repeats
// runs; everything runs on the one thread, so this is the speed of one core, and CPU
// time rather than wall time keeps other work on a shared machine out of the figure;
// the wall-clock MB/s is printed beside it):
//   gpt2, fresh cache      a new tokenizer per run: the first pass over a text (the figure
//                          issue 23 asks >= 20 MB/s of)
//   gpt2, warm cache       the same tokenizer again: every pre-token a cache hit
//   gpt2, no cache         baseline: every pre-token merged afresh (GPT-2's merge loop
//                          without encoder.py's cache)
//   pre-tokenizer alone    GPT-2's pattern only (Gpt2Bpe::PreTokenize): the floor of the above
//   bytes                  baseline: ByteTokenizer, one id per byte (memory speed)
// and the time to load the bundled vocabulary. Exits 1 if any gpt2 row's ids differ from
// --golden.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/bench/load_average.h"
#include "zeroshard/data/gpt2_bpe.h"
#include "zeroshard/data/tokenizer.h"

ABSL_FLAG(std::string, text, "data/tinyshakespeare.txt", "the text to encode");
ABSL_FLAG(std::string, golden, "tests/data/testdata/tinyshakespeare_gpt2.bin",
          "its GPT-2 ids (raw little-endian uint16); empty: do not check");
ABSL_FLAG(int, repeats, 7, "runs per row; the median is printed");

namespace zeroshard {
namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double cpu, wall;  // medians, seconds
  std::vector<double> cpu_runs;  // every run's CPU seconds, in run order
};

// Every run's MB/s (of CPU time): a figure's repeats in the JSON results.
std::vector<double> MbPerSecond(double mb, const Timing& t) {
  std::vector<double> v;
  for (double s : t.cpu_runs) v.push_back(mb / s);
  return v;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "tokenizer_bench: cannot open \"" << path << "\" (run from the repository root)\n";
    std::exit(2);
  }
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Median CPU and wall seconds of `repeats` calls of run(); setup() before each, untimed.
Timing Measure(int repeats, const std::function<void()>& setup, const std::function<void()>& run) {
  std::vector<double> cpu, wall;
  for (int r = 0; r < repeats; ++r) {
    setup();
    const double c0 = ThreadCpuSeconds(), w0 = WallSeconds();
    run();
    cpu.push_back(ThreadCpuSeconds() - c0);
    wall.push_back(WallSeconds() - w0);
  }
  std::vector<double> runs = cpu;
  std::sort(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  return {cpu[cpu.size() / 2], wall[wall.size() / 2], std::move(runs)};
}

int Main(const std::string& json_out) {
  const std::string text = ReadFile(absl::GetFlag(FLAGS_text));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  std::vector<int32_t> golden;
  if (!absl::GetFlag(FLAGS_golden).empty()) {
    const std::string bytes = ReadFile(absl::GetFlag(FLAGS_golden));
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      golden.push_back(static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8));
    }
  }
  const double mb = text.size() / 1e6;
  std::printf("tokenizer_bench: %s, %.2f MB; processor: %s; load average %s; median of %d runs, one thread\n",
              absl::GetFlag(FLAGS_text).c_str(), mb, CpuModel().c_str(), bench::LoadAverage().c_str(), repeats);

  int failures = 0;
  auto check = [&](const char* row, const std::vector<int32_t>& ids) {
    if (golden.empty()) return;
    if (ids != golden) {
      std::printf("  %s: ids DIFFER from %s (%zu ids, golden %zu)\n", row, absl::GetFlag(FLAGS_golden).c_str(),
                  ids.size(), golden.size());
      ++failures;
    }
  };

  std::unique_ptr<Gpt2Bpe> bpe;
  const Timing load = Measure(repeats, [] {}, [&] { bpe = std::move(Gpt2Bpe::Bundled()).value(); });
  std::printf("  load the bundled vocabulary (50257 tokens, 50000 merges): %.1f ms CPU\n", load.cpu * 1e3);
  std::printf("  %-24s %10s %10s %12s  %s\n", "row", "MB/s (CPU)", "ms (CPU)", "MB/s (wall)", "ids");

  std::vector<int32_t> ids;
  auto row = [&](const char* name, Timing t, bool gpt2) {
    std::printf("  %-24s %10.1f %10.2f %12.1f  %zu%s\n", name, mb / t.cpu, t.cpu * 1e3, mb / t.wall, ids.size(),
                gpt2 ? (golden.empty() ? "" : ids == golden ? " (= golden)" : " (DIFFER)") : "");
    if (gpt2) check(name, ids);
  };

  const Timing fresh = Measure(
      repeats, [&] { bpe = std::move(Gpt2Bpe::Bundled()).value(); ids.clear(); },
      [&] { bpe->EncodeTo(text, &ids); });
  row("gpt2, fresh cache", fresh, true);
  const Timing warm = Measure(repeats, [&] { ids.clear(); }, [&] { bpe->EncodeTo(text, &ids); });
  row("gpt2, warm cache", warm, true);
  auto uncached = std::move(Gpt2Bpe::Bundled({.cache_entries = 0})).value();
  const Timing none = Measure(repeats, [&] { ids.clear(); }, [&] { uncached->EncodeTo(text, &ids); });
  row("gpt2, no cache (base)", none, true);
  size_t pieces = 0;
  const Timing pre = Measure(repeats, [] {}, [&] { pieces = Gpt2Bpe::PreTokenize(text).size(); });
  std::printf("  %-24s %10.1f %10.2f %12.1f  %zu pre-tokens\n", "pre-tokenizer alone", mb / pre.cpu, pre.cpu * 1e3,
              mb / pre.wall, pieces);
  ByteTokenizer bytes;
  const Timing byte = Measure(repeats, [&] { ids.clear(); }, [&] { bytes.EncodeTo(text, &ids); });
  row("bytes (base)", byte, false);

  std::printf("  gpt2 fresh cache: %.1f MB/s of one core's time, %.1fx the uncached merge loop; "
              "target >= 20 MB/s (issue 23): %s\n",
              mb / fresh.cpu, none.cpu / fresh.cpu, mb / fresh.cpu >= 20 ? "met" : "NOT met");
  if (!json_out.empty()) {
    bench::JsonReport report("tokenizer_bench");
    std::vector<double> load_ms;
    for (double s : load.cpu_runs) load_ms.push_back(s * 1e3);
    report.Add("tokenizer/load_vocab", "ms", /*higher_is_better=*/false, load_ms);
    report.Add("tokenizer/gpt2/fresh_cache", "MB/s", true, MbPerSecond(mb, fresh), "tokenizer/gpt2/no_cache");
    report.Add("tokenizer/gpt2/warm_cache", "MB/s", true, MbPerSecond(mb, warm), "tokenizer/gpt2/no_cache");
    report.Add("tokenizer/gpt2/no_cache", "MB/s", true, MbPerSecond(mb, none));
    report.Add("tokenizer/pretokenize", "MB/s", true, MbPerSecond(mb, pre));
    report.Add("tokenizer/bytes", "MB/s", true, MbPerSecond(mb, byte));
    if (absl::Status st = report.Write(json_out); !st.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  if (failures) {
    std::printf("tokenizer_bench FAILED: %d row(s) gave other ids than the golden file\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  const std::string json_out = zeroshard::bench::TakeJsonOutFlag(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  return zeroshard::Main(json_out);
}
