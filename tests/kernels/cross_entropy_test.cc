// Fused cross-entropy forward and backward against double-precision
// references on odd shapes, every logits dtype, i32 and i64 targets, ignored
// rows, vocabularies spanning many blocks, strided and in-place views; the
// reference gradient against central differences; bitwise independence of
// thread count and instruction set; every error.
//
// Tolerances (|got - want| <= atol + rtol |want|, want from the stored inputs):
//   lse, losses   atol 1e-5, rtol 1e-6 (+ RoundingRtol of the losses' dtype)
//   mean loss     1e-6 relative
//   dlogits       atol 1e-6 * max|dloss|, rtol 1e-5 + RoundingRtol(dlogits): the
//                 probabilities come from the saved fp32 lse, whose rounding
//                 (ulp < 1e-6 for |lse| < 16) shows in p - 1 at the target;
//                 plus 2^-24, the spacing of f16 subnormals (tiny gradients)
#include "zeroshard/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "zeroshard/tests/kernels/bitwise_testing.h"
#include "zeroshard/tests/kernels/grad_check.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::ExpectSameBitsOnEveryThreadCountAndIsa;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::NumericGradient;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

constexpr int64_t kIgnore = -100;
constexpr double kF16Subnormal = 5.9604644775390625e-08;  // 2^-24

// ---------------------------------------------------------------- references

struct RefOut {
  std::vector<double> lse, loss;
  int64_t valid = 0;
  double mean = 0;
};

RefOut RefForward(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t vocab,
                  int64_t ignore = kIgnore) {
  const size_t rows = t.size();
  RefOut o{std::vector<double>(rows), std::vector<double>(rows)};
  double sum = 0;
  for (size_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * vocab];
    double m = -INFINITY, s = 0;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, xr[v]);
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(xr[v] - m);
    o.lse[r] = m + std::log(s);
    if (t[r] != ignore) {
      o.loss[r] = o.lse[r] - xr[t[r]];
      sum += o.loss[r];
      ++o.valid;
    }
  }
  o.mean = sum / o.valid;
  return o;
}

std::vector<double> RefBackward(const std::vector<double>& x, const std::vector<int64_t>& t,
                                const std::vector<double>& dloss, int64_t vocab, int64_t ignore = kIgnore) {
  const RefOut f = RefForward(x, t, vocab, ignore);
  std::vector<double> d(x.size(), 0.0);
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore) continue;
    for (int64_t v = 0; v < vocab; ++v) {
      d[r * vocab + v] = (std::exp(x[r * vocab + v] - f.lse[r]) - (v == t[r] ? 1 : 0)) * dloss[r];
    }
  }
  return d;
}

// Targets in [0, vocab), every `ignore_every`-th one ignore_index (0: none).
std::vector<int64_t> MakeTargets(int64_t rows, int64_t vocab, uint64_t seed, int ignore_every,
                                 int64_t ignore = kIgnore) {
  const std::vector<float> u = RandomValues(rows, 0, 1, seed);
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) {
    t[r] = std::min<int64_t>(vocab - 1, static_cast<int64_t>(u[r] * vocab));
    if (ignore_every > 0 && r % ignore_every == ignore_every - 1) t[r] = ignore;
  }
  return t;
}

Tensor TargetTensor(const std::vector<int64_t>& t, absl::Span<const int64_t> shape, DType dtype) {
  return Tensor::FromVector(t, shape, dtype).value();
}

struct Case {
  Shape logits;  // [..., V]
  int ignore_every;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{1, 1}, 0}, {{1, 7}, 0}, {{7, 33}, 3}, {{33, 257}, 4}, {{257, 7}, 5}, {{3, 5, 257}, 2}, {{2, 1100}, 0},
  };
  return cases;
}

// ---------------------------------------------------------------- forward

