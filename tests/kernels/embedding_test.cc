// Embedding lookup and its scatter-add backward against double-precision
// references on odd shapes, every dtype pair, i32 and i64 ids, repeated ids,
// strided views, accumulate vs overwrite; the reference gradient against
// central differences; bitwise independence of thread count and instruction
// set; every error.
//
// Tolerances (|got - want| <= atol + rtol |want|, want from the stored inputs):
//   forward    exact up to the rounding into out's dtype (rtol RoundingRtol(out))
//   backward   atol 1e-6 * (count of the id + 1), rtol 1e-6 + RoundingRtol(dweight)
#include "zeroshard/kernels/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/tests/kernels/bitwise_testing.h"
#include "zeroshard/tests/kernels/grad_check.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::Dot;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ExpectSameBitsOnEveryThreadCountAndIsa;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::NumericGradient;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

// ---------------------------------------------------------------- references

std::vector<double> RefForward(const std::vector<double>& w, const std::vector<int64_t>& ids, int64_t cols) {
  std::vector<double> out(ids.size() * cols);
  for (size_t p = 0; p < ids.size(); ++p) {
    for (int64_t c = 0; c < cols; ++c) out[p * cols + c] = w[ids[p] * cols + c];
  }
  return out;
}

// dweight = init + the scatter-add of dout's rows.
std::vector<double> RefBackward(const std::vector<double>& dout, const std::vector<int64_t>& ids,
                                std::vector<double> init, int64_t cols) {
  for (size_t p = 0; p < ids.size(); ++p) {
    for (int64_t c = 0; c < cols; ++c) init[ids[p] * cols + c] += dout[p * cols + c];
  }
  return init;
}

std::vector<int64_t> MakeIds(int64_t n, int64_t vocab, uint64_t seed) {
  const std::vector<float> u = RandomValues(n, 0, 1, seed);
  std::vector<int64_t> ids(n);
  for (int64_t p = 0; p < n; ++p) ids[p] = std::min<int64_t>(vocab - 1, static_cast<int64_t>(u[p] * vocab));
  return ids;
}

Tensor IdTensor(const std::vector<int64_t>& ids, absl::Span<const int64_t> shape, DType dtype) {
  return Tensor::FromVector(ids, shape, dtype).value();
}

struct Case {
  Shape ids;
  int64_t vocab, cols;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{1}, 1, 1}, {{7}, 7, 33}, {{3, 11}, 33, 7}, {{257}, 7, 257}, {{2, 3, 5}, 257, 1}, {{33}, 1, 7}, {{0}, 5, 3},
  };
  return cases;
}

// The largest number of positions sharing one id (bounds the backward's error).
int64_t MaxCount(const std::vector<int64_t>& ids, int64_t vocab) {
  std::vector<int64_t> n(vocab, 0);
  int64_t m = 0;
  for (int64_t id : ids) m = std::max(m, ++n[id]);
  return m;
}

// ---------------------------------------------------------------- forward

TEST(Embedding, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    const int64_t n = NumElements(c.ids);
    Shape out_shape = c.ids;
    out_shape.push_back(c.cols);
    for (DType wdtype : kFloatDTypes) {
      for (DType out_dtype : kFloatDTypes) {
        for (DType idtype : {DType::kI32, DType::kI64}) {
          Tensor w = RandomTensor({c.vocab, c.cols}, wdtype, -2, 2, seed++);
          const std::vector<int64_t> ids = MakeIds(n, c.vocab, seed++);
          ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty(out_shape, out_dtype));
          ZS_ASSERT_OK(Embedding(w, IdTensor(ids, c.ids, idtype), out));
          ExpectClose(out, RefForward(ToDoubles(w), ids, c.cols), 0, RoundingRtol(out_dtype),
                      absl::StrCat("ids ", ShapeToString(c.ids), " V ", c.vocab, " C ", c.cols, " ",
                                   DTypeName(wdtype), " -> ", DTypeName(out_dtype), " ", DTypeName(idtype)));
        }
      }
    }
  }
}

TEST(Embedding, ForwardStrided) {
  // A transposed table (last stride != 1: copied), strided ids, and out a
  // column slice of a bigger buffer.
  Tensor wt = RandomTensor({33, 7}, DType::kF32, -2, 2, 10);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor w, wt.Transpose(0, 1));  // [7, 33]
  const std::vector<int64_t> ids10 = MakeIds(10, 7, 11);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, IdTensor(ids10, {10}, DType::kI32).Slice(0, 1, 10, 2));  // [5]
  std::vector<int64_t> picked;
  for (int i = 1; i < 10; i += 2) picked.push_back(ids10[i]);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor big, Tensor::Full({5, 40}, 9.0, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, big.Narrow(1, 3, 33));
  ZS_ASSERT_OK(Embedding(w, ids, out));
  ExpectClose(out, RefForward(ToDoubles(w), picked, 33), 0, RoundingRtol(DType::kBF16), "strided");
  for (int64_t r = 0; r < 5; ++r) ASSERT_EQ(ToDoubles(big)[r * 40 + 39], 9.0);
  // Allocating form.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, Embedding(w, ids));
  EXPECT_EQ(a.shape(), (Shape{5, 33}));
  EXPECT_EQ(a.dtype(), DType::kF32);
  ExpectClose(a, RefForward(ToDoubles(w), picked, 33), 0, 0, "allocating");
}

