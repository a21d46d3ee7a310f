#include "zeroshard/kernels/cpu/embedding.h"

#include <algorithm>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/rows.h"

namespace zeroshard::cpu {

namespace {

template <typename TW, typename TOut>
void Gather(const Tensor& weight, const int64_t* ids, const Tensor& out) {
  const RowLayout lo = RowLayout::Of(out);
  const TW* const w = static_cast<const TW*>(weight.raw_data());
  TOut* const o = static_cast<TOut*>(out.raw_data());
  const int64_t ws = weight.stride(0);
  const int64_t rows = lo.rows, cols = lo.cols;
#pragma omp parallel for schedule(static) if (rows * cols >= kRowParallelWork && rows > 1)
  for (int64_t p = 0; p < rows; ++p) {
    const TW* src = w + ids[p] * ws;
    TOut* dst = o + lo.Offset(p);
    RunWithIsa([&] {
      for (int64_t c = 0; c < cols; ++c) dst[c] = ConvertElement<TOut>(ConvertElement<float>(src[c]));
    });
  }
}

// The positions 0..n-1 grouped by id, in position order within each id.
struct IdGroups {
  std::vector<int64_t> order;  // positions, sorted by (id, position)
  std::vector<int64_t> id;     // one entry per distinct id, ascending
  std::vector<int64_t> start;  // group g is order[start[g] .. start[g + 1])
};

IdGroups GroupById(const int64_t* ids, int64_t n, int64_t vocab) {
  IdGroups g;
  std::vector<int64_t> count(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t p = 0; p < n; ++p) ++count[ids[p] + 1];
  for (int64_t v = 0; v < vocab; ++v) {
    if (count[v + 1] > 0) g.id.push_back(v);
    count[v + 1] += count[v];  // count[v] is now where id v's positions start
  }
  g.order.resize(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) g.order[count[ids[p]]++] = p;
  // After the fill, count[v] is where id v's positions end; rebuild the starts.
  g.start.reserve(g.id.size() + 1);
  int64_t pos = 0;
  for (int64_t v : g.id) {
    g.start.push_back(pos);
    pos = count[v];
  }
  g.start.push_back(n);
  return g;
}

template <typename TD, typename TW>
void ScatterAdd(const Tensor& dout, const IdGroups& g, const Tensor& dweight) {
  const RowLayout ld = RowLayout::Of(dout);
  const TD* const d = static_cast<const TD*>(dout.raw_data());
  TW* const w = static_cast<TW*>(dweight.raw_data());
  const int64_t ws = dweight.stride(0);
  const int64_t cols = ld.cols;
  constexpr int64_t kChunk = 512;
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  const int64_t groups = static_cast<int64_t>(g.id.size());
  const int64_t tasks = groups * chunks;
  // Tasks write disjoint pieces of dweight and each sums in position order:
  // the schedule (dynamic, for ids of very different frequencies) cannot
  // change the result.
#pragma omp parallel for schedule(dynamic, 8) if (ld.rows * cols >= kRowParallelWork && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t k = t / chunks;
    const int64_t c0 = (t % chunks) * kChunk;
    const int64_t len = std::min(kChunk, cols - c0);
    float acc[kChunk];
    TW* dst = w + g.id[k] * ws + c0;
    RunWithIsa([&] {
      for (int64_t c = 0; c < len; ++c) acc[c] = 0.0f;
      for (int64_t i = g.start[k]; i < g.start[k + 1]; ++i) {
        const TD* src = d + ld.Offset(g.order[i]) + c0;
        for (int64_t c = 0; c < len; ++c) acc[c] += ConvertElement<float>(src[c]);
      }
      for (int64_t c = 0; c < len; ++c) dst[c] = ConvertElement<TW>(ConvertElement<float>(dst[c]) + acc[c]);
    });
  }
}

}  // namespace

void Embedding(const Tensor& weight, const int64_t* ids, const Tensor& out) {
  DispatchFloatDType(weight.dtype(), [&]<typename TW>() {
    DispatchFloatDType(out.dtype(), [&]<typename TOut>() { Gather<TW, TOut>(weight, ids, out); });
  });
}

void EmbeddingBackward(const Tensor& dout, const int64_t* ids, const Tensor& dweight) {
  const RowLayout ld = RowLayout::Of(dout);
  if (ld.rows == 0 || ld.cols == 0) return;
  const IdGroups g = GroupById(ids, ld.rows, dweight.size(0));
  DispatchFloatDType(dout.dtype(), [&]<typename TD>() {
    DispatchFloatDType(dweight.dtype(), [&]<typename TW>() { ScatterAdd<TD, TW>(dout, g, dweight); });
  });
}

}  // namespace zeroshard::cpu
