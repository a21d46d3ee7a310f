// The CUDA dropout kernel draws the CPU's Philox stream: same mask, same
// values, bit for bit, for any length and any (also unaligned) stream offset.
// Skips without a device.
#include <gtest/gtest.h>

#include "zeroshard/kernels/dropout.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::kExact;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;

TEST(CudaDropout, SameMaskAndValuesAsCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {1, 3, 5, 4097, 1 << 20, (1 << 22) + 3}) {
      for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 33}) {
        for (double p : {0.0, 0.1, 0.5, 1.0}) {
          const std::string what = std::string("Dropout ") + std::string(DTypeName(dtype)) + " n=" +
                                   std::to_string(n) + " offset=" + std::to_string(offset) +
                                   " p=" + std::to_string(p);
          const PhiloxStream stream{.seed = 0x1234567887654321ull, .offset = offset};
          const Tensor x = RandomTensor({n}, dtype, -2, 2, n);
          ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Dropout(x, p, stream));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Dropout(OnGpu(x, &gpu), p, stream));
          ExpectClose(yd, y, kExact, what);
          if (n > 5000 || p != 0.5) continue;
          // The mask, and the backward in place.
          ZS_ASSERT_OK_AND_ASSIGN(Tensor mask, Tensor::Empty({n}, dtype));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor maskd, Tensor::Empty({n}, dtype, &gpu));
          ZS_ASSERT_OK(DropoutMask(p, stream, mask));
          ZS_ASSERT_OK(DropoutMask(p, stream, maskd));
          ExpectClose(maskd, mask, kExact, what + " mask");
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({n}, dtype));
          ZS_ASSERT_OK(DropoutBackward(x, p, stream, dx));
          const Tensor dxd = OnGpu(x, &gpu);
          ZS_ASSERT_OK(DropoutBackward(dxd, p, stream, dxd));
          ExpectClose(dxd, dx, kExact, what + " backward in place");
        }
      }
    }
  }
}

}  // namespace
}  // namespace zeroshard
