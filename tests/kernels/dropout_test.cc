// Philox4x32-10 against Random123's known answers, the stream layout, and
// Dropout / DropoutBackward against a plain-loop double reference: every float
// dtype, odd shapes, strided views, in place, split invariance, mask
// statistics, the identical mask in backward, every instruction set, thread
// counts, and the errors.
#include "zeroshard/kernels/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "zeroshard/kernels/cpu/dropout.h"
#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/math/dropout_math.h"
#include "zeroshard/kernels/math/philox.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

// ---------------------------------------------------------------- Philox

// Random123 (github.com/DEShawResearch/random123), tests/kat_vectors, the three
// "philox4x32 10" lines: counter (4 words), key (2 words), expected (4 words).
struct Kat {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t want[4];
};
constexpr Kat kPhiloxKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, Random123KnownAnswers) {
  for (const Kat& kat : kPhiloxKats) {
    uint32_t out[4];
    Philox4x32(PhiloxCounter{{kat.ctr[0], kat.ctr[1], kat.ctr[2], kat.ctr[3]}},
               PhiloxKey{{kat.key[0], kat.key[1]}}, out);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(out[j], kat.want[j]) << "word " << j;
  }
}

TEST(Philox, StreamLayout) {
  // word(g) = Philox(counter {g/4 low, g/4 high, 0, 0}, key {seed low, seed high})[g % 4].
  const uint64_t seed = 0xa4093822299f31d0ull;  // key {0x299f31d0, 0xa4093822}
  for (uint64_t g : {uint64_t{0}, uint64_t{5}, uint64_t{4} * uint64_t{0xffffffff} + 3,
                     (uint64_t{0x12345} << 34) + 2}) {
    uint32_t out[4];
    Philox4x32(PhiloxCounter{{static_cast<uint32_t>(g >> 2), static_cast<uint32_t>(g >> 34), 0, 0}},
               PhiloxKey{{0x299f31d0u, 0xa4093822u}}, out);
    EXPECT_EQ(PhiloxWordAt(seed, g), out[g & 3]) << g;
  }
  // The all-zero known answer is word 0..3 of seed 0.
  for (int j = 0; j < 4; ++j) EXPECT_EQ(PhiloxWordAt(0, j), kPhiloxKats[0].want[j]);
}

TEST(Philox, VectorisedWordsMatchScalarForAnyStartAndLength) {
  const uint64_t seed = 0x0123456789abcdefull;
  // Starts of every alignment, and blocks just below 2^32 (carry into counter word 1).
  const uint64_t carry = uint64_t{4} * uint64_t{0xffffffff} - 6;
  std::vector<uint32_t> words(5000 + 3);
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4},
                         uint64_t{1001}, carry, carry + 1, carry + 3}) {
    for (int64_t n : {1, 2, 7, 33, 257, 2048, 5000}) {
      cpu::PhiloxWords(seed, first, n, words.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(words[i], PhiloxWordAt(seed, first + i)) << "first " << first << " n " << n
                                                            << " i " << i;
      }
    }
  }
}