TEST(CrossEntropy, ForwardMatchesDoubleReference) {
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    const int64_t vocab = c.logits.back();
    const Shape lead(c.logits.begin(), c.logits.end() - 1);
    const int64_t rows = NumElements(lead);
    for (DType dtype : kFloatDTypes) {
      for (DType tdtype : {DType::kI32, DType::kI64}) {
        Tensor logits = RandomTensor(c.logits, dtype, -8, 8, seed++);
        const std::vector<int64_t> t = MakeTargets(rows, vocab, seed++, c.ignore_every);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor losses, Tensor::Empty(lead, dtype));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor lse, Tensor::Empty({rows}, DType::kF32));
        ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyStats s,
                                CrossEntropyForward(logits, TargetTensor(t, lead, tdtype), losses, lse));
        const RefOut ref = RefForward(ToDoubles(logits), t, vocab);
        const std::string what = absl::StrCat(ShapeToString(c.logits), " ", DTypeName(dtype), " targets ",
                                              DTypeName(tdtype));
        ExpectClose(lse, ref.lse, 1e-5, 1e-6, "lse " + what);
        ExpectClose(losses, ref.loss, 1e-5, 1e-6 + RoundingRtol(dtype), "losses " + what);
        EXPECT_EQ(s.valid_rows, ref.valid) << what;
        EXPECT_NEAR(s.mean_loss, ref.mean, 1e-6 * std::fabs(ref.mean) + 1e-6) << what;
      }
    }
  }
}

TEST(CrossEntropy, RunningMaximumAcrossBlocksAndLargeLogits) {
  // V = 3001 spans six 512-wide blocks. Row 0: logits rising along the row
  // (the running maximum grows in every block); row 1: falling; row 2: the
  // maximum in the last, partial block; row 3: logits near 1e4 (exp would
  // overflow without the shift); row 4: one huge logit among small ones.
  const int64_t vocab = 3001;
  std::vector<float> v = RandomValues(5 * vocab, -1, 1, 9);
  for (int64_t i = 0; i < vocab; ++i) {
    v[0 * vocab + i] += 0.01f * i;
    v[1 * vocab + i] -= 0.01f * i;
    v[3 * vocab + i] += 1e4f;
  }
  v[2 * vocab + 2999] = 30;
  v[4 * vocab + 17] = 80;
  ZS_ASSERT_OK_AND_ASSIGN(Tensor logits, Tensor::FromVector(v, {5, vocab}));
  const std::vector<int64_t> t = {3000, 0, 2999, 1234, 18};
  ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult r, CrossEntropy(logits, TargetTensor(t, {5}, DType::kI64)));
  const RefOut ref = RefForward(ToDoubles(logits), t, vocab);
  ExpectClose(r.lse, ref.lse, 1e-5, 1e-6, "lse");
  // Row 3's loss is lse - x[t] with both near 1e4: the rounding of lse (ulp 1e-3)
  // limits it; the kernel's log(s) - (x[t] - max) keeps ~1e-6.
  ExpectClose(r.losses, ref.loss, 1e-5, 1e-6, "losses");
  // Backward of the rescaled rows against the reference (dloss 1).
  ZS_ASSERT_OK_AND_ASSIGN(Tensor d, Tensor::Empty({5, vocab}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor one, Tensor::Full({}, 1.0, DType::kF32));
  ZS_ASSERT_OK(CrossEntropyBackward(logits, TargetTensor(t, {5}, DType::kI64), r.lse, one, d));
  // Row 3's probabilities are exp(x - lse) with lse rounded to an ulp of 1e4.
  ExpectClose(d, RefBackward(ToDoubles(logits), t, std::vector<double>(5, 1.0), vocab), 1e-7, 2e-3,
              "dlogits");
}

TEST(CrossEntropy, IgnoreIndexInsideTheVocabularyAndAllIgnored) {
  Tensor logits = RandomTensor({6, 9}, DType::kF32, -3, 3, 12);
  const std::vector<int64_t> t = {3, 1, 3, 8, 0, 3};  // ignore 3
  ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult r,
                          CrossEntropy(logits, TargetTensor(t, {6}, DType::kI32), {.ignore_index = 3}));
  const RefOut ref = RefForward(ToDoubles(logits), t, 9, 3);
  ExpectClose(r.losses, ref.loss, 1e-5, 1e-6, "losses");
  EXPECT_EQ(r.stats.valid_rows, 3);
  EXPECT_NEAR(r.stats.mean_loss, ref.mean, 1e-6);
  const std::vector<int64_t> all(6, kIgnore);
  ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult none, CrossEntropy(logits, TargetTensor(all, {6}, DType::kI64)));
  EXPECT_EQ(none.stats.valid_rows, 0);
  EXPECT_TRUE(std::isnan(none.stats.mean_loss));
  EXPECT_EQ(ToDoubles(none.losses), std::vector<double>(6, 0.0));
}

