#include "zeroshard/runtime/tensor.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

Tensor Arange(absl::Span<const int64_t> shape, DType dtype = DType::kF32) {
  return Tensor::FromVector(Iota(NumElements(shape)), shape, dtype).value();
}

std::vector<float> Values(const Tensor& t) { return t.ToVector<float>().value(); }

TEST(Tensor, FactoriesAndProperties) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Full({2, 3}, 1.5, DType::kBF16));
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 12u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_THAT(t.strides(), ElementsAre(3, 1));
  EXPECT_THAT(Values(t), ElementsAre(1.5, 1.5, 1.5, 1.5, 1.5, 1.5));
  EXPECT_FALSE(Tensor().defined());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor scalar, Tensor::Full({}, 7, DType::kI64));
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.Item().value(), 7.0);
}

TEST(Tensor, FromVectorChecksTheCount) {
  EXPECT_THAT(Tensor::FromVector(std::vector<float>{1, 2, 3}, {2, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape [2, 2] holds 4 elements, got 3 values")));
  EXPECT_THAT(Tensor::Empty({2, -1}, DType::kF32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative size")));
}

TEST(Tensor, ViewAndReshape) {
  Tensor t = Arange({2, 3, 4});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor v, t.View({6, -1}));
  EXPECT_THAT(v.shape(), ElementsAre(6, 4));
  EXPECT_EQ(v.storage(), t.storage());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tt, t.Transpose(1, 2));  // [2, 4, 3], not contiguous
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_THAT(tt.View({8, 3}), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("cannot be viewed as [8, 3] without a copy")));
  // Splitting the leading dimension of a transposed view is still a view.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor split, tt.View({2, 2, 2, 3}));
  EXPECT_EQ(split.storage(), t.storage());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor r, tt.Reshape({8, 3}));  // copies
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_THAT(Values(r), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 20, 13, 17,
                                     21, 14, 18, 22, 15, 19, 23));
  EXPECT_THAT(t.View({5, -1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("cannot infer -1")));
  EXPECT_THAT(t.View({-1, -1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("more than one -1")));
  EXPECT_THAT(t.View({5, 5}), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("holds 25 elements but the tensor of shape "
                                                 "[2, 3, 4] has 24")));
}

TEST(Tensor, NarrowSliceSelect) {
  Tensor t = Arange({4, 5});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor n, t.Narrow(1, 1, 3));
  EXPECT_THAT(Values(n), ElementsAre(1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, t.Slice(0, 1, 4, 2));
  EXPECT_THAT(Values(s), ElementsAre(5, 6, 7, 8, 9, 15, 16, 17, 18, 19));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor c, t.Select(1, -1));
  EXPECT_THAT(c.shape(), ElementsAre(4));
  EXPECT_THAT(Values(c), ElementsAre(4, 9, 14, 19));
  EXPECT_THAT(t.Narrow(0, 2, 5), StatusIs(absl::StatusCode::kOutOfRange,
                                          HasSubstr("[2, 7) is outside dimension 0 of size 4")));
  EXPECT_THAT(t.Narrow(2, 0, 1), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("dimension 2 is out of range for a 2-d")));
  EXPECT_THAT(t.Slice(0, 0, 2, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("step 0")));
  EXPECT_THAT(t.Select(0, 4), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("index 4")));
}

TEST(Tensor, TransposePermuteExpandSqueeze) {
  Tensor t = Arange({2, 3});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor p, t.Permute({1, 0}));
  EXPECT_THAT(Values(p), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(t.Permute({0, 0}), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("not a permutation")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor row, t.Narrow(0, 1, 1));  // [1, 3]
  ZS_ASSERT_OK_AND_ASSIGN(Tensor e, row.Expand({2, 4, 3}));
  EXPECT_THAT(e.strides(), ElementsAre(0, 0, 1));
  EXPECT_TRUE(e.has_internal_overlap());
  EXPECT_THAT(Values(e), ElementsAreArray(std::vector<float>{3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5,
                                                             3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5}));
  EXPECT_THAT(t.Expand({4, 3}), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("dimension 0 has size 2, expected 4 or 1")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor u, t.Unsqueeze(-1));
  EXPECT_THAT(u.shape(), ElementsAre(2, 3, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sq, u.Squeeze(2));
  EXPECT_THAT(sq.shape(), ElementsAre(2, 3));
  EXPECT_THAT(t.Squeeze(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("has size 2, expected 1")));
}

TEST(Tensor, CopyFromBroadcastsConvertsAndWritesThroughViews) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dst, Tensor::Zeros({3, 4}, DType::kF16));
  Tensor src = Arange({4}, DType::kI32);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor col, dst.Narrow(1, 1, 2));
  ZS_ASSERT_OK(col.CopyFrom(Arange({3, 1}, DType::kF32)));  // broadcast along columns
  EXPECT_THAT(Values(dst), ElementsAre(0, 0, 0, 0, 0, 1, 1, 0, 0, 2, 2, 0));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor row, dst.Select(0, 2));
  ZS_ASSERT_OK(row.CopyFrom(src));
  EXPECT_THAT(Values(dst), ElementsAre(0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 2, 3));
  EXPECT_THAT(dst.CopyFrom(Arange({2, 4})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot broadcast the source of shape [2, 4] to the "
                                 "destination of shape [3, 4]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor broadcast, src.Expand({3, 4}));
  EXPECT_THAT(broadcast.CopyFrom(src), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("broadcast (stride 0) dimension")));
}

