// ShapesData: samples are pure functions of (seed, split, index), labels are
// balanced and in range, every class draws both colours, the batch rule
// matches TokenData's (the global batch is the same for any world size), and
// bad arguments are refused.
#include "zeroshard/data/shapes_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TEST(ShapesData, SamplesAreDeterministicAndDistinct) {
  ZS_ASSERT_OK_AND_ASSIGN(ShapesData a, ShapesData::Create({.image_size = 16, .train_size = 100, .val_size = 20}));
  ZS_ASSERT_OK_AND_ASSIGN(ShapesData b, ShapesData::Create({.image_size = 16, .train_size = 100, .val_size = 20}));
  std::vector<float> x(3 * 16 * 16), y(3 * 16 * 16), z(3 * 16 * 16);
  for (int64_t i : {0, 7, 99}) {
    EXPECT_EQ(a.Render(ShapesSplit::kTrain, i, x.data()), b.Render(ShapesSplit::kTrain, i, y.data()));
    EXPECT_EQ(x, y) << "sample " << i;
  }
  a.Render(ShapesSplit::kVal, 7, z.data());
  a.Render(ShapesSplit::kTrain, 7, x.data());
  EXPECT_NE(x, z) << "train and validation sample 7 must differ";
  ZS_ASSERT_OK_AND_ASSIGN(ShapesData other_seed, ShapesData::Create({.image_size = 16, .seed = 1}));
  other_seed.Render(ShapesSplit::kTrain, 7, y.data());
  EXPECT_NE(x, y);
}

TEST(ShapesData, LabelsAreBalancedAndPixelsNormalised) {
  ZS_ASSERT_OK_AND_ASSIGN(ShapesData d, ShapesData::Create({.image_size = 32, .train_size = 3000}));
  std::vector<int> count(ShapesData::kNumClasses, 0);
  std::vector<float> img(3 * 32 * 32);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    const int label = d.Render(ShapesSplit::kTrain, i, img.data());
    ASSERT_GE(label, 0);
    ASSERT_LT(label, ShapesData::kNumClasses);
    ++count[label];
    if (i < 300) {
      for (float v : img) sum += v, sq += v * v;
      // Two colours (plus noise) per image: a spread well above the noise alone.
      std::set<int> levels;
      for (float v : img) levels.insert(static_cast<int>(std::floor(v)));
      EXPECT_GE(levels.size(), 2u) << "sample " << i << " (" << ShapesData::ClassName(label) << ")";
    }
  }
  for (int c = 0; c < ShapesData::kNumClasses; ++c) {
    EXPECT_GT(count[c], 240) << ShapesData::ClassName(c);  // 300 expected
    EXPECT_LT(count[c], 360) << ShapesData::ClassName(c);
  }
  const double n = 300.0 * img.size(), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.2);
  EXPECT_GT(sd, 0.8);
  EXPECT_LT(sd, 1.5);
}

TEST(ShapesData, GlobalBatchIsTheSameForAnyWorldSize) {
  ZS_ASSERT_OK_AND_ASSIGN(ShapesData d, ShapesData::Create({.image_size = 8, .train_size = 50}));
  ZS_ASSERT_OK_AND_ASSIGN(ImageBatch whole, d.TrainBatch({.step = 3, .batch_size = 12}));
  EXPECT_EQ(whole.images.shape(), (Shape{12, 3, 8, 8}));
  // Step 3 of 12 rows: global rows 36..47, samples 36..47 mod 50.
  std::vector<int64_t> want_idx;
  for (int64_t g = 36; g < 48; ++g) want_idx.push_back(g % 50);
  ZS_ASSERT_OK_AND_ASSIGN(ImageBatch direct, d.Samples(ShapesSplit::kTrain, want_idx));
  EXPECT_EQ(whole.images.ToVector<float>().value(), direct.images.ToVector<float>().value());
  for (int world : {2, 3, 4}) {
    std::vector<float> pixels;
    std::vector<int64_t> labels;
    for (int r = 0; r < world; ++r) {
      ZS_ASSERT_OK_AND_ASSIGN(ImageBatch b, d.TrainBatch({.step = 3, .rank = r, .world_size = world,
                                                          .batch_size = 12 / world}));
      auto p = b.images.ToVector<float>().value();
      auto l = b.labels.ToVector<int64_t>().value();
      pixels.insert(pixels.end(), p.begin(), p.end());
      labels.insert(labels.end(), l.begin(), l.end());
    }
    EXPECT_EQ(pixels, whole.images.ToVector<float>().value()) << "world " << world;
    EXPECT_EQ(labels, whole.labels.ToVector<int64_t>().value()) << "world " << world;
  }
}

TEST(ShapesData, ErrorsSayWhatWasExpected) {
  EXPECT_THAT(ShapesData::Create({.image_size = 4}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image_size >= 8")));
  ZS_ASSERT_OK_AND_ASSIGN(ShapesData d, ShapesData::Create({.image_size = 8, .train_size = 5, .val_size = 3}));
  EXPECT_THAT(d.ValBatch(2, 2).status(), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("expected [0, 3)")));
  EXPECT_THAT(d.TrainBatch({.rank = 2, .world_size = 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 of 2")));
}

}  // namespace
}  // namespace zeroshard