// ---------------------------------------------------------------- backward

TEST(Embedding, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t vocab = 5, cols = 3;
  const std::vector<int64_t> ids = {4, 1, 4, 0, 4, 1, 2};  // repeats; id 3 unused
  const std::vector<double> w = ToDoubles(RandomTensor({vocab, cols}, DType::kF32, -1, 1, 20));
  const std::vector<double> dout = ToDoubles(RandomTensor({7, cols}, DType::kF32, -1, 1, 21));
  auto loss = [&](const std::vector<double>& v) { return Dot(dout, RefForward(v, ids, cols)); };
  ExpectClose(RefBackward(dout, ids, std::vector<double>(vocab * cols, 0.0), cols), NumericGradient(loss, w),
              1e-9, 1e-7, "reference gradient vs finite differences");
}

TEST(Embedding, BackwardMatchesReference) {
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    const int64_t n = NumElements(c.ids);
    Shape out_shape = c.ids;
    out_shape.push_back(c.cols);
    for (DType ddtype : kFloatDTypes) {
      for (DType wdtype : {ddtype, DType::kF32}) {
        for (GradMode mode : {GradMode::kAccumulate, GradMode::kOverwrite}) {
          Tensor dout = RandomTensor(out_shape, ddtype, -1, 1, seed++);
          const std::vector<int64_t> ids = MakeIds(n, c.vocab, seed++);
          Tensor dw = RandomTensor({c.vocab, c.cols}, wdtype, -1, 1, seed++);
          const std::vector<double> init =
              mode == GradMode::kAccumulate ? ToDoubles(dw) : std::vector<double>(c.vocab * c.cols, 0.0);
          ZS_ASSERT_OK(EmbeddingBackward(dout, IdTensor(ids, c.ids, seed % 2 ? DType::kI32 : DType::kI64), dw, mode));
          ExpectClose(dw, RefBackward(ToDoubles(dout), ids, init, c.cols), 1e-6 * (MaxCount(ids, c.vocab) + 1),
                      1e-6 + RoundingRtol(wdtype),
                      absl::StrCat("ids ", ShapeToString(c.ids), " V ", c.vocab, " C ", c.cols, " ",
                                   DTypeName(ddtype), " -> ", DTypeName(wdtype), " ", GradModeName(mode)));
        }
      }
    }
  }
}

TEST(Embedding, BackwardStridedAndWideRows) {
  // dout transposed (copied); dweight a [V, C] view into a flat gradient
  // buffer at an offset; C = 1100 spans three column blocks.
  const int64_t vocab = 9, cols = 1100, n = 33;
  Tensor dt = RandomTensor({cols, n}, DType::kBF16, -1, 1, 30);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dout, dt.Transpose(0, 1));  // [33, 1100]
  const std::vector<int64_t> ids = MakeIds(n, vocab, 31);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Full({vocab * cols + 10}, 0.5, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, flat.Narrow(0, 7, vocab * cols).value().View({vocab, cols}));
  ZS_ASSERT_OK(EmbeddingBackward(dout, IdTensor(ids, {n}, DType::kI64), dw, GradMode::kAccumulate));
  ExpectClose(dw, RefBackward(ToDoubles(dout), ids, std::vector<double>(vocab * cols, 0.5), cols),
              1e-6 * (MaxCount(ids, vocab) + 1), 1e-6, "into a flat buffer");
  const std::vector<double> fv = ToDoubles(flat);
  for (int64_t i : {0, 6, 9907, 9909}) ASSERT_EQ(fv[i], 0.5) << i;
  // A transposed dweight (last stride != 1) goes through a copy, accumulate and overwrite.
  for (GradMode mode : {GradMode::kAccumulate, GradMode::kOverwrite}) {
    Tensor dwt_base = RandomTensor({cols, vocab}, DType::kF16, -1, 1, 32);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dwt, dwt_base.Transpose(0, 1));  // [9, 1100]
    const std::vector<double> init =
        mode == GradMode::kAccumulate ? ToDoubles(dwt) : std::vector<double>(vocab * cols, 0.0);
    ZS_ASSERT_OK(EmbeddingBackward(dout, IdTensor(ids, {n}, DType::kI32), dwt, mode));
    ExpectClose(dwt, RefBackward(ToDoubles(dout), ids, init, cols), 1e-6 * (MaxCount(ids, vocab) + 1),
                1e-6 + RoundingRtol(DType::kF16), absl::StrCat("transposed dweight ", GradModeName(mode)));
  }
}

// ---------------------------------------------------------------- determinism

