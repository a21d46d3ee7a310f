// The progress bar's line, the GPT FLOP count behind its MFU, and the measured peak.
#include "zeroshard/train/progress.h"

#include <gtest/gtest.h>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

TEST(Progress, LineHoldsEveryFigure) {
  const std::string line = ProgressLine({.step = 9, .steps = 40, .loss = 2.5, .lr = 1e-3, .tokens_per_s = 5300,
                                         .ms_per_step = 190, .mfu = 0.031, .peak_bytes = {26214400, 13107200}},
                                        /*bar_width=*/8);
  EXPECT_EQ(line, "\r\33[2K[==>     ] 10/40 steps, loss 2.5000 lr 1.00e-03 5300 tok/s 190 ms/step MFU 3.1% "
                  "mem 25.0/12.5 MiB");
  // No MFU without a peak; a full bar at the end.
  EXPECT_EQ(ProgressLine({.step = 3, .steps = 4, .loss = 1, .lr = 0, .tokens_per_s = 1, .ms_per_step = 1, .mfu = -1},
                         4),
            "\r\33[2K[====] 4/4 steps, loss 1.0000 lr 0.00e+00 1 tok/s 1 ms/step");
}

TEST(Progress, GptFlopsPerTokenArePalmsCount) {
  const nn::GptConfig c{.vocab_size = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  EXPECT_EQ(GptTrainFlopsPerToken(c, 834304), 6.0 * 834304 + 12.0 * 4 * 64 * 128);
}

TEST(Progress, PeakIsMeasured) {
  const PeakFlops p = MeasurePeakFlops();
  EXPECT_GT(p.flops_per_s, 1e8);  // any CPU of this century
  EXPECT_NE(p.how.find("best single-thread f32 GEMM 512^3"), std::string::npos) << p.how;
}

}  // namespace
}  // namespace zeroshard
