// Host launchers of the CUDA whole-buffer reductions (kernels/cuda/reduce.cu):
// the sum, or the sum of squares, of n contiguous float elements, as one double
// written to device memory (`out`), enqueued on `stream`.
//
//   std::vector<...> partials: SumAllPartials(n) floats of device scratch;
//   LaunchSumAll(dtype, x, n, /*square=*/true, partials, out, stream);
//
// Two deterministic passes: SumAllPartials(n) blocks each reduce a fixed,
// contiguous slice in fp32 (per-thread sums, warp shuffles, then across warps),
// and one block adds the partials in double, in block order. The launch shape
// depends on n only, so the bits depend on the data and n, never on timing.
// Returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_REDUCE_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_REDUCE_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// Elements per block of the first pass, and the number of its blocks for n.
inline constexpr int64_t kSumAllSlice = int64_t{1} << 16;
inline int64_t SumAllPartials(int64_t n) {
  const int64_t b = (n + kSumAllSlice - 1) / kSumAllSlice;
  return b < 1 ? 1 : b;
}

// dtype: a float dtype code (static_cast<int>(DType)). `partials` holds
// SumAllPartials(n) floats of device memory; `out` one double of device memory.
int LaunchSumAll(int dtype, const void* x, int64_t n, bool square, float* partials, double* out,
                 void* stream);

// Reduction along one axis of a contiguous x viewed as [outer, r, inner] into a
// contiguous out [outer, inner]: kind 0 sum, 1 mean, 2 max (NaN propagates), as
// static_cast<int>(ReduceKind). fp32 accumulation in a fixed order: a block per
// row with shuffles when inner == 1, else a block per 32 adjacent columns whose
// up to 32 thread rows each add every blockDim.y-th row, then the thread rows'
// results in order.
int LaunchReduceAxis(int kind, int x_dtype, int out_dtype, const void* x, void* out, int64_t outer,
                     int64_t r, int64_t inner, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_REDUCE_LAUNCH_H_
