// runtime/cuda/nvtx.h answered by the simulator (--define=cuda_sim=1), as
// fake_cudart.cc answers cudart: no profiler exists to attach, so the ranges
// are kept in memory (the last 65536) for tests to read through
// nvtx::RecordedRanges(). Ids count from 1; ending an unknown id (or 0) does
// nothing, as NVTX does.
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "zeroshard/runtime/cuda/nvtx.h"

namespace zeroshard::nvtx {

namespace {

constexpr size_t kKept = 65536;

struct Ranges {
  std::mutex mu;
  uint64_t next_id = 1;
  uint64_t first_id = 1;  // the id of ranges.front()
  std::deque<RecordedRange> ranges;
};

Ranges& Kept() {
  static auto* r = new Ranges();
  return *r;
}

}  // namespace

bool BuiltIn() { return true; }

bool Requested() {
  const char* v = std::getenv("ZEROSHARD_NVTX");
  return v != nullptr && std::string(v) == "1";
}

uint64_t RangeStart(const char* name) {
  Ranges& r = Kept();
  std::lock_guard<std::mutex> lock(r.mu);
  r.ranges.push_back(RecordedRange{.name = name, .ended = false});
  if (r.ranges.size() > kKept) {
    r.ranges.pop_front();
    ++r.first_id;
  }
  return r.next_id++;
}

void RangeEnd(uint64_t id) {
  Ranges& r = Kept();
  std::lock_guard<std::mutex> lock(r.mu);
  if (id < r.first_id || id >= r.next_id) return;
  r.ranges[id - r.first_id].ended = true;
}

std::vector<RecordedRange> RecordedRanges() {
  Ranges& r = Kept();
  std::lock_guard<std::mutex> lock(r.mu);
  return std::vector<RecordedRange>(r.ranges.begin(), r.ranges.end());
}

void ClearRecordedRanges() {
  Ranges& r = Kept();
  std::lock_guard<std::mutex> lock(r.mu);
  r.first_id = r.next_id;
  r.ranges.clear();
}

}  // namespace zeroshard::nvtx
