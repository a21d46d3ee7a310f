// tools/trace_summary TRACE.json: exposed communication per step and per unit
// of a Chrome trace (tools/trace_summary.h has the rule). Exits 0, or 2 with
// the reason on unreadable or malformed input.
#include <cstdio>
#include <string>

#include "zeroshard/tools/trace_summary.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: trace_summary TRACE.json\n");
    return 2;
  }
  const auto summary = zeroshard::tools::SummarizeTraceFile(argv[1]);
  if (!summary.ok()) {
    std::fprintf(stderr, "%s\n", summary.status().ToString().c_str());
    return 2;
  }
  std::fputs(zeroshard::tools::FormatSummary(*summary).c_str(), stdout);
  return 0;
}