TEST(Tensor, CopyFromOverlappingViewOfItself) {
  Tensor t = Arange({6});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor head, t.Narrow(0, 0, 5));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tail, t.Narrow(0, 1, 5));
  ZS_ASSERT_OK(tail.CopyFrom(head));  // memmove semantics
  EXPECT_THAT(Values(t), ElementsAre(0, 0, 1, 2, 3, 4));
}

TEST(Tensor, NonContiguousCopiesAndClone) {
  // A strided 3-d copy across dtypes matches an index-by-index reference.
  Tensor t = Arange({3, 5, 7}, DType::kF32);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor p, t.Permute({2, 0, 1}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, p.Slice(0, 1, 7, 3));  // [2, 3, 5]
  ZS_ASSERT_OK_AND_ASSIGN(Tensor c, s.To(DType::kBF16));
  EXPECT_TRUE(c.is_contiguous());
  std::vector<float> got = Values(c);
  int64_t k = 0;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 5; ++b) {
        const float expected = static_cast<float>(a * 35 + b * 7 + (1 + 3 * i));
        EXPECT_EQ(got[k++], expected);
      }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor cl, s.Clone());
  EXPECT_NE(cl.storage(), t.storage());
  EXPECT_EQ(Values(cl), Values(s));
}

TEST(Tensor, LargeStridedCopyUsesThreadsAndMatches) {
  Tensor t = Arange({256, 300});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tt, t.Transpose(0, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor c, tt.Contiguous());
  std::vector<float> v = Values(c);
  for (int64_t i = 0; i < 300; i += 7) {
    for (int64_t j = 0; j < 256; j += 5) ASSERT_EQ(v[i * 256 + j], j * 300 + i);
  }
}

TEST(Tensor, FillWritesOnlyTheView) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Zeros({3, 3}, DType::kI32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor diag_like, t.Slice(1, 0, 3, 2));
  ZS_ASSERT_OK(diag_like.Fill(-4.7));  // truncates toward zero
  EXPECT_THAT(t.ToVector<int32_t>().value(), ElementsAre(-4, 0, -4, -4, 0, -4, -4, 0, -4));
}

TEST(Tensor, FromStorageChecksBounds) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Zeros({10}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor v, Tensor::FromStorage(t.storage(), {2, 3}, {4, 1}, 2, DType::kF32));
  EXPECT_EQ(v.numel(), 6);
  EXPECT_THAT(Tensor::FromStorage(t.storage(), {3, 3}, {4, 1}, 2, DType::kF32),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("reaches element 12 but the "
                                                                "storage holds 10 elements")));
}

TEST(Tensor, WrapBorrowsMemory) {
  std::vector<int64_t> mem = {1, 2, 3, 4};
  Tensor w = Tensor::Wrap(mem.data(), {2, 2}, DType::kI64);
  EXPECT_EQ(w.allocator(), nullptr);
  ZS_ASSERT_OK(w.Fill(9));
  EXPECT_THAT(mem, ElementsAre(9, 9, 9, 9));
}

TEST(Tensor, Printing) {
  Tensor t = Arange({2, 3});
  EXPECT_EQ(t.ToString(),
            "tensor([[0.0000, 1.0000, 2.0000],\n"
            "        [3.0000, 4.0000, 5.0000]], shape=[2, 3], dtype=f32, device=cpu)");
  EXPECT_EQ(Arange({10}, DType::kI64).ToString(2),
            "tensor([0, 1, ..., 8, 9], shape=[10], dtype=i64, device=cpu)");
  EXPECT_EQ(t.Transpose(0, 1).value().DebugString(),
            "Tensor(shape=[3, 2], strides=[1, 3], offset=0, dtype=f32, device=cpu)");
  EXPECT_EQ(Tensor().ToString(), "tensor(undefined)");
}

TEST(Tensor, ShapeHelpers) {
  EXPECT_THAT(BroadcastShapes({3, 1, 5}, {4, 1}).value(), ElementsAre(3, 4, 5));
  EXPECT_THAT(BroadcastShapes({3, 2}, {4, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not broadcast")));
  EXPECT_THAT(ContiguousStrides({2, 3, 4}), ElementsAre(12, 4, 1));
}

TEST(Tensor, ArgumentChecks) {
  Tensor t = Arange({2, 2});
  ZS_EXPECT_OK(CheckDType(t, DType::kF32, "x"));
  EXPECT_THAT(CheckDType(t, DType::kBF16, "LayerNorm weight"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LayerNorm weight: expected dtype bf16, got f32")));
  EXPECT_THAT(CheckShape(t, {4}, "bias"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bias: expected shape [4], got [2, 2]")));
}

}  // namespace
}  // namespace zeroshard
