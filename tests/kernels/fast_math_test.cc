// The shared per-element math against double precision.
#include "zeroshard/kernels/math/fast_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace zeroshard {
namespace {

constexpr double kUlp = 5.9604644775390625e-8;  // 2^-24, one ulp relative at [1, 2)

TEST(FastMath, ExpIsWithinTwoUlp) {
  double worst = 0;
  for (float x = -87.3f; x < 88.7f; x += 0.00731f) {
    const double want = std::exp(static_cast<double>(x));
    const double got = ExpF(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 2 * kUlp);
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-100.0f), 0.0f);
  EXPECT_EQ(ExpF(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ExpF(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(ExpF(std::nanf(""))));
  // Near the top of the range the result is finite and accurate.
  EXPECT_NEAR(ExpF(88.72f) / std::exp(static_cast<double>(88.72f)), 1.0, 4 * kUlp);
}

TEST(FastMath, LogIsAccurate) {
  double worst_rel = 0;
  for (float x = 1e-30f; x < 1e30f; x *= 1.0137f) {
    const double want = std::log(static_cast<double>(x));
    const double got = LogF(x);
    const double err = std::fabs(got - want);
    worst_rel = std::max(worst_rel, std::fabs(want) > 0.5 ? err / std::fabs(want) : err);
  }
  EXPECT_LT(worst_rel, 2 * kUlp);
  for (float x = 0.5f; x < 2.0f; x += 0.0001f) {
    EXPECT_NEAR(LogF(x), std::log(static_cast<double>(x)), 2e-7) << x;
  }
  EXPECT_NEAR(LogF(1e-40f), std::log(1e-40), 1e-5);  // subnormal input
  EXPECT_EQ(LogF(1.0f), 0.0f);
  EXPECT_EQ(LogF(0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(LogF(-1.0f)));
  EXPECT_EQ(LogF(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
}

TEST(FastMath, TanhIsAccurateIncludingNearZero) {
  double worst = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.000731f) {
    const double want = std::tanh(static_cast<double>(x));
    const double got = TanhF(x);
    if (want == 0) continue;
    worst = std::max(worst, std::fabs(got - want) / std::fabs(want));
  }
  EXPECT_LT(worst, 3 * kUlp);
  EXPECT_EQ(TanhF(1e-30f), 1e-30f);
  EXPECT_EQ(TanhF(30.0f), 1.0f);
  EXPECT_EQ(TanhF(-30.0f), -1.0f);
}

double GeluRef(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

TEST(FastMath, GeluAndItsGradient) {
  for (double x = -8; x < 8; x += 0.01) {
    const double xf = static_cast<float>(x);
    const double want = GeluRef(xf);
    EXPECT_NEAR(GeluTanh(static_cast<float>(x)), want, 1e-7 + 4e-7 * std::fabs(want)) << x;
    const double h = 1e-5;
    const double fd = (GeluRef(xf + h) - GeluRef(xf - h)) / (2 * h);
    EXPECT_NEAR(GeluTanhGrad(static_cast<float>(x)), fd, 1e-7 + 1e-6 * std::fabs(fd)) << x;
  }
}

}  // namespace
}  // namespace zeroshard
