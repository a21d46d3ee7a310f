// LR schedules at exact step values (nanoGPT's get_lr convention), validation,
// and the scheduler's state dict round trip.
#include "zeroshard/optim/lr_schedule.h"

#include <cmath>

#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

// nanoGPT's train.py get_lr, transcribed (learning_rate 6e-4, min_lr 6e-5).
double NanoGptGetLr(int64_t it, int64_t warmup_iters, int64_t lr_decay_iters) {
  const double learning_rate = 6e-4, min_lr = 6e-5;
  if (it < warmup_iters) return learning_rate * (it + 1) / (warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  const double decay_ratio =
      static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * decay_ratio));
  return min_lr + coeff * (learning_rate - min_lr);
}

TEST(LrScheduleTest, CosineIsNanoGptsGetLrExactly) {
  const LrSchedule s{.kind = LrScheduleKind::kCosine, .lr = 6e-4, .min_lr = 6e-5,
                     .warmup_steps = 10, .decay_steps = 100};
  ZS_ASSERT_OK(s.Validate());
  for (int64_t it = 0; it <= 120; ++it) EXPECT_EQ(LrAt(s, it), NanoGptGetLr(it, 10, 100)) << it;
  // Landmarks.
  EXPECT_EQ(LrAt(s, 0), 6e-4 * 1 / 11);          // warmup starts above zero
  EXPECT_EQ(LrAt(s, 9), 6e-4 * 10 / 11);
  EXPECT_EQ(LrAt(s, 10), 6e-4);                  // peak at the end of warmup
  EXPECT_DOUBLE_EQ(LrAt(s, 55), 6e-5 + 0.5 * (6e-4 - 6e-5));  // half way: cos(pi/2) = 0
  EXPECT_EQ(LrAt(s, 100), 6e-5);
  EXPECT_EQ(LrAt(s, 101), 6e-5);
  EXPECT_EQ(LrAt(s, 1000000), 6e-5);
}

TEST(LrScheduleTest, LinearDecay) {
  const LrSchedule s{.kind = LrScheduleKind::kLinear, .lr = 1.0, .min_lr = 0.1,
                     .warmup_steps = 4, .decay_steps = 14};
  ZS_ASSERT_OK(s.Validate());
  EXPECT_EQ(LrAt(s, 0), 0.2);
  EXPECT_EQ(LrAt(s, 3), 0.8);
  EXPECT_EQ(LrAt(s, 4), 1.0);
  EXPECT_DOUBLE_EQ(LrAt(s, 9), 0.55);  // r = 0.5
  EXPECT_DOUBLE_EQ(LrAt(s, 13), 0.1 + 0.1 * 0.9);
  EXPECT_EQ(LrAt(s, 14), 0.1);
  EXPECT_EQ(LrAt(s, 50), 0.1);
}

TEST(LrScheduleTest, ConstantWithAndWithoutWarmup) {
  const LrSchedule plain{.kind = LrScheduleKind::kConstant, .lr = 3e-4};
  for (int64_t it : {0, 1, 1000}) EXPECT_EQ(LrAt(plain, it), 3e-4);
  const LrSchedule warm{.kind = LrScheduleKind::kConstant, .lr = 3.0, .warmup_steps = 2};
  EXPECT_EQ(LrAt(warm, 0), 1.0);
  EXPECT_EQ(LrAt(warm, 1), 2.0);
  EXPECT_EQ(LrAt(warm, 2), 3.0);
  EXPECT_EQ(LrAt(warm, 99), 3.0);
}

TEST(LrScheduleTest, DecayEndingAtWarmupStepsDownToMinLr) {
  const LrSchedule s{.kind = LrScheduleKind::kCosine, .lr = 1.0, .min_lr = 0.5,
                     .warmup_steps = 3, .decay_steps = 3};
  ZS_ASSERT_OK(s.Validate());
  EXPECT_EQ(LrAt(s, 2), 0.75);
  EXPECT_EQ(LrAt(s, 3), 0.5);
  EXPECT_EQ(LrAt(s, 4), 0.5);
  const LrSchedule none{.kind = LrScheduleKind::kCosine, .lr = 1.0, .min_lr = 0.0};
  EXPECT_EQ(LrAt(none, 0), 0.0);
}

TEST(LrScheduleTest, ValidationAndParsing) {
  EXPECT_THAT((LrSchedule{.kind = LrScheduleKind::kCosine, .lr = 1, .min_lr = 2,
                          .warmup_steps = 0, .decay_steps = 10}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_lr must be in [0, lr")));
  EXPECT_THAT((LrSchedule{.kind = LrScheduleKind::kLinear, .lr = 1, .min_lr = 0,
                          .warmup_steps = 10, .decay_steps = 5}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be >= warmup_steps (10)")));
  EXPECT_THAT((LrSchedule{.lr = -1}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr must be finite")));
  EXPECT_THAT((LrSchedule{.warmup_steps = -1}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("warmup_steps must be >= 0")));
  EXPECT_EQ(ParseLrScheduleKind("cosine").value(), LrScheduleKind::kCosine);
  EXPECT_EQ(ParseLrScheduleKind("linear").value(), LrScheduleKind::kLinear);
  EXPECT_EQ(ParseLrScheduleKind("constant").value(), LrScheduleKind::kConstant);
  EXPECT_THAT(ParseLrScheduleKind("step"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected constant, cosine or linear")));
}

TEST(LrSchedulerTest, StateDictRoundTripsExactly) {
  const LrSchedule s{.kind = LrScheduleKind::kCosine, .lr = 6e-4 / 3, .min_lr = 1e-5 / 7,
                     .warmup_steps = 7, .decay_steps = 1000};
  LrScheduler a(s);
  for (int i = 0; i < 42; ++i) a.Step();
  const auto saved = a.StateDict();
  EXPECT_EQ(saved.at("kind"), "cosine");
  EXPECT_EQ(saved.at("step"), "42");
  ZS_ASSERT_OK_AND_ASSIGN(LrScheduler b, LrScheduler::FromStateDict(saved));
  EXPECT_EQ(b.step(), 42);
  EXPECT_EQ(b.schedule().lr, s.lr);
  EXPECT_EQ(b.schedule().min_lr, s.min_lr);
  EXPECT_EQ(b.lr(), a.lr());
  EXPECT_EQ(b.lr(), LrAt(s, 42));

  auto missing = saved;
  missing.erase("decay_steps");
  EXPECT_THAT(LrScheduler::FromStateDict(missing),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing key \"decay_steps\"")));
  auto unknown = saved;
  unknown["gamma"] = "0.1";
  EXPECT_THAT(LrScheduler::FromStateDict(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key \"gamma\"")));
  auto malformed = saved;
  malformed["step"] = "4x";
  EXPECT_THAT(LrScheduler::FromStateDict(malformed),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step is \"4x\", expected an integer")));
  auto invalid = saved;
  invalid["min_lr"] = "1";
  EXPECT_THAT(LrScheduler::FromStateDict(invalid),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_lr must be in")));
}

}  // namespace
}  // namespace zeroshard::optim