TEST(CrossEntropy, StridedInputsAndOutputs) {
  // Transposed logits (copied), a strided target view, strided bf16 losses and lse.
  Tensor base = RandomTensor({33, 7}, DType::kBF16, -4, 4, 20);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor logits, base.Transpose(0, 1));  // [7, 33]
  const std::vector<int64_t> t14 = MakeTargets(14, 33, 21, 3);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tt, TargetTensor(t14, {14}, DType::kI64).Slice(0, 0, 14, 2));  // [7]
  std::vector<int64_t> t;
  for (int i = 0; i < 14; i += 2) t.push_back(t14[i]);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lbuf, Tensor::Full({7, 2}, 9.0, DType::kBF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor losses, lbuf.Select(1, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sbuf, Tensor::Full({7, 3}, 9.0, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lse, sbuf.Select(1, 0));
  ZS_ASSERT_OK(CrossEntropyForward(logits, tt, losses, lse).status());
  const RefOut ref = RefForward(ToDoubles(logits), t, 33);
  ExpectClose(losses, ref.loss, 1e-5, 1e-6 + RoundingRtol(DType::kBF16), "strided losses");
  ExpectClose(lse, ref.lse, 1e-5, 1e-6, "strided lse");
  for (int64_t r = 0; r < 7; ++r) ASSERT_EQ(ToDoubles(lbuf)[r * 2], 9.0);
  // A column slice of a bigger buffer as logits (rows used in place), and as dlogits.
  Tensor wide = RandomTensor({7, 40}, DType::kF32, -4, 4, 22);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor sliced, wide.Narrow(1, 5, 33));
  ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult r2, CrossEntropy(sliced, tt));
  ExpectClose(r2.losses, RefForward(ToDoubles(sliced), t, 33).loss, 1e-5, 1e-6, "sliced logits");
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dwide, Tensor::Full({7, 40}, 9.0, DType::kF16));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dl, dwide.Narrow(1, 2, 33));
  Tensor dloss = RandomTensor({7}, DType::kF32, 0.5, 2, 23);
  ZS_ASSERT_OK(CrossEntropyBackward(sliced, tt, r2.lse, dloss, dl));
  ExpectClose(dl, RefBackward(ToDoubles(sliced), t, ToDoubles(dloss), 33), 2e-6,
              1e-5 + RoundingRtol(DType::kF16), "sliced dlogits");
  const std::vector<double> dv = ToDoubles(dwide);
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t c : {0, 1, 35, 39}) ASSERT_EQ(dv[r * 40 + c], 9.0);
  }
}

// ---------------------------------------------------------------- backward

TEST(CrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t rows = 4, vocab = 7;
  const std::vector<double> x = ToDoubles(RandomTensor({rows, vocab}, DType::kF32, -3, 3, 30));
  const std::vector<double> dl = ToDoubles(RandomTensor({rows}, DType::kF32, 0.5, 2, 31));
  const std::vector<int64_t> t = {2, kIgnore, 6, 0};
  auto loss = [&](const std::vector<double>& v) {
    const RefOut f = RefForward(v, t, vocab);
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += dl[r] * f.loss[r];
    return s;
  };
  ExpectClose(RefBackward(x, t, dl, vocab), NumericGradient(loss, x), 1e-8, 1e-6,
              "reference gradient vs finite differences");
}