TEST(Philox, UniformIsInUnitIntervalWith24Bits) {
  EXPECT_EQ(PhiloxUniform(0), 0.0f);
  EXPECT_EQ(PhiloxUniform(0xffu), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(PhiloxUniform(0x100u), std::ldexp(1.0f, -24));
  EXPECT_EQ(PhiloxUniform(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_LT(PhiloxUniform(0xffffffffu), 1.0f);
}

TEST(Philox, GeneratorHandsOutDisjointBlockAlignedStreams) {
  PhiloxGenerator gen{.seed = 7};
  const PhiloxStream a = gen.Next(10);
  const PhiloxStream b = gen.Next(4);
  const PhiloxStream c = gen.Next(1);
  const PhiloxStream d = gen.Next(0);
  EXPECT_EQ(a.seed, 7u);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(b.offset, 12u);  // 10 rounded up to 12
  EXPECT_EQ(c.offset, 16u);
  EXPECT_EQ(d.offset, 20u);
  EXPECT_EQ(gen.offset, 20u);
}

// ---------------------------------------------------------------- Dropout

// The reference: element i of a call with stream s is kept iff the uniform of
// word(s.offset + i) is below float(1 - p), and then scaled by 1 / (1 - p) in
// double. (The Philox words themselves are checked by the tests above.)
std::vector<double> Reference(const std::vector<double>& x, double p, const PhiloxStream& s) {
  std::vector<double> y(x.size());
  const float keep_prob = static_cast<float>(1.0 - p);
  for (size_t i = 0; i < x.size(); ++i) {
    const bool keep = PhiloxUniform(PhiloxWordAt(s.seed, s.offset + i)) < keep_prob;
    y[i] = keep ? x[i] / (1.0 - p) : 0.0;
  }
  return y;
}

std::vector<Shape> OddShapes() { return {{1}, {7}, {33}, {257}, {7, 33}, {3, 1, 257}, {33, 1001}}; }

// Tolerance: float(1 / (1 - p)) and the fp32 product are each within half an
// ulp (2^-24 relative); 16-bit outputs add one rounding. Dropped elements are
// exactly 0 (atol 0).
double Rtol(DType dtype) { return 2.5e-7 + RoundingRtol(dtype); }

TEST(Dropout, MatchesReferenceEveryDTypeOddShapes) {
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : OddShapes()) {
      for (double p : {0.1, 0.5, 0.9}) {
        Tensor x = RandomTensor(shape, dtype, -2, 2, seed);
        const PhiloxStream s{.seed = 1000 + seed, .offset = 4 * seed};
        ++seed;
        ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Dropout(x, p, s));
        EXPECT_EQ(y.dtype(), dtype);
        ExpectClose(y, Reference(ToDoubles(x), p, s), 0.0, Rtol(dtype),
                    absl::StrCat(DTypeName(dtype), " ", ShapeToString(shape), " p=", p));
      }
    }
  }
}

TEST(Dropout, MaskStatistics) {
  // n = 1e6 Bernoulli(1 - p) decisions: the kept count is within 5 standard
  // deviations of n (1 - p), overall, per Philox lane (i % 4), and for pairs of
  // neighbours (independence of consecutive words).
  const int64_t n = 1000000;
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mask, Tensor::Empty({n}, DType::kF32));
  for (double p : {0.1, 0.5, 0.9}) {
    ZS_ASSERT_OK(DropoutMask(p, {.seed = 42, .offset = 0}, mask));
    const float* m = mask.data<float>();
    int64_t kept = 0, pairs = 0;
    int64_t lane[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(m[i] == 0.0f || m[i] == 1.0f);
      kept += m[i] == 1.0f;
      lane[i % 4] += m[i] == 1.0f;
      if (i + 1 < n) pairs += m[i] == 1.0f && m[i + 1] == 1.0f;
    }
    const double q = 1.0 - p;
    auto within = [](double count, double trials, double prob) {
      const double sigma = std::sqrt(trials * prob * (1 - prob));
      return std::fabs(count - trials * prob) <= 5 * sigma;
    };
    EXPECT_TRUE(within(kept, n, q)) << "p " << p << " kept " << kept;
    for (int j = 0; j < 4; ++j) EXPECT_TRUE(within(lane[j], n / 4, q)) << "p " << p << " lane " << j;
    // Neighbouring pairs are not independent trials; 5 sigma of the binomial is still loose enough.
    EXPECT_TRUE(within(pairs, n - 1, q * q)) << "p " << p << " pairs " << pairs;
  }
}

TEST(Dropout, SameStreamPositionSameDecisionWhateverTheSplit) {
  const int64_t n = 7 * 1001;
  Tensor x = RandomTensor({n}, DType::kF32, 0.5f, 2, 3);  // no zeros: y == 0 means dropped
  for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 40}) {
    const PhiloxStream s{.seed = 99, .offset = offset};
    ZS_ASSERT_OK_AND_ASSIGN(Tensor whole, Dropout(x, 0.3, s));
    // Another shape over the same elements.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor x2d, x.View({7, 1001}));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y2d, Dropout(x2d, 0.3, s));
    EXPECT_EQ(ToDoubles(y2d), ToDoubles(whole));
    // Two halves, the second with its offset advanced by the first's size
    // (odd split points, inside a chunk and across chunk boundaries).
    for (int64_t split : {int64_t{1}, int64_t{5}, int64_t{2049}, n - 1}) {
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty({n}, DType::kF32));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor x0, x.Narrow(0, 0, split));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor x1, x.Narrow(0, split, n - split));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y0, y.Narrow(0, 0, split));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y1, y.Narrow(0, split, n - split));
      ZS_ASSERT_OK(Dropout(x0, 0.3, s, y0));
      ZS_ASSERT_OK(Dropout(x1, 0.3, {.seed = 99, .offset = offset + split}, y1));
      EXPECT_EQ(ToDoubles(y), ToDoubles(whole)) << "offset " << offset << " split " << split;
    }
  }
}

