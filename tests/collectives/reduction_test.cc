// The reduction math (collectives/reduction.h) and the CPU loop over it
// (collectives/cpu_reduce.h): exact conversions, rank-order fp32
// accumulation, any number of inputs, several outputs, in place, and the
// streaming-store path for large outputs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "zeroshard/collectives/cpu_reduce.h"
#include "zeroshard/collectives/reduction.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/half.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

// The select-based conversions must be bit-identical to runtime/half.h's for
// every input: all f16 values, and a stride through all 2^32 float patterns
// (an exhaustive run over all of them was done once, offline: 0 mismatches).
TEST(ReductionTest, SelectConversionsMatchHalfH) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const Float16 v = Float16::FromBits(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatBits(Float16ToFloatSelect(v)), FloatBits(static_cast<float>(v))) << h;
  }
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) {
    const float f = BitsToFloat(static_cast<uint32_t>(u));
    ASSERT_EQ(BFloat16FromFloatSelect(f).bits, BFloat16(f).bits) << std::hex << u;
    ASSERT_EQ(Float16FromFloatSelect(f).bits, Float16(f).bits) << std::hex << u;
  }
  // Edges: rounding ties, subnormal boundaries, overflow, NaN payloads.
  for (uint32_t u : {0x33000000u, 0x33000001u, 0x38800000u, 0x387fffffu, 0x477ff000u,
                     0x477fefffu, 0x7f800000u, 0x7f800001u, 0xffc00001u, 0x80000000u,
                     0x3f808000u, 0x3f818000u}) {
    const float f = BitsToFloat(u);
    EXPECT_EQ(BFloat16FromFloatSelect(f).bits, BFloat16(f).bits) << std::hex << u;
    EXPECT_EQ(Float16FromFloatSelect(f).bits, Float16(f).bits) << std::hex << u;
  }
}

TEST(ReductionTest, CombineAndFinish) {
  EXPECT_EQ((ReduceCombine<ReduceOp::kSum, float>(1.5f, 2.0f)), 3.5f);
  EXPECT_EQ((ReduceCombine<ReduceOp::kMax, int64_t>(-3, 2)), 2);
  EXPECT_TRUE(std::isnan(ReduceCombine<ReduceOp::kMax, float>(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(ReduceCombine<ReduceOp::kMax, float>(1.0f, NAN)));
  EXPECT_EQ((ReduceCombine<ReduceOp::kSum, int32_t>(INT32_MAX, 1)), INT32_MIN);  // wraps
  EXPECT_EQ((ReduceFinish<ReduceOp::kAvg, float>(7.0f, 2)), 3.5f);
  EXPECT_EQ((ReduceFinish<ReduceOp::kAvg, int32_t>(-7, 2)), -3);  // toward zero
}

TEST(ReductionTest, ParseReduceOp) {
  EXPECT_EQ(*ParseReduceOp("SUM"), ReduceOp::kSum);
  EXPECT_EQ(*ParseReduceOp("mean"), ReduceOp::kAvg);
  EXPECT_THAT(ParseReduceOp("min"), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                      testing::HasSubstr("sum, avg, max")));
}

// Reference: rank-order fp32 accumulation, one rounding, written plainly.
template <typename T>
std::vector<T> Reference(ReduceOp op, const std::vector<std::vector<T>>& ins) {
  std::vector<T> out(ins[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      int64_t acc = ins[0][i];
      for (size_t k = 1; k < ins.size(); ++k) {
        acc = op == ReduceOp::kMax ? std::max<int64_t>(acc, ins[k][i]) : acc + ins[k][i];
      }
      if (op == ReduceOp::kAvg) acc /= static_cast<int64_t>(ins.size());
      out[i] = static_cast<T>(acc);
    } else {
      float acc = static_cast<float>(ins[0][i]);
      for (size_t k = 1; k < ins.size(); ++k) {
        const float v = static_cast<float>(ins[k][i]);
        acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
      }
      if (op == ReduceOp::kAvg) acc /= static_cast<float>(ins.size());
      out[i] = T(acc);
    }
  }
  return out;
}

template <typename T>
uint64_t Bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <typename T>
void CheckReduce(int num_inputs, int num_outputs, int64_t count, bool in_place) {
  std::vector<std::vector<T>> ins(num_inputs, std::vector<T>(count));
  for (int k = 0; k < num_inputs; ++k) {
    for (int64_t i = 0; i < count; ++i) {
      // Fractions that round differently when summed in 16 bits.
      ins[k][i] = T(static_cast<float>((k * 131 + i * 17) % 97) * 0.37f - 11.0f);
    }
  }
  for (ReduceOp op : kAllReduceOps) {
    const std::vector<T> want = Reference(op, ins);
    std::vector<std::vector<T>> copies = ins;
    std::vector<std::vector<T>> outs(num_outputs, std::vector<T>(count));
    std::vector<const void*> in_ptrs;
    for (auto& v : copies) in_ptrs.push_back(v.data());
    std::vector<void*> out_ptrs;
    for (auto& v : outs) out_ptrs.push_back(v.data());
    if (in_place) out_ptrs[0] = copies[num_inputs - 1].data();
    ReduceBuffers(DTypeOf<T>(), op, in_ptrs, out_ptrs, count);
    for (int j = 0; j < num_outputs; ++j) {
      const T* got = static_cast<const T*>(out_ptrs[j]);
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(Bits(got[i]), Bits(want[i]))
            << DTypeName(DTypeOf<T>()) << " " << ReduceOpName(op) << " inputs=" << num_inputs
            << " output " << j << " element " << i << " of " << count;
      }
    }
  }
}

TEST(CpuReduceTest, EveryDTypeAndInputCount) {
  for (int n : {1, 2, 3, 5, 8, 9, 13}) {
    CheckReduce<float>(n, 1, 1037, false);
    CheckReduce<BFloat16>(n, 1, 1037, false);
    CheckReduce<Float16>(n, 1, 1037, false);
    CheckReduce<int32_t>(n, 1, 1037, false);
    CheckReduce<int64_t>(n, 1, 1037, false);
  }
}

TEST(CpuReduceTest, SeveralOutputsAndInPlace) {
  CheckReduce<float>(4, 3, 5000, false);
  CheckReduce<BFloat16>(3, 4, 5000, true);
  CheckReduce<int64_t>(70, 2, 3000, true);  // past the 64-input fast path
}

TEST(CpuReduceTest, LargeOutputsUseStreamingStores) {
  CheckReduce<float>(2, 1, (int64_t{17} << 20) / 4 + 5, false);  // 17 MiB, odd tail
  CheckReduce<BFloat16>(2, 2, (int64_t{4} << 20) + 3, true);       // 2 x 8 MiB
}

}  // namespace
}  // namespace zeroshard
