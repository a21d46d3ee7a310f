#include "collectives/cpu_reduce.h"

#include <algorithm>
#include <cstring>

#include "runtime/check.h"

namespace zeroshard {
namespace {

// Elements per chunk: the fp32/i64 accumulator stays in L1 (16 KiB at most).
constexpr int64_t kChunk = 2048;

// One chunk-loop per (dtype, op). Each clone is the same C++ compiled for a
// different ISA; the resolver picks one when the library loads.
template <typename T, ReduceOp kOp>
__attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
void ReduceChunked(const void* const* inputs, int num_inputs, void* const* outputs,
                   int num_outputs, int64_t count) {
  using Tr = ReduceTraits<T>;
  using Acc = typename Tr::Acc;
  alignas(64) Acc acc[kChunk];
  for (int64_t base = 0; base < count; base += kChunk) {
    const int64_t n = std::min(kChunk, count - base);
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (int64_t i = 0; i < n; ++i) acc[i] = Tr::Load(first[i]);
    for (int k = 1; k < num_inputs; ++k) {
      const T* in = static_cast<const T*>(inputs[k]) + base;
      for (int64_t i = 0; i < n; ++i) acc[i] = ReduceCombine<kOp>(acc[i], Tr::Load(in[i]));
    }
    if constexpr (kOp == ReduceOp::kAvg) {
      for (int64_t i = 0; i < n; ++i) acc[i] = ReduceFinish<kOp>(acc[i], num_inputs);
    }
    for (int j = 0; j < num_outputs; ++j) {
      T* out = static_cast<T*>(outputs[j]) + base;
      for (int64_t i = 0; i < n; ++i) out[i] = Tr::Store(acc[i]);
    }
  }
}

template <typename T>
void ReduceTyped(ReduceOp op, const void* const* inputs, int num_inputs, void* const* outputs,
                 int num_outputs, int64_t count) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceChunked<T, ReduceOp::kSum>(inputs, num_inputs, outputs, num_outputs, count);
    case ReduceOp::kAvg:
      return ReduceChunked<T, ReduceOp::kAvg>(inputs, num_inputs, outputs, num_outputs, count);
    case ReduceOp::kMax:
      return ReduceChunked<T, ReduceOp::kMax>(inputs, num_inputs, outputs, num_outputs, count);
  }
  ZS_CHECK(false, "invalid ReduceOp ", static_cast<int>(op));
}

}  // namespace

void ReduceBuffers(DType dtype, ReduceOp op, absl::Span<const void* const> inputs,
                   absl::Span<void* const> outputs, int64_t count) {
  ZS_CHECK(!inputs.empty(), "ReduceBuffers needs at least one input");
  if (count <= 0 || outputs.empty()) return;
  if (inputs.size() == 1) {  // a copy: avoid the round trip through fp32
    const size_t bytes = static_cast<size_t>(count) * DTypeSize(dtype);
    for (void* out : outputs) {
      if (out != inputs[0]) std::memcpy(out, inputs[0], bytes);
    }
    return;
  }
  DispatchDType(dtype, [&]<typename T>() {
    ReduceTyped<T>(op, inputs.data(), static_cast<int>(inputs.size()), outputs.data(),
                   static_cast<int>(outputs.size()), count);
  });
}

}  // namespace zeroshard
