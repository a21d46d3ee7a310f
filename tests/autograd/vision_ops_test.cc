// Every image op: the forward against the double references of
// tests/kernels/image_reference.h and the autograd gradient of every input
// against central differences of that reference (tests/autograd/op_check.h).
#include "zeroshard/autograd/vision_ops.h"

#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/autograd/op_check.h"
#include "zeroshard/tests/kernels/image_reference.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::CheckOp;
using ::zeroshard::testing::ConvCase;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RefAdaptive;
using ::zeroshard::testing::RefAvg;
using ::zeroshard::testing::RefBatchNorm;
using ::zeroshard::testing::RefConv2d;
using ::zeroshard::testing::RefMax;
using ::zeroshard::testing::ToDoubles;
using Vec = std::vector<double>;

Tensor R(Shape s, float lo = -1, float hi = 1, uint64_t seed = 1) {
  return RandomTensor(s, DType::kF32, lo, hi, seed);
}

TEST(VisionOps, Conv2d) {
  const std::vector<ConvCase> cases = {
      {{2, 4, 7, 6}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 2}, "grouped"},
      {{2, 3, 6, 6}, {3, 1, 3, 3}, {.padding = {1, 1}, .groups = 3}, "depthwise"},
      {{1, 3, 9, 9}, {4, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}, "7x7 stem"},
  };
  uint64_t seed = 1;
  for (const ConvCase& k : cases) {
    const std::vector<Tensor> in = {R(k.x, -1, 1, seed), R(k.w, -1, 1, seed + 1), R({k.w[0]}, -1, 1, seed + 2)};
    seed += 3;
    CheckOp("Conv2d " + k.name,
            [&](const std::vector<Variable>& v) { return ops::Conv2d(v[0], v[1], v[2], k.o); },
            [&](const std::vector<Vec>& x) { return RefConv2d(k, x[0], x[1], x[2]); }, in);
    CheckOp("Conv2d without bias " + k.name,
            [&](const std::vector<Variable>& v) { return ops::Conv2d(v[0], v[1], Variable(), k.o); },
            [&](const std::vector<Vec>& x) { return RefConv2d(k, x[0], x[1], Vec()); }, {in[0], in[1]});
  }
}

TEST(VisionOps, BatchNormTrainingAndEval) {
  for (const Shape& shape : {Shape{4, 3, 3, 5}, Shape{5, 2}}) {
    const int64_t c = shape[1];
    const std::vector<Tensor> in = {R(shape, -2, 2, 10), R({c}, 0.5f, 1.5f, 11), R({c}, -1, 1, 12)};
    CheckOp("BatchNorm training " + ShapeToString(shape),
            [&](const std::vector<Variable>& v) {
              Tensor rm = Tensor::Zeros({c}, DType::kF32).value();
              Tensor rv = Tensor::Full({c}, 1.0, DType::kF32).value();
              return ops::BatchNorm(v[0], v[1], v[2], rm, rv, {.training = true});
            },
            [&](const std::vector<Vec>& x) { return RefBatchNorm(shape, x[0], x[1], x[2]).y; }, in);
    const Tensor rm = R({c}, -0.5f, 0.5f, 13), rv = R({c}, 0.5f, 2, 14);
    CheckOp("BatchNorm eval " + ShapeToString(shape),
            [&](const std::vector<Variable>& v) {
              return ops::BatchNorm(v[0], v[1], v[2], rm, rv, {.training = false});
            },
            [&](const std::vector<Vec>& x) {
              return RefBatchNorm(shape, x[0], x[1], x[2], ToDoubles(rm), ToDoubles(rv)).y;
            },
            in);
  }
}

TEST(VisionOps, Pooling) {
  const Shape shape = {2, 3, 7, 8};
  const Pool2dOptions stem{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  CheckOp("MaxPool2d", [&](const std::vector<Variable>& v) { return ops::MaxPool2d(v[0], stem); },
          [&](const std::vector<Vec>& x) { return RefMax(shape, x[0], stem); }, {R(shape, -1, 1, 20)});
  const Pool2dOptions avg{.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false};
  CheckOp("AvgPool2d", [&](const std::vector<Variable>& v) { return ops::AvgPool2d(v[0], avg); },
          [&](const std::vector<Vec>& x) { return RefAvg(shape, x[0], avg); }, {R(shape, -1, 1, 21)});
  CheckOp("AdaptiveAvgPool2d 1x1", [&](const std::vector<Variable>& v) { return ops::AdaptiveAvgPool2d(v[0], 1, 1); },
          [&](const std::vector<Vec>& x) { return RefAdaptive(shape, x[0], 1, 1); }, {R(shape, -1, 1, 22)});
  CheckOp("AdaptiveAvgPool2d 3x5", [&](const std::vector<Variable>& v) { return ops::AdaptiveAvgPool2d(v[0], 3, 5); },
          [&](const std::vector<Vec>& x) { return RefAdaptive(shape, x[0], 3, 5); }, {R(shape, -1, 1, 23)});
}

TEST(VisionOps, FlattenIsAViewWithTheSameValues) {
  Tensor x = R({2, 3, 4, 5}, -1, 1, 30);
  CheckOp("Flatten", [](const std::vector<Variable>& v) { return ops::Flatten(v[0]); },
          [](const std::vector<Vec>& x) { return x[0]; }, {x});
  Variable v(x, false);
  ZS_ASSERT_OK_AND_ASSIGN(Variable f, ops::Flatten(v));
  EXPECT_EQ(f.shape(), (Shape{2, 60}));
  EXPECT_EQ(f.value().raw_data(), x.raw_data());
  ZS_ASSERT_OK_AND_ASSIGN(Variable f2, ops::Flatten(v, 2));
  EXPECT_EQ(f2.shape(), (Shape{2, 3, 20}));
}

TEST(VisionOps, BatchNormUpdatesRunningStatisticsOnlyInTraining) {
  Tensor x = R({4, 2, 3, 3}, -2, 2, 40);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rm, Tensor::Zeros({2}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor rv, Tensor::Full({2}, 1.0, DType::kF32));
  ZS_ASSERT_OK(ops::BatchNorm(Variable(x, true), Variable(), Variable(), rm, rv, {.training = false}).status());
  EXPECT_EQ(ToDoubles(rm), Vec(2, 0.0));
  ZS_ASSERT_OK(ops::BatchNorm(Variable(x, true), Variable(), Variable(), rm, rv, {.training = true, .momentum = 0.1}).status());
  const auto ref = RefBatchNorm({4, 2, 3, 3}, ToDoubles(x), Vec(2, 1.0), Vec(2, 0.0));
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(ToDoubles(rm)[c], 0.1 * ref.mean[c], 1e-6);
    EXPECT_NEAR(ToDoubles(rv)[c], 0.9 + 0.1 * ref.var[c] * 36 / 35, 1e-6);
  }
}

}  // namespace
}  // namespace zeroshard
