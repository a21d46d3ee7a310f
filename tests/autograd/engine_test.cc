// The backward engine: accumulation, ordering, retain_graph, detach, no-grad,
// every hook the sharding runtime relies on, and gradients landing in a flat buffer.
#include "zeroshard/autograd/engine.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/node.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::autograd {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

Variable Leaf(std::vector<float> v, Shape shape, bool requires_grad = true) {
  return Variable(Tensor::FromVector(v, shape).value(), requires_grad);
}
std::vector<float> Values(const Tensor& t) { return t.ToVector<float>().value(); }

TEST(Engine, ChainRuleAndAccumulationAcrossBackwards) {
  Variable x = Leaf({1, 2, 3}, {3});
  // loss = sum(x * x + 3x) -> d/dx = 2x + 3
  ZS_ASSERT_OK_AND_ASSIGN(Variable sq, ops::Mul(x, x));
  ZS_ASSERT_OK_AND_ASSIGN(Variable tx, ops::Scale(x, 3.0));
  ZS_ASSERT_OK_AND_ASSIGN(Variable s, ops::Add(sq, tx));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(s));
  EXPECT_FLOAT_EQ(loss.value().Item().value(), 1 + 4 + 9 + 18);
  ZS_ASSERT_OK(Backward(loss, {.retain_graph = true}));
  EXPECT_EQ(Values(x.grad()), (std::vector<float>{5, 7, 9}));
  ZS_ASSERT_OK(Backward(loss));  // accumulates (+=)
  EXPECT_EQ(Values(x.grad()), (std::vector<float>{10, 14, 18}));
  EXPECT_THAT(Backward(loss), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("saved tensors were freed")));
}

TEST(Engine, DetachAndNoGradRecordNothing) {
  Variable x = Leaf({1, 2}, {2});
  Variable d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  {
    NoGradGuard guard;
    ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Mul(x, x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  ZS_ASSERT_OK_AND_ASSIGN(Variable z, ops::Mul(x, d));  // d is a constant
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(z));
  ZS_ASSERT_OK(Backward(loss));
  EXPECT_EQ(Values(x.grad()), (std::vector<float>{1, 2}));
  Variable c = Leaf({1}, {1}, false);
  EXPECT_THAT(Backward(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("does not require grad")));
}

TEST(Engine, NonScalarRootNeedsAGradient) {
  Variable x = Leaf({1, 2}, {2});
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Scale(x, 2.0));
  EXPECT_THAT(Backward(y), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("needs a one-element root")));
  ZS_ASSERT_OK(Backward({y}, {Tensor::FromVector(std::vector<float>{1, 10}, {2}).value()}));
  EXPECT_EQ(Values(x.grad()), (std::vector<float>{2, 20}));
}

TEST(Engine, GradHookOnNonLeafCanReplaceTheGradient) {
  Variable x = Leaf({1, 2}, {2});
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Scale(x, 2.0));
  std::vector<float> seen;
  y.AddGradHook([&](const Tensor& g) -> absl::StatusOr<Tensor> {
    seen = Values(g);
    return zeroshard::Affine(g, 10.0, 0.0);  // replace: 10x the gradient
  });
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(y));
  ZS_ASSERT_OK(Backward(loss));
  EXPECT_EQ(seen, (std::vector<float>{1, 1}));
  EXPECT_EQ(Values(x.grad()), (std::vector<float>{20, 20}));
}

TEST(Engine, LeafHooksAndPostAccumulateHookOrder) {
  Variable w = Leaf({1, 1}, {2});
  std::vector<std::string> log;
  w.AddGradHook([&](const Tensor& g) -> absl::StatusOr<Tensor> {
    log.push_back("grad hook");
    return g;
  });
  w.AddPostAccumulateGradHook([&](const Variable& leaf) {
    log.push_back("post accumulate: " + std::to_string(Values(leaf.grad())[0]));
    return absl::OkStatus();
  });
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Scale(w, 3.0));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(y));
  ZS_ASSERT_OK(Backward(loss));
  EXPECT_EQ(log, (std::vector<std::string>{"grad hook", "post accumulate: 3.000000"}));
}