TEST(CrossEntropy, BackwardMatchesDoubleReference) {
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    const int64_t vocab = c.logits.back();
    const Shape lead(c.logits.begin(), c.logits.end() - 1);
    const int64_t rows = NumElements(lead);
    for (DType dtype : kFloatDTypes) {
      for (DType out_dtype : {dtype, DType::kF32}) {
        for (bool per_row : {true, false}) {
          Tensor logits = RandomTensor(c.logits, dtype, -8, 8, seed++);
          const std::vector<int64_t> t = MakeTargets(rows, vocab, seed++, c.ignore_every);
          const Tensor tt = TargetTensor(t, lead, seed % 2 ? DType::kI32 : DType::kI64);
          ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult f, CrossEntropy(logits, tt));
          Tensor dloss = per_row ? RandomTensor(lead, DType::kBF16, 0.5, 2, seed++)
                                 : Tensor::Full({1}, 1.0 / std::max<int64_t>(1, f.stats.valid_rows), DType::kF32).value();
          std::vector<double> dl = ToDoubles(dloss);
          if (!per_row) dl.assign(rows, dl[0]);
          ZS_ASSERT_OK_AND_ASSIGN(Tensor d, Tensor::Empty(c.logits, out_dtype));
          ZS_ASSERT_OK(CrossEntropyBackward(logits, tt, f.lse, dloss, d));
          const double dl_max = *std::max_element(dl.begin(), dl.end());
          ExpectClose(d, RefBackward(ToDoubles(logits), t, dl, vocab), 1e-6 * dl_max + kF16Subnormal, 1e-5 + RoundingRtol(out_dtype),
                      absl::StrCat(ShapeToString(c.logits), " ", DTypeName(dtype), " -> ",
                                   DTypeName(out_dtype), per_row ? " per-row dloss" : " one dloss"));
        }
      }
    }
  }
}

TEST(CrossEntropy, BackwardInPlaceOverTheLogits) {
  for (DType dtype : kFloatDTypes) {
    Tensor logits = RandomTensor({33, 257}, dtype, -8, 8, 40);
    const std::vector<int64_t> t = MakeTargets(33, 257, 41, 4);
    const Tensor tt = TargetTensor(t, {33}, DType::kI64);
    const std::vector<double> x = ToDoubles(logits);
    ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult f, CrossEntropy(logits, tt));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor one, Tensor::Full({1}, 1.0, DType::kF32));
    ZS_ASSERT_OK(CrossEntropyBackward(logits, tt, f.lse, one, logits));
    ExpectClose(logits, RefBackward(x, t, std::vector<double>(33, 1.0), 257), 1e-6,
                1e-5 + RoundingRtol(dtype), absl::StrCat("in place ", DTypeName(dtype)));
  }
}

// ---------------------------------------------------------------- determinism

TEST(CrossEntropy, BitwiseIndependentOfThreadsAndInstructionSet) {
  const int64_t rows = 301, vocab = 1031;
  Tensor logits = RandomTensor({rows, vocab}, DType::kF32, -8, 8, 50);
  const Tensor tt = TargetTensor(MakeTargets(rows, vocab, 51, 7), {rows}, DType::kI64);
  Tensor dloss = RandomTensor({rows}, DType::kF32, 0.5, 2, 52);
  auto run = [&]() {
    std::vector<double> all;
    CrossEntropyResult f = CrossEntropy(logits, tt).value();
    Tensor d = Tensor::Empty({rows, vocab}, DType::kF32).value();
    EXPECT_TRUE(CrossEntropyBackward(logits, tt, f.lse, dloss, d).ok());
    all.push_back(f.stats.mean_loss);
    for (const Tensor* t : {&f.losses, &f.lse, &d}) {
      for (double v : ToDoubles(*t)) all.push_back(v);
    }
    return all;
  };
  ExpectSameBitsOnEveryThreadCountAndIsa(run);
}

// ---------------------------------------------------------------- errors

