// CPU-only build: the launchers of kernels/cuda/embedding_launch.h exist so that the
// op entries link, and report "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/embedding_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchEmbeddingForward(int, int, const void*, int64_t, int, const void*, int64_t, void*, int64_t,
                           int64_t, int64_t, void*) {
  return kNotBuilt;
}
int LaunchCheckIds(int, const void*, int64_t, int64_t, bool, int64_t, int64_t, int64_t*, int64_t*,
                   void*) {
  return kNotBuilt;
}
int64_t EmbeddingSortKeys(int64_t n) {
  int64_t padded = kEmbeddingSortTile;
  while (padded < n) padded *= 2;
  return padded;
}
int LaunchEmbeddingBackward(int, int, const void*, int64_t, int, const void*, int64_t, int64_t,
                            uint64_t*, void*, int64_t, int64_t, void*) {
  return kNotBuilt;
}

}  // namespace zeroshard::cuda