TEST(Engine, GradientsLandInAFlatBuffer) {
  // Two parameters whose gradients are views into one flat buffer.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor flat_grad, Tensor::Zeros({5}, DType::kF32));
  Variable a = Leaf({1, 2}, {2});
  Variable b = Leaf({3, 4, 5}, {3});
  ZS_ASSERT_OK(a.set_grad(flat_grad.Narrow(0, 0, 2).value()));
  ZS_ASSERT_OK(b.set_grad(flat_grad.Narrow(0, 2, 3).value()));
  ZS_ASSERT_OK_AND_ASSIGN(Variable sa, ops::SumAll(a));
  ZS_ASSERT_OK_AND_ASSIGN(Variable b2, ops::Mul(b, b));
  ZS_ASSERT_OK_AND_ASSIGN(Variable sb, ops::SumAll(b2));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::Add(sa, sb));
  ZS_ASSERT_OK(Backward(loss));
  EXPECT_EQ(Values(flat_grad), (std::vector<float>{1, 1, 6, 8, 10}));
  EXPECT_EQ(a.grad().storage(), flat_grad.storage());
  EXPECT_THAT(a.set_grad(flat_grad), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("gradient buffer of shape [5]")));
}

TEST(Engine, CallbackRunsOnceAfterTheWholePass) {
  Variable x = Leaf({1}, {1});
  Variable w = Leaf({2}, {1});
  std::vector<std::string> log;
  EXPECT_THAT(QueueCallback([] { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no backward pass")));
  x.AddPostAccumulateGradHook([&](const Variable&) {
    log.push_back("x accumulated");
    EXPECT_TRUE(InBackward());
    return QueueCallback([&] {
      log.push_back("finished");
      return absl::OkStatus();
    });
  });
  w.AddPostAccumulateGradHook([&](const Variable&) {
    log.push_back("w accumulated");
    return absl::OkStatus();
  });
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Mul(x, w));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(y));
  ZS_ASSERT_OK(Backward(loss));
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log.back(), "finished");
  EXPECT_FALSE(InBackward());
}

TEST(Engine, DiamondGraphSumsBothPaths) {
  // y = x*2 ; z = y*y + y  -> dz/dx = (2y + 1) * 2
  Variable x = Leaf({1.5f}, {1});
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Scale(x, 2.0));
  ZS_ASSERT_OK_AND_ASSIGN(Variable yy, ops::Mul(y, y));
  ZS_ASSERT_OK_AND_ASSIGN(Variable z, ops::Add(yy, y));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(z));
  ZS_ASSERT_OK(Backward(loss));
  EXPECT_FLOAT_EQ(Values(x.grad())[0], (2 * 3.0f + 1) * 2);
}

TEST(Engine, ErrorsInABackwardNameTheNode) {
  Variable x = Leaf({1, 2}, {2});
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, ops::Scale(x, 2.0));
  y.AddGradHook([](const Tensor&) -> absl::StatusOr<Tensor> {
    return absl::DataLossError("hook failed on purpose");
  });
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(y));
  EXPECT_THAT(Backward(loss), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("on purpose")));
}

// Op tracing (SetBackwardOpTrace with ForwardOpSpan): every autograd op is a
// span named after it, forward and backward; an op inside an op (Neg is an
// Affine) belongs to the outer one; nothing is recorded once tracing is off.
TEST(Engine, TracedStepHasEveryOpForwardAndBackward) {
  TraceRecorder trace;
  SetBackwardOpTrace(&trace, TraceRow{0, TraceRow::kCompute});
  Variable x = Leaf({1, -2, 3, 4, 0.5f, -1}, {2, 3});
  Variable w = Leaf({0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f}, {2, 3});
  Variable b = Leaf({0.25f, -0.5f}, {2});
  ZS_ASSERT_OK_AND_ASSIGN(Variable h, ops::Linear(x, w, b));
  ZS_ASSERT_OK_AND_ASSIGN(Variable g, ops::Gelu(h));
  ZS_ASSERT_OK_AND_ASSIGN(Variable n, ops::Neg(g));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(n));
  ZS_ASSERT_OK(Backward(loss));
  SetBackwardOpTrace(nullptr, {});
  ZS_ASSERT_OK(ops::Gelu(h).status());  // not traced
  std::vector<std::string> names;
  for (const TraceRecorder::Span& s : trace.spans()) {
    EXPECT_EQ(s.category, "op") << s.name;
    EXPECT_GE(s.dur_us, 0) << s.name;
    names.push_back(s.name);
  }
  // Forward in call order, then the backward nodes from the loss down (the
  // leaves' accumulators have no span).
  EXPECT_EQ(names, (std::vector<std::string>{"Linear", "Gelu", "Affine", "SumAll", "SumAll", "Affine",
                                             "Gelu", "Linear"}));
}

}  // namespace
}  // namespace zeroshard::autograd