TEST(CrossEntropy, Errors) {
  using absl::StatusCode::kInvalidArgument;
  Tensor logits = RandomTensor({2, 3, 7}, DType::kF32, -1, 1, 1);
  const Tensor good = TargetTensor({0, 1, 2, 3, 4, kIgnore}, {2, 3}, DType::kI64);
  ZS_ASSERT_OK_AND_ASSIGN(CrossEntropyResult f, CrossEntropy(logits, good));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor d, Tensor::Empty({2, 3, 7}, DType::kF32));
  // Out-of-range targets name the position, row and value.
  EXPECT_THAT(CrossEntropy(logits, TargetTensor({0, 1, 2, 3, 4, 7}, {2, 3}, DType::kI32)),
              StatusIs(kInvalidArgument, HasSubstr("CrossEntropyForward: targets[1, 2] = 7 (row 5) is out of "
                                                   "range [0, 7) and is not ignore_index -100")));
  EXPECT_THAT(CrossEntropyBackward(logits, TargetTensor({0, -1, 2, 3, 4, 5}, {6}, DType::kI64), f.lse,
                                   f.losses, d),
              StatusIs(kInvalidArgument, HasSubstr("CrossEntropyBackward: targets[1] = -1 (row 1) is out of range")));
  EXPECT_THAT(CrossEntropy(logits, RandomTensor({2, 3}, DType::kF32, 0, 1, 2)),
              StatusIs(kInvalidArgument, HasSubstr("targets has dtype f32, expected i32 or i64")));
  EXPECT_THAT(CrossEntropy(logits, TargetTensor({0, 1, 2}, {3}, DType::kI64)),
              StatusIs(kInvalidArgument, HasSubstr("targets has shape [3], expected [2, 3] or [6] (one value per "
                                                   "row of [2, 3, 7])")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor no_vocab, Tensor::Zeros({2, 0}, DType::kF32));
  EXPECT_THAT(CrossEntropy(no_vocab, TargetTensor({0, 0}, {2}, DType::kI64)),
              StatusIs(kInvalidArgument, HasSubstr("logits has shape [2, 0], expected a last dimension V >= 1")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lse_bf16, Tensor::Empty({6}, DType::kBF16));
  EXPECT_THAT(CrossEntropyForward(logits, good, Tensor(), lse_bf16),
              StatusIs(kInvalidArgument, HasSubstr("lse has dtype bf16, expected f32")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor losses_i32, Tensor::Empty({6}, DType::kI32));
  EXPECT_THAT(CrossEntropyForward(logits, good, losses_i32, Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("losses has dtype i32, expected f32, bf16 or f16")));
  EXPECT_THAT(CrossEntropyForward(logits, good, f.lse, f.lse),
              StatusIs(kInvalidArgument, HasSubstr("the output lse")));
  EXPECT_THAT(CrossEntropyBackward(logits, good, Tensor(), f.losses, d),
              StatusIs(kInvalidArgument, HasSubstr("lse is undefined; expected the one CrossEntropyForward saved")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dl4, Tensor::Zeros({4}, DType::kF32));
  EXPECT_THAT(CrossEntropyBackward(logits, good, f.lse, dl4, d),
              StatusIs(kInvalidArgument, HasSubstr("dlosses has shape [4], expected [2, 3] or [6] (one value per row "
                                                   "of [2, 3, 7]), or a single value [] or [1]")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor d_wrong, Tensor::Empty({2, 3, 8}, DType::kF32));
  EXPECT_THAT(CrossEntropyBackward(logits, good, f.lse, f.losses, d_wrong),
              StatusIs(kInvalidArgument, HasSubstr("dlogits has shape [2, 3, 8], expected [2, 3, 7] (the shape of logits)")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lbuf, Tensor::Zeros({43}, DType::kF32));
  EXPECT_THAT(CrossEntropyBackward(lbuf.Narrow(0, 0, 42).value().View({2, 3, 7}).value(), good, f.lse, f.losses,
                                   lbuf.Narrow(0, 1, 42).value().View({2, 3, 7}).value()),
              StatusIs(kInvalidArgument, HasSubstr("only exact in-place is allowed")));
  // CUDA tensors over host memory: without a device they fail cleanly
  // (tests/kernels/cuda_rows_test.cc checks the CUDA kernel on a GPU).
  std::vector<float> h1(42), h2(6);
  std::vector<int64_t> h3(6);
  const Tensor gl = Tensor::Wrap(h1.data(), {6, 7}, DType::kF32, Device::Cuda(0));
  const Tensor gs = Tensor::Wrap(h2.data(), {6}, DType::kF32, Device::Cuda(0));
  const Tensor gt = Tensor::Wrap(h3.data(), {6}, DType::kI64, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) {
    EXPECT_FALSE(CrossEntropyForward(gl, gt, Tensor(), gs).ok());
    EXPECT_FALSE(CrossEntropyBackward(gl, gt, gs, gs, gl).ok());
  }
  EXPECT_THAT(CrossEntropyForward(gl, TargetTensor({0, 1, 2, 3, 4, 5}, {6}, DType::kI64), Tensor(), Tensor()),
              StatusIs(kInvalidArgument, HasSubstr("tensors on different devices")));
}

}  // namespace
}  // namespace zeroshard
