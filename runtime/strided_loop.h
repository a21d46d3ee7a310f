// ForEachStridedRun: the one loop every CPU copy and elementwise kernel uses to
// walk K operands that share a shape but have their own strides (views,
// transposes, broadcasts with stride 0).
//
//   // out = a + b, each with its own strides (in elements) over `shape`:
//   ForEachStridedRun<3>(shape, {out.strides(), a.strides(), b.strides()},
//       [&](int64_t n, const int64_t* off, const int64_t* step) {
//         for (int64_t i = 0; i < n; ++i)
//           po[off[0] + i * step[0]] = pa[off[1] + i * step[1]] + pb[off[2] + i * step[2]];
//       });
//
// The body sees "runs": `n` consecutive positions along the innermost (after
// coalescing) dimension, starting at element offsets `off[k]` and advancing by
// `step[k]`. Adjacent dimensions that are contiguous for every operand are
// merged first, so a contiguous tensor is one run (split between threads).
// Runs are handed out over [0, numel) in row-major order, each thread a
// contiguous range, so a body that writes only its own positions is race free
// and its result does not depend on the number of threads.
#ifndef ZEROSHARD_RUNTIME_STRIDED_LOOP_H_
#define ZEROSHARD_RUNTIME_STRIDED_LOOP_H_

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "zeroshard/runtime/check.h"

namespace zeroshard {

// Below this many elements a loop runs on the calling thread.
inline constexpr int64_t kParallelGrain = int64_t{1} << 15;

template <size_t K>
struct StridedLayout {
  absl::InlinedVector<int64_t, 6> sizes;                  // outer .. inner, no size-1 dims
  std::array<absl::InlinedVector<int64_t, 6>, K> strides;  // per operand, same order
  int64_t numel = 1;
};

template <size_t K>
StridedLayout<K> CoalesceDims(absl::Span<const int64_t> shape,
                              const std::array<absl::Span<const int64_t>, K>& strides) {
  StridedLayout<K> layout;
  for (size_t d = 0; d < shape.size(); ++d) layout.numel *= shape[d];
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int64_t size = shape[d];
    if (!layout.sizes.empty()) {
      // Merge with the previous (outer) dim when, for every operand,
      // outer_stride == inner_stride * inner_size.
      bool mergeable = true;
      for (size_t k = 0; k < K; ++k) {
        if (layout.strides[k].back() != strides[k][d] * size) mergeable = false;
      }
      if (mergeable) {
        layout.sizes.back() *= size;
        for (size_t k = 0; k < K; ++k) layout.strides[k].back() = strides[k][d];
        continue;
      }
    }
    layout.sizes.push_back(size);
    for (size_t k = 0; k < K; ++k) layout.strides[k].push_back(strides[k][d]);
  }
  if (layout.sizes.empty()) {  // a scalar or all-ones shape: one element
    layout.sizes.push_back(1);
    for (size_t k = 0; k < K; ++k) layout.strides[k].push_back(0);
  }
  return layout;
}

// Calls body(n, off, step) for each run within linear positions [begin, end).
template <size_t K, typename Body>
void ForEachRunInRange(const StridedLayout<K>& layout, int64_t begin, int64_t end, Body& body) {
  const int nd = static_cast<int>(layout.sizes.size());
  absl::InlinedVector<int64_t, 6> idx(nd, 0);
  int64_t off[K] = {};
  int64_t step[K];
  for (size_t k = 0; k < K; ++k) step[k] = layout.strides[k][nd - 1];
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % layout.sizes[d];
    rem /= layout.sizes[d];
    for (size_t k = 0; k < K; ++k) off[k] += idx[d] * layout.strides[k][d];
  }
  const int64_t inner = layout.sizes[nd - 1];
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(inner - idx[nd - 1], end - pos);
    body(n, static_cast<const int64_t*>(off), static_cast<const int64_t*>(step));
    pos += n;
    idx[nd - 1] += n;
    for (size_t k = 0; k < K; ++k) off[k] += n * step[k];
    for (int d = nd - 1; d > 0 && idx[d] == layout.sizes[d]; --d) {  // carry
      for (size_t k = 0; k < K; ++k) {
        off[k] += layout.strides[k][d - 1] - idx[d] * layout.strides[k][d];
      }
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

template <size_t K, typename Body>
void ForEachStridedRun(absl::Span<const int64_t> shape,
                       const std::array<absl::Span<const int64_t>, K>& strides, Body&& body,
                       int64_t grain = kParallelGrain) {
  for (size_t k = 0; k < K; ++k) {
    ZS_CHECK(strides[k].size() == shape.size(), "operand ", k, " has ", strides[k].size(),
             " strides for a ", shape.size(), "-d shape");
  }
  const StridedLayout<K> layout = CoalesceDims<K>(shape, strides);
  const int64_t numel = layout.numel;
  if (numel == 0) return;
  const int max_threads = omp_get_max_threads();
  if (numel < 2 * grain || max_threads <= 1 || omp_in_parallel()) {
    ForEachRunInRange<K>(layout, 0, numel, body);
    return;
  }
  const int threads = static_cast<int>(std::min<int64_t>(max_threads, numel / grain));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int nt = omp_get_num_threads();
    const int64_t begin = numel * t / nt;
    const int64_t end = numel * (t + 1) / nt;
    ForEachRunInRange<K>(layout, begin, end, body);
  }
}

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_STRIDED_LOOP_H_