TEST(Embedding, BackwardBitwiseIndependentOfThreadsAndInstructionSet) {
  // Heavily repeated ids (4099 positions over 37 ids; id 5 at every 3rd
  // position) summed into an f32 table: any change of order would show.
  const int64_t vocab = 37, cols = 257, n = 4099;
  std::vector<int64_t> ids = MakeIds(n, vocab, 40);
  for (int64_t p = 0; p < n; p += 3) ids[p] = 5;
  Tensor dout = RandomTensor({n, cols}, DType::kF32, -1, 1, 41);
  const Tensor it = IdTensor(ids, {n}, DType::kI64);
  Tensor w = RandomTensor({vocab, cols}, DType::kF32, -1, 1, 42);
  auto run = [&]() {
    Tensor dw = RandomTensor({vocab, cols}, DType::kF32, -1, 1, 43);
    EXPECT_TRUE(EmbeddingBackward(dout, it, dw, GradMode::kAccumulate).ok());
    std::vector<double> all = ToDoubles(dw);
    Tensor out = Embedding(w, it).value();
    for (double v : ToDoubles(out)) all.push_back(v);
    return all;
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

// ---------------------------------------------------------------- errors

TEST(Embedding, Errors) {
  using absl::StatusCode::kInvalidArgument;
  Tensor w = RandomTensor({7, 4}, DType::kF32, -1, 1, 1);
  const Tensor ids = IdTensor({0, 1, 2, 3, 4, 5}, {2, 3}, DType::kI64);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({2, 3, 4}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dw, Tensor::Zeros({7, 4}, DType::kF32));
  EXPECT_THAT(Embedding(w, IdTensor({0, 1, 2, 3, 4, 7}, {2, 3}, DType::kI32), out),
              StatusIs(kInvalidArgument, HasSubstr("Embedding: ids[1, 2] = 7 is out of range [0, 7) (V, the rows "
                                                   "of the embedding table)")));
  EXPECT_THAT(EmbeddingBackward(out, IdTensor({0, -3, 2, 3, 4, 5}, {2, 3}, DType::kI64), dw, GradMode::kAccumulate),
              StatusIs(kInvalidArgument, HasSubstr("EmbeddingBackward: ids[0, 1] = -3 is out of range [0, 7)")));
  EXPECT_EQ(ToDoubles(dw), std::vector<double>(28, 0.0));  // nothing written
  EXPECT_THAT(Embedding(w, RandomTensor({2, 3}, DType::kF32, 0, 1, 2), out),
              StatusIs(kInvalidArgument, HasSubstr("Embedding: ids has dtype f32, expected i32 or i64")));
  EXPECT_THAT(Embedding(RandomTensor({28}, DType::kF32, 0, 1, 3), ids, out),
              StatusIs(kInvalidArgument, HasSubstr("weight has shape [28], expected [V, C]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor iw, Tensor::Zeros({7, 4}, DType::kI32));
  EXPECT_THAT(Embedding(iw, ids, out), StatusIs(kInvalidArgument, HasSubstr("weight has dtype i32")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out5, Tensor::Empty({2, 3, 5}, DType::kF32));
  EXPECT_THAT(Embedding(w, ids, out5),
              StatusIs(kInvalidArgument, HasSubstr("out has shape [2, 3, 5], expected [2, 3, 4] (the shape of ids "
                                                   "[2, 3], then C = 4)")));
  EXPECT_THAT(EmbeddingBackward(out5, ids, dw, GradMode::kOverwrite),
              StatusIs(kInvalidArgument, HasSubstr("dout has shape [2, 3, 5], expected [2, 3, 4]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat, Tensor::Zeros({30}, DType::kF32));
  EXPECT_THAT(Embedding(flat.Narrow(0, 0, 28).value().View({7, 4}).value(), ids,
                        flat.Narrow(0, 2, 24).value().View({2, 3, 4}).value()),
              StatusIs(kInvalidArgument, HasSubstr("the output out")));
  EXPECT_THAT(EmbeddingBackward(flat.Narrow(0, 2, 24).value().View({2, 3, 4}).value(), ids,
                                flat.Narrow(0, 0, 28).value().View({7, 4}).value(), GradMode::kAccumulate),
              StatusIs(kInvalidArgument, HasSubstr("the output dweight")));
  // CUDA tensors over host memory: without a device they fail cleanly
  // (tests/kernels/cuda_embedding_test.cc checks the CUDA kernel on a GPU).
  std::vector<float> h1(28), h2(24);
  std::vector<int64_t> h3(6);
  const Tensor gw = Tensor::Wrap(h1.data(), {7, 4}, DType::kF32, Device::Cuda(0));
  const Tensor go = Tensor::Wrap(h2.data(), {2, 3, 4}, DType::kF32, Device::Cuda(0));
  const Tensor gi = Tensor::Wrap(h3.data(), {2, 3}, DType::kI64, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) {
    EXPECT_FALSE(Embedding(gw, gi, go).ok());
    EXPECT_FALSE(EmbeddingBackward(go, gi, gw, GradMode::kAccumulate).ok());
  }
  EXPECT_THAT(Embedding(gw, ids, go), StatusIs(kInvalidArgument, HasSubstr("tensors on different devices")));
}

}  // namespace
}  // namespace zeroshard