TEST(Dropout, StridedViewsUseRowMajorIndexOfTheView) {
  for (DType dtype : kFloatDTypes) {
    Tensor base = RandomTensor({33, 7}, dtype, -1, 1, 5);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor xt, base.Transpose(0, 1));  // [7, 33], not contiguous
    ZS_ASSERT_OK_AND_ASSIGN(Tensor xc, xt.Contiguous());
    const PhiloxStream s{.seed = 5, .offset = 8};
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Dropout(xc, 0.5, s));
    // Strided input, contiguous output.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Dropout(xt, 0.5, s));
    EXPECT_EQ(ToDoubles(y), ToDoubles(want));
    // Strided output (a transposed view of a buffer).
    ZS_ASSERT_OK_AND_ASSIGN(Tensor buf, Tensor::Empty({33, 7}, dtype));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor yt, buf.Transpose(0, 1));
    ZS_ASSERT_OK(Dropout(xc, 0.5, s, yt));
    EXPECT_EQ(ToDoubles(yt), ToDoubles(want));
    // A column slice of a wider buffer.
    Tensor wide = RandomTensor({7, 50}, dtype, -1, 1, 6);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor cols, wide.Narrow(1, 3, 33));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor cols_c, cols.Contiguous());
    ZS_ASSERT_OK_AND_ASSIGN(Tensor yc, Dropout(cols, 0.5, s));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want_c, Dropout(cols_c, 0.5, s));
    EXPECT_EQ(ToDoubles(yc), ToDoubles(want_c));
  }
}

TEST(Dropout, InPlace) {
  Tensor x = RandomTensor({257}, DType::kBF16, -1, 1, 7);
  const PhiloxStream s{.seed = 3, .offset = 0};
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Dropout(x, 0.25, s));
  ZS_ASSERT_OK(Dropout(x, 0.25, s, x));
  EXPECT_EQ(ToDoubles(x), ToDoubles(want));
  // In place on a strided view.
  Tensor m = RandomTensor({9, 8}, DType::kF32, -1, 1, 8);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor mt, m.Transpose(0, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_t, Dropout(mt, 0.25, s));
  ZS_ASSERT_OK(Dropout(mt, 0.25, s, mt));
  EXPECT_EQ(ToDoubles(mt), ToDoubles(want_t));
}

TEST(Dropout, BackwardAppliesTheIdenticalMask) {
  for (DType dtype : kFloatDTypes) {
    const int64_t n = 4099;
    Tensor x = RandomTensor({n}, dtype, 0.5f, 2, 9);  // nonzero: y == 0 means dropped
    Tensor dy = RandomTensor({n}, dtype, 0.5f, 2, 10);
    const PhiloxStream s{.seed = 11, .offset = 1 << 20};
    const double p = 0.4;
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Dropout(x, p, s));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dx, Tensor::Empty({n}, dtype));
    ZS_ASSERT_OK(DropoutBackward(dy, p, s, dx));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor mask, Tensor::Empty({n}, DType::kF32));
    ZS_ASSERT_OK(DropoutMask(p, s, mask));
    const std::vector<double> yv = ToDoubles(y), dxv = ToDoubles(dx), mv = ToDoubles(mask),
                              dyv = ToDoubles(dy);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(yv[i] != 0.0, mv[i] == 1.0) << i;
      ASSERT_EQ(dxv[i] != 0.0, mv[i] == 1.0) << i;
      kept += mv[i] == 1.0;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, n);
    ExpectClose(dx, Reference(dyv, p, s), 0.0, Rtol(dtype), std::string(DTypeName(dtype)));
  }
}

