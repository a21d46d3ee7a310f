// The CUDA embedding kernels against the CPU twin, bit for bit: the gather is a
// copy, and the backward adds each id's rows in position order as the CPU does.
// Skips without a device.
#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/kernels/embedding.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::kExact;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;

std::vector<int64_t> Ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  uint64_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    // Skewed: a few ids very frequent, as tokens are.
    const int64_t r = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(vocab));
    ids[i] = (i % 3 == 0) ? r % 7 : r;
  }
  return ids;
}

TEST(CudaEmbedding, ForwardAndBackwardMatchCpuBitwise) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  struct Case {
    int64_t b, t, vocab, c;
  };
  uint64_t seed = 1;
  for (const Case& k : {Case{1, 1, 1, 1}, Case{2, 3, 11, 5}, Case{4, 64, 1000, 129},
                        Case{8, 1024, 50257, 768}}) {
    for (DType dtype : kFloatDTypes) {
      for (DType id_dtype : {DType::kI64, DType::kI32}) {
        const std::string what = std::string("Embedding ") + std::string(DTypeName(dtype)) + " ids " +
                                 std::string(DTypeName(id_dtype)) + " V=" + std::to_string(k.vocab) +
                                 " C=" + std::to_string(k.c);
        const Tensor w = RandomTensor({k.vocab, k.c}, dtype, -1, 1, ++seed);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, Tensor::FromVector(Ids(k.b * k.t, k.vocab, ++seed),
                                                               {k.b, k.t}, id_dtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Embedding(w, ids));
        const Tensor wd = OnGpu(w, &gpu), idsd = OnGpu(ids, &gpu);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor outd, Embedding(wd, idsd));
        ExpectClose(outd, out, kExact, what);

        const Tensor dout = RandomTensor({k.b, k.t, k.c}, dtype, -1, 1, ++seed);
        for (GradMode mode : {GradMode::kAccumulate, GradMode::kOverwrite}) {
          ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, w.Clone());
          const Tensor dwd = OnGpu(w, &gpu);
          ZS_ASSERT_OK(EmbeddingBackward(dout, ids, dw, mode));
          ZS_ASSERT_OK(EmbeddingBackward(OnGpu(dout, &gpu), idsd, dwd, mode));
          ExpectClose(dwd, dw, kExact, what + " backward");
        }
      }
    }
  }
}

TEST(CudaEmbedding, OutOfRangeIdIsRefused) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const Tensor w = OnGpu(RandomTensor({4, 3}, DType::kF32, -1, 1, 1), &gpu);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, Tensor::FromVector(std::vector<int64_t>{0, 4}, {2}));
  EXPECT_EQ(Embedding(w, OnGpu(ids, &gpu)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
