// DynamicLossScaler: DeepSpeed's update rule (hysteresis, growth window,
// min scale), skipped-step counting, state dict round trip.
#include "zeroshard/optim/loss_scaler.h"

#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

// DeepSpeed's DynamicLossScaler.update_scale, transcribed, as the reference.
struct DeepSpeedReference {
  double cur_scale;
  int64_t cur_iter = 0, last_overflow_iter = -1;
  double scale_factor;
  int64_t scale_window;
  double min_scale;
  int delayed_shift, cur_hysteresis;
  bool consecutive_hysteresis;

  void update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        cur_scale = std::max(cur_scale / scale_factor, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) cur_hysteresis = delayed_shift;
      if ((cur_iter - last_overflow_iter) % scale_window == 0) {
        if (!consecutive_hysteresis) cur_hysteresis = delayed_shift;
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
  }
};

TEST(DynamicLossScalerTest, DefaultsAreDeepSpeedsFp16Section) {
  ZS_ASSERT_OK_AND_ASSIGN(DynamicLossScaler s, DynamicLossScaler::Create({}));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.inv_scale(), 1.0 / 65536);
  EXPECT_EQ(s.hysteresis_left(), 2);
  // The first overflow only spends hysteresis; the second halves the scale.
  ZS_ASSERT_OK(s.Update(true));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.hysteresis_left(), 1);
  ZS_ASSERT_OK(s.Update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.skipped_steps(), 2);
  // Growth after 1000 clean iterations since the last overflow, resetting hysteresis.
  for (int i = 0; i < 999; ++i) ZS_ASSERT_OK(s.Update(false));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.hysteresis_left(), 1);
  ZS_ASSERT_OK(s.Update(false));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_EQ(s.iteration(), 1002);
  EXPECT_EQ(s.ToString(), "loss scale 65536, hysteresis left 2, 2 of 1002 steps skipped");
}

TEST(DynamicLossScalerTest, MatchesTheDeepSpeedRuleOnAnOverflowPattern) {
  for (bool consecutive : {false, true}) {
    LossScalerOptions o{.initial_scale_power = 10, .scale_window = 7, .hysteresis = 3,
                        .consecutive_hysteresis = consecutive, .min_scale = 4,
                        .raise_error_at_min_scale = false};
    ZS_ASSERT_OK_AND_ASSIGN(DynamicLossScaler s, DynamicLossScaler::Create(o));
    DeepSpeedReference ref{1024, 0, -1, 2.0, 7, 4, 3, 3, consecutive};
    uint64_t bits = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 400; ++i) {
      bits = bits * 6364136223846793005ull + 1442695040888963407ull;
      const bool overflow = (bits >> 60) < 5;  // about 30% overflows, in bursts and gaps
      ZS_ASSERT_OK(s.Update(overflow));
      ref.update_scale(overflow);
      ASSERT_EQ(s.scale(), ref.cur_scale) << "iteration " << i << " consecutive " << consecutive;
      ASSERT_EQ(s.hysteresis_left(), ref.cur_hysteresis) << "iteration " << i;
    }
  }
}

TEST(DynamicLossScalerTest, OverflowAtTheMinimumIsAnError) {
  LossScalerOptions o{.initial_scale_power = 1, .hysteresis = 1, .min_scale = 1};
  ZS_ASSERT_OK_AND_ASSIGN(DynamicLossScaler s, DynamicLossScaler::Create(o));
  ZS_ASSERT_OK(s.Update(true));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_THAT(s.Update(true), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("loss scale already at its minimum 1")));
  o.raise_error_at_min_scale = false;
  ZS_ASSERT_OK_AND_ASSIGN(DynamicLossScaler quiet, DynamicLossScaler::Create(o));
  ZS_ASSERT_OK(quiet.Update(true));
  ZS_ASSERT_OK(quiet.Update(true));
  EXPECT_EQ(quiet.scale(), 1.0);
}

TEST(DynamicLossScalerTest, OptionErrors) {
  EXPECT_THAT(DynamicLossScaler::Create({.scale_factor = 1.0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scale_factor must be finite and > 1")));
  EXPECT_THAT(DynamicLossScaler::Create({.scale_window = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scale_window must be >= 1")));
  EXPECT_THAT(DynamicLossScaler::Create({.hysteresis = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hysteresis must be >= 1")));
  EXPECT_THAT(DynamicLossScaler::Create({.initial_scale_power = 2, .min_scale = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_scale must be in (0, 2^initial_scale_power = 4]")));
}

TEST(DynamicLossScalerTest, StateDictRoundTrip) {
  ZS_ASSERT_OK_AND_ASSIGN(DynamicLossScaler a, DynamicLossScaler::Create({}));
  for (bool o : {true, false, true, true, false, false}) ZS_ASSERT_OK(a.Update(o));
  ZS_ASSERT_OK_AND_ASSIGN(DynamicLossScaler b, DynamicLossScaler::Create({}));
  ZS_ASSERT_OK(b.LoadStateDict(a.StateDict()));
  EXPECT_EQ(b.StateDict(), a.StateDict());
  for (bool o : {false, true, false}) {
    ZS_ASSERT_OK(a.Update(o));
    ZS_ASSERT_OK(b.Update(o));
    EXPECT_EQ(a.scale(), b.scale());
  }
  auto bad = a.StateDict();
  bad["hysteresis_left"] = "7";
  EXPECT_THAT(b.LoadStateDict(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inconsistent")));
  bad = a.StateDict();
  bad["scale"] = "-1";
  EXPECT_THAT(b.LoadStateDict(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scale is \"-1\"")));
  bad = a.StateDict();
  bad.erase("iteration");
  EXPECT_THAT(b.LoadStateDict(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("iteration is missing")));
}

}  // namespace
}  // namespace zeroshard::optim
