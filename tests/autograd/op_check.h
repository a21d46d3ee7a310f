// The finite-difference check of a differentiable op, shared by the op suites:
// the forward against a double-precision reference, and the autograd gradient of
// L = sum(w * op(x...)) (fixed random w) against central differences of that
// reference computed in double.
//
//   CheckOp("Relu", [](const std::vector<Variable>& v) { return ops::Relu(v[0]); },
//           [](const std::vector<Vec>& x) { return MyReference(x[0]); }, {input});
#ifndef ZEROSHARD_TESTS_AUTOGRAD_OP_CHECK_H_
#define ZEROSHARD_TESTS_AUTOGRAD_OP_CHECK_H_

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {

using autograd::Variable;

using Vec = std::vector<double>;
using RefFn = std::function<Vec(const std::vector<Vec>&)>;
using OpFn = std::function<absl::StatusOr<Variable>(const std::vector<Variable>&)>;

// Runs op and ref on `inputs`, then compares gradients (up to `max_checks`
// elements per input) with central differences (step h) of the reference.
inline void CheckOp(const std::string& name, const OpFn& op, const RefFn& ref, std::vector<Tensor> inputs,
             double tol = 2e-4, double h = 1e-4) {
  SCOPED_TRACE(name);
  std::vector<Variable> vars;
  std::vector<Vec> xd;
  for (const Tensor& t : inputs) {
    vars.emplace_back(t, true);
    xd.push_back(ToDoubles(t));
  }
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, op(vars));
  const Vec want = ref(xd);
  ::zeroshard::testing::ExpectClose(y.value(), want, 1e-5, 1e-5, name + " forward");
  // L = sum(w * y) with fixed random w.
  const std::vector<float> wv = RandomValues(y.numel(), -1, 1, 77);
  Variable w(Tensor::FromVector(wv, y.shape()).value());
  ZS_ASSERT_OK_AND_ASSIGN(Variable wy, ops::Mul(y, w));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(wy));
  ZS_ASSERT_OK(autograd::Backward(loss));
  auto loss_ref = [&](const std::vector<Vec>& x) {
    const Vec r = ref(x);
    double s = 0;
    for (size_t i = 0; i < r.size(); ++i) s += wv[i] * r[i];
    return s;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(vars[i].grad().defined()) << "input " << i << " got no gradient";
    const Vec g = ToDoubles(vars[i].grad());
    const size_t n = xd[i].size();
    const size_t stride = n > 40 ? n / 40 : 1;
    for (size_t j = 0; j < n; j += stride) {
      std::vector<Vec> xp = xd, xm = xd;
      xp[i][j] += h;
      xm[i][j] -= h;
      const double fd = (loss_ref(xp) - loss_ref(xm)) / (2 * h);
      EXPECT_NEAR(g[j], fd, tol * (1 + std::fabs(fd))) << "input " << i << " element " << j;
    }
  }
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_AUTOGRAD_OP_CHECK_H_