TEST(Dropout, ProbabilityZeroIsIdentityAndOneGivesZeros) {
  std::vector<float> v = {1.5f, -0.0f, 3e38f, NAN, INFINITY, -2.0f, 1e-40f};
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromVector(v, {7}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y0, Dropout(x, 0.0, {.seed = 1}));
  const std::vector<float> y0v = y0.ToVector<float>().value();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(FloatBits(y0v[i]), FloatBits(v[i])) << i;
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y1, Dropout(x, 1.0, {.seed = 1}));
  const std::vector<float> y1v = y1.ToVector<float>().value();
  for (float f : y1v) EXPECT_EQ(FloatBits(f), 0u);
  // The identity also holds on the kernel path itself (no copy shortcut):
  // keep_prob 1 keeps every uniform, scale 1 leaves the bits.
  const DropoutParams dp = MakeDropoutParams(0.0);
  EXPECT_EQ(dp.keep_prob, 1.0f);
  EXPECT_EQ(dp.scale, 1.0f);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor y2, Tensor::Empty({7}, DType::kF32));
  cpu::Dropout(x, dp, {.seed = 1}, y2);
  const std::vector<float> y2v = y2.ToVector<float>().value();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(FloatBits(y2v[i]), FloatBits(v[i])) << i;
  EXPECT_EQ(MakeDropoutParams(1.0).scale, 0.0f);
}

TEST(Dropout, EveryInstructionSetAndThreadCountGivesTheSameBits) {
  const int64_t n = 300001;  // several chunks per thread, a ragged end
  Tensor x = RandomTensor({n}, DType::kF32, -1, 1, 12);
  const PhiloxStream s{.seed = 13, .offset = 7};
  std::vector<std::vector<double>> results;
  const int threads = omp_get_max_threads();
  for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
    cpu::SetActiveCpuIsa(isa);
    for (int t : {1, 3}) {
      omp_set_num_threads(t);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Dropout(x, 0.2, s));
      results.push_back(ToDoubles(y));
    }
  }
  omp_set_num_threads(threads);
  cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << "run " << i;
  ExpectClose(results[0], Reference(ToDoubles(x), 0.2, s), 0.0, Rtol(DType::kF32), "vs reference");
}

TEST(Dropout, Errors) {
  Tensor x = RandomTensor({4, 3}, DType::kF32, -1, 1, 1);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Empty({4, 3}, DType::kF32));
  for (double p : {-0.1, 1.5, double(NAN)}) {
    EXPECT_THAT(Dropout(x, p, {}, out),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("Dropout: drop probability p must be in [0, 1], got")));
  }
  EXPECT_THAT(DropoutBackward(x, 2.0, {}, out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("DropoutBackward: drop probability")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wrong_shape, Tensor::Empty({3, 4}, DType::kF32));
  EXPECT_THAT(Dropout(x, 0.5, {}, wrong_shape),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Dropout: out has shape [3, 4], expected [4, 3] (the shape of x)")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bf, Tensor::Empty({4, 3}, DType::kBF16));
  EXPECT_THAT(Dropout(x, 0.5, {}, bf),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Dropout: out has dtype bf16, expected f32 (the dtype of x)")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({4, 3}, DType::kI32));
  EXPECT_THAT(Dropout(ints, 0.5, {}, ints),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Dropout: x has dtype i32, expected f32, bf16 or f16")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor head, x.Narrow(0, 0, 3));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tail, x.Narrow(0, 1, 3));
  EXPECT_THAT(Dropout(head, 0.5, {}, tail),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("partially overlaps")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor row, Tensor::Empty({3}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor expanded, row.Expand({4, 3}));
  EXPECT_THAT(Dropout(x, 0.5, {}, expanded),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("broadcast (stride 0)")));
  EXPECT_THAT(Dropout(Tensor(), 0.5, {}, out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Dropout: undefined x")));
  EXPECT_THAT(DropoutMask(0.5, {}, ints),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DropoutMask: mask has dtype i32, expected f32, bf16 or f16")));
  // CUDA tensors over host memory: without a device the launch fails cleanly
  // (tests/kernels/cuda_dropout_test.cc checks the CUDA kernel on a GPU).
  float dummy[12];
  const Tensor gx = Tensor::Wrap(dummy, {4, 3}, DType::kF32, Device::Cuda(0));
  if (!::zeroshard::testing::HasCudaDevice()) { EXPECT_FALSE(Dropout(gx, 0.5, {}, gx).ok()); }
  EXPECT_THAT(Dropout(x, 0.5, {}, gx),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("different devices")));
}

}  // namespace
}  // namespace zeroshard
