// PackFlat / UnpackFlat on the GPU against the CPU, bit for bit: aligned and
// unaligned pieces, gaps left untouched, thousands of pieces in one launch.
// Skips without a device.
#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/kernels/flat_buffer.h"
#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::kExact;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;

TEST(CudaFlatBuffer, PackAndUnpackMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  // The caching allocator, as the sharding runtime uses: 10000 plain
  // cudaMalloc / cudaFree pairs took 50 s on an H200.
  CudaBacking backing(0);
  CachingAllocator cache(&backing, CachingAllocatorOptions{.name = "flat-buffer-test"});
  CachingStreamAllocator gpu(&cache, /*stream=*/nullptr);
  const bool shrink = testing::ShrinkGpuTests();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int pieces_count : {1, 7, shrink ? 500 : 5000}) {
      std::vector<Tensor> pieces, pieces_d, back_d;
      std::vector<int64_t> offsets;
      int64_t at = 1;  // element 1: every piece starts unaligned for 16-byte moves
      for (int i = 0; i < pieces_count; ++i) {
        const int64_t n = pieces_count == 1 ? (int64_t{1} << (shrink ? 18 : 24)) + 5 : 1 + (i * 7919) % 3001;
        pieces.push_back(RandomTensor({n}, dtype, -1, 1, i));
        pieces_d.push_back(OnGpu(pieces.back(), &gpu));
        back_d.push_back(Tensor::Zeros({n}, dtype, &gpu).value());
        offsets.push_back(at);
        at += n + (i % 4);  // gaps
      }
      ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Full({at + 3}, 7.0, dtype));
      const Tensor flat_d = OnGpu(flat, &gpu);
      ZS_ASSERT_OK(PackFlat(pieces, offsets, flat));
      ZS_ASSERT_OK(PackFlat(pieces_d, offsets, flat_d));
      const std::string what = std::string(DTypeName(dtype)) + " x" + std::to_string(pieces_count);
      ExpectClose(flat_d, flat, kExact, "PackFlat " + what);
      ZS_ASSERT_OK(UnpackFlat(flat_d, offsets, back_d));
      for (size_t i = 0; i < pieces.size(); i += 97) {
        ExpectClose(back_d[i], pieces[i], kExact, "UnpackFlat " + what);
      }
    }
  }
}

}  // namespace
}  // namespace zeroshard
