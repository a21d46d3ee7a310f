// Dropout from the shared Philox stream: thread j handles stream block
// (offset / 4) + j, i.e. the four elements whose words that block holds.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/dropout_launch.h"
#include "zeroshard/kernels/math/dropout_math.h"
#include "zeroshard/kernels/math/philox.h"

namespace zeroshard::cuda {

namespace {

template <typename T, bool kMaskOnly>
__global__ void DropoutKernel(const T* x, T* out, int64_t n, uint64_t seed, uint64_t offset,
                              DropoutParams dp, int64_t blocks) {
  const uint64_t block0 = offset >> 2;
  const int64_t lead = static_cast<int64_t>(offset & 3u);  // words of block0 before element 0
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks;
       j += stride) {
    const uint64_t block = block0 + static_cast<uint64_t>(j);
    uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
    uint32_t c2 = 0, c3 = 0;
    Philox4x32x10(c0, c1, c2, c3, k0, k1);
    const uint32_t words[4] = {c0, c1, c2, c3};
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * j + lane - lead;  // element whose word this is
      if (i < 0 || i >= n) continue;
      if (kMaskOnly) {
        out[i] = FromFloat<T>(DropoutKeep(words[lane], dp) ? 1.0f : 0.0f);
      } else {
        out[i] = FromFloat<T>(DropoutApply(ToFloat(x[i]), words[lane], dp));
      }
    }
  }
}

}  // namespace

int LaunchDropout(int dtype, const void* x, void* out, int64_t n, uint64_t seed, uint64_t offset,
                  float keep_prob, float scale, bool mask_only, void* stream) {
  if (n == 0) return 0;
  const int64_t blocks = (static_cast<int64_t>(offset & 3u) + n + 3) / 4;
  constexpr int kThreads = 256;
  const DropoutParams dp{keep_prob, scale};
  return DispatchFloat(dtype, [&]<typename T>() {
    const T* xp = static_cast<const T*>(x);
    T* op = static_cast<T*>(out);
    if (mask_only) {
      Launch(DropoutKernel<T, true>, GridFor(blocks, kThreads), kThreads, 0, AsStream(stream), xp,
             op, n, seed, offset, dp, blocks);
    } else {
      Launch(DropoutKernel<T, false>, GridFor(blocks, kThreads), kThreads, 0, AsStream(stream), xp,
             op, n, seed, offset, dp, blocks);
    }
    return Launched();
  });
}

}  // namespace zeroshard::cuda
