// nvtx.h for a host-only build (ZEROSHARD_CUDA=0 or no toolkit): no NVTX.
#include "zeroshard/runtime/cuda/nvtx.h"

#include <cstdlib>
#include <cstring>

namespace zeroshard::nvtx {

bool BuiltIn() { return false; }

bool Requested() {
  const char* v = std::getenv("ZEROSHARD_NVTX");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

uint64_t RangeStart(const char*) { return 0; }
void RangeEnd(uint64_t) {}

std::vector<RecordedRange> RecordedRanges() { return {}; }
void ClearRecordedRanges() {}

}  // namespace zeroshard::nvtx
