// Deterministic parameter gradients of the row kernels (LayerNorm's dweight
// and dbias, RMSNorm's dweight): the rows are cut into fixed blocks, each block
// sums its rows into its own partial [cols] in row order, and the partials are
// combined in block order. The blocks are a function of the row count only, so
// the bits never depend on the thread count.
//
//   const int64_t per_block = ParamGradRowsPerBlock(rows);
//   const int64_t blocks = (rows + per_block - 1) / per_block;
//   std::vector<float> partial(blocks * cols);     // block k's partial at k * cols
//   ... #pragma omp parallel for over k: fill block k's rows ...
//   StoreParamGradSum(partial.data(), blocks, cols, 0, cols, dweight, accumulate);
#ifndef ZEROSHARD_KERNELS_CPU_ROW_BLOCKS_H_
#define ZEROSHARD_KERNELS_CPU_ROW_BLOCKS_H_

#include <algorithm>
#include <cstdint>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

// Rows per block of the partial sums: at least 32, at most 256 blocks.
inline int64_t ParamGradRowsPerBlock(int64_t rows) {
  constexpr int64_t kMinRows = 32, kMaxBlocks = 256;
  return std::max(kMinRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
}

// Writes (or adds, `accumulate`) the sum over blocks k of
// partial[k * stride + offset + c], in block order, into the 1-D float tensor
// `grad` [cols] (any dtype and stride); nothing when `grad` is undefined.
inline void StoreParamGradSum(const float* partial, int64_t blocks, int64_t stride, int64_t offset,
                              int64_t cols, const Tensor& grad, bool accumulate) {
  if (!grad.defined()) return;
  constexpr int64_t kChunk = 512;
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  DispatchFloatDType(grad.dtype(), [&]<typename G>() {
    G* const g = static_cast<G*>(grad.raw_data());
    const int64_t gs = grad.stride(0);
#pragma omp parallel for schedule(static) if (blocks * cols >= kRowParallelWork && chunks > 1)
    for (int64_t t = 0; t < chunks; ++t) {
      const int64_t c0 = t * kChunk;
      const int64_t len = std::min(kChunk, cols - c0);
      float acc[kChunk];
      RunWithIsa([&] {
        for (int64_t c = 0; c < len; ++c) acc[c] = 0.0f;
        for (int64_t k = 0; k < blocks; ++k) {
          const float* p = partial + k * stride + offset + c0;
          for (int64_t c = 0; c < len; ++c) acc[c] += p[c];
        }
      });
      for (int64_t c = 0; c < len; ++c) {
        G* dst = g + (c0 + c) * gs;
        *dst = ConvertElement<G>(accumulate ? ConvertElement<float>(*dst) + acc[c] : acc[c]);
      }
    }
  });
}

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_ROW_BLOCKS_H_
