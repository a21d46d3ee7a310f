// NVTX ranges: named host ranges that Nsight Systems (`nsys profile`) shows on
// the thread that opened them and projects onto the GPU work launched inside
// them. Three implementations, chosen by Bazel rather than #ifdef: nvtx.cc
// (the toolkit's header-only nvtx3, in builds with the CUDA toolkit),
// tools/cuda/sim/fake_nvtx.cc (the simulator's stand-in, --define=cuda_sim=1:
// it keeps the ranges in memory, for tests) and no_nvtx.cc (a host-only build:
// every call does nothing and returns 0).
//
//   const uint64_t id = nvtx::RangeStart("backward MatMul");
//   ... launch the op's kernels ...
//   nvtx::RangeEnd(id);
//
// Ranges are start/end ranges of the domain "zeroshard" (nsys lists them under
// it), not push/pop ranges: a unit's backward ends after later units' have
// started, so they need not nest. Without a profiler attached, nvtx3 calls an
// empty function (its loader found no tool at the first call). Callers decide
// whether to open ranges at all (runtime/gpu_timeline.h: only while traced, or
// when ZEROSHARD_NVTX=1 asks).
#ifndef ZEROSHARD_RUNTIME_CUDA_NVTX_H_
#define ZEROSHARD_RUNTIME_CUDA_NVTX_H_

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::nvtx {

// True when this binary calls nvtx3 (built with the CUDA toolkit).
bool BuiltIn();
// True when the environment asks for ranges without a trace: ZEROSHARD_NVTX=1
// (read at each call; the job asks once, at its start).
bool Requested();
// Opens a range named `name` (copied by NVTX); its id, or 0 when none opened.
uint64_t RangeStart(const char* name);
// Closes a range RangeStart opened; 0 is ignored.
void RangeEnd(uint64_t id);

// For tests: the ranges the simulator's stand-in kept (its last 65536, oldest
// first), and forgetting them. Other builds keep none (a profiler records
// ranges there): empty.
struct RecordedRange {
  std::string name;
  bool ended = false;
};
std::vector<RecordedRange> RecordedRanges();
void ClearRecordedRanges();

}  // namespace zeroshard::nvtx

#endif  // ZEROSHARD_RUNTIME_CUDA_NVTX_H_
