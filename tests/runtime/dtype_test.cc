#include "zeroshard/runtime/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kI8), 1u);
  EXPECT_EQ(DTypeName(DType::kI8), "i8");
  for (DType d : kAllDTypes) {
    ZS_ASSERT_OK_AND_ASSIGN(DType parsed, ParseDType(DTypeName(d)));
    EXPECT_EQ(parsed, d);
  }
  EXPECT_TRUE(IsFloatingPoint(DType::kBF16));
  EXPECT_FALSE(IsFloatingPoint(DType::kI64));
}

TEST(DType, ParsesLongNames) {
  EXPECT_EQ(ParseDType("bfloat16").value(), DType::kBF16);
  EXPECT_EQ(ParseDType("FP16").value(), DType::kF16);
  EXPECT_EQ(ParseDType("float32").value(), DType::kF32);
  EXPECT_EQ(ParseDType("int64").value(), DType::kI64);
  EXPECT_EQ(ParseDType("int8").value(), DType::kI8);
}

TEST(DType, UnknownNameSaysWhatIsAccepted) {
  EXPECT_THAT(ParseDType("f8"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("unknown dtype \"f8\": expected one of f32")));
}

TEST(DType, DispatchCallsTheStorageType) {
  for (DType d : kAllDTypes) {
    const size_t size = DispatchDType(d, [&]<typename T>() { return sizeof(T); });
    EXPECT_EQ(size, DTypeSize(d));
    EXPECT_EQ(DispatchDType(d, [&]<typename T>() { return DTypeOf<T>(); }), d);
  }
}

TEST(DType, ConvertBufferEveryPair) {
  const std::vector<float> values = {-2.75f, -1.0f, 0.0f, 0.5f, 1.0f, 3.25f, 100.0f};
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      // Source values in `from` (integers truncate toward zero).
      std::vector<char> src(values.size() * DTypeSize(from));
      ConvertBuffer(values.data(), DType::kF32, src.data(), from, values.size());
      std::vector<char> dst(values.size() * DTypeSize(to));
      ConvertBuffer(src.data(), from, dst.data(), to, values.size());
      std::vector<float> back(values.size());
      ConvertBuffer(dst.data(), to, back.data(), DType::kF32, values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        float expected = values[i];
        if (!IsFloatingPoint(from) || !IsFloatingPoint(to)) expected = std::trunc(expected);
        EXPECT_EQ(back[i], expected) << DTypeName(from) << " -> " << DTypeName(to) << " #" << i;
      }
    }
  }
}

TEST(DType, FloatToIntegerSaturatesAndMapsNanToZero) {
  EXPECT_EQ(ConvertElement<int32_t>(1e20f), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(ConvertElement<int32_t>(-1e20f), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ConvertElement<int64_t>(std::nanf("")), 0);
  EXPECT_EQ(ConvertElement<int32_t>(-3.9f), -3);
  EXPECT_EQ(ConvertElement<int8_t>(300.0f), 127);
  EXPECT_EQ(ConvertElement<int8_t>(-300.0f), -128);
}

TEST(DType, LargeConversionIsParallelAndExact) {
  const int64_t n = 1 << 20;
  std::vector<float> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<float>(i) * 0.37f - 1000.0f;
  std::vector<BFloat16> mid(n);
  ConvertBuffer(src.data(), DType::kF32, mid.data(), DType::kBF16, n);
  for (int64_t i = 0; i < n; i += 997) {
    EXPECT_EQ(mid[i].bits, FloatToBFloat16Bits(src[i])) << i;
  }
}

}  // namespace
}  // namespace zeroshard
