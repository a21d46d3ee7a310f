// PackFlat / UnpackFlat on the CPU: round trips, gaps left alone, every
// argument error. The CUDA twin is checked against this in cuda_kernels_test.
#include "zeroshard/kernels/flat_buffer.h"

#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

TEST(FlatBuffer, PackThenUnpackRoundTripsAndLeavesGaps) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    const Tensor w = RandomTensor({5, 7}, dtype, -3, 3, 1);
    const Tensor b = RandomTensor({7}, dtype, -3, 3, 2);
    const Tensor s = RandomTensor({}, dtype, -3, 3, 3);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Full({64}, 9.0, dtype));
    const std::vector<int64_t> offsets = {0, 40, 50};  // gaps [35, 40), [47, 50), [51, 64)
    ZS_ASSERT_OK(PackFlat({w, b, s}, offsets, flat));
    const std::vector<double> f = ToDoubles(flat);
    const std::vector<double> wv = ToDoubles(w), bv = ToDoubles(b), sv = ToDoubles(s);
    for (int i = 0; i < 35; ++i) EXPECT_EQ(f[i], wv[i]);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(f[40 + i], bv[i]);
    EXPECT_EQ(f[50], sv[0]);
    for (int i : {35, 39, 47, 49, 51, 63}) EXPECT_EQ(f[i], 9.0) << i;

    ZS_ASSERT_OK_AND_ASSIGN(Tensor w2, Tensor::Zeros({5, 7}, dtype));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor b2, Tensor::Zeros({7}, dtype));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor s2, Tensor::Zeros({}, dtype));
    ZS_ASSERT_OK(UnpackFlat(flat, offsets, {w2, b2, s2}));
    EXPECT_EQ(ToDoubles(w2), wv);
    EXPECT_EQ(ToDoubles(b2), bv);
    EXPECT_EQ(ToDoubles(s2), sv);
  }
}

TEST(FlatBuffer, ManyPiecesInParallel) {
  std::vector<Tensor> pieces, back;
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (int i = 0; i < 300; ++i) {
    const int64_t n = 1 + (i * 7919) % 10000;
    pieces.push_back(RandomTensor({n}, DType::kF32, -1, 1, i));
    back.push_back(Tensor::Zeros({n}, DType::kF32).value());
    offsets.push_back(at);
    at += n + 3;  // padding between pieces
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Zeros({at}, DType::kF32));
  ZS_ASSERT_OK(PackFlat(pieces, offsets, flat));
  ZS_ASSERT_OK(UnpackFlat(flat, offsets, back));
  for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(ToDoubles(back[i]), ToDoubles(pieces[i]));
}

TEST(FlatBuffer, Errors) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Zeros({10}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Zeros({4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::Zeros({4}, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor m, Tensor::Zeros({3, 4}, DType::kF32));
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(PackFlat({a, a}, {0, 2}, flat),
              StatusIs(kInvalid, HasSubstr("pieces 0 [0, 4) and 1 [2, 6) overlap in flat")));
  EXPECT_THAT(PackFlat({a}, {7}, flat),
              StatusIs(kInvalid, HasSubstr("piece 0 of 4 elements at offset 7 does not fit in "
                                           "flat of 10 elements")));
  EXPECT_THAT(PackFlat({a}, {-1}, flat), StatusIs(kInvalid, HasSubstr("does not fit")));
  EXPECT_THAT(PackFlat({h}, {0}, flat),
              StatusIs(kInvalid, HasSubstr("piece 0 is bf16 on cpu, expected f32 on cpu")));
  EXPECT_THAT(PackFlat({m.Transpose(0, 1).value()}, {0}, flat),
              StatusIs(kInvalid, HasSubstr("must be contiguous")));
  EXPECT_THAT(PackFlat({a}, {0, 4}, flat), StatusIs(kInvalid, HasSubstr("1 pieces but 2 offsets")));
  EXPECT_THAT(UnpackFlat(m, {0}, {a}), StatusIs(kInvalid, HasSubstr("contiguous 1-D tensor")));
  EXPECT_THAT(UnpackFlat(flat, {0}, {flat.Narrow(0, 4, 4).value()}),
              StatusIs(kInvalid, HasSubstr("piece 0 shares memory with flat")));
  ZS_EXPECT_OK(PackFlat({}, {}, flat));
}

}  // namespace
}  // namespace zeroshard
