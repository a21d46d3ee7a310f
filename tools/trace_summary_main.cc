// tools/trace_summary [--ops] TRACE.json: exposed communication per step and
// per unit of a Chrome trace (tools/trace_summary.h has the rule), and with
// --ops the per-op breakdown. Exits 0, or 2 with
// the reason on unreadable or malformed input.
#include <cstdio>
#include <string>

#include "zeroshard/tools/trace_summary.h"

int main(int argc, char** argv) {
  bool ops = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ops") {
      ops = true;
    } else if (a == "--help" || !path.empty() || (!a.empty() && a[0] == '-')) {
      std::fprintf(stderr,
                   "usage: trace_summary [--ops] TRACE.json\n"
                   "  --ops  also the per-op breakdown of each rank (Note [Per-op breakdown])\n");
      return 2;
    } else {
      path = a;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: trace_summary [--ops] TRACE.json\n");
    return 2;
  }
  const auto summary = zeroshard::tools::SummarizeTraceFile(path);
  if (!summary.ok()) {
    std::fprintf(stderr, "%s\n", summary.status().ToString().c_str());
    return 2;
  }
  std::fputs(zeroshard::tools::FormatSummary(*summary, ops).c_str(), stdout);
  return 0;
}
