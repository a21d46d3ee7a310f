// Softmax and log-softmax in the op registry (kernels/op_registry.h).
#include <algorithm>
#include <cmath>

#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/softmax.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kRows = 5, kCols = 33;

// log(sum(exp(row))) in double, shifted by the row's max.
double RowLogSumExp(const std::vector<double>& x, int64_t r) {
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < kCols; ++i) m = std::max(m, x[r * kCols + i]);
  for (int64_t i = 0; i < kCols; ++i) s += std::exp(x[r * kCols + i] - m);
  return m + std::log(s);
}

Values Reference(const Values& in, bool log) {
  const std::vector<double>& x = in[0];
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    const double lse = RowLogSumExp(x, r);
    for (int64_t i = 0; i < kCols; ++i) {
      const double l = x[r * kCols + i] - lse;
      y[r * kCols + i] = log ? l : std::exp(l);
    }
  }
  return {y};
}

OpDescriptor Describe(bool log) {
  return OpDescriptor{
      .name = log ? "log_softmax" : "softmax",
      .family = "softmax",
      .backends = {.cuda = true},
      .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
      // Log-softmax's backward reads exp(y): a narrow range keeps |y| small
      // (see its bound).
      .inputs = {{.name = "x", .shape = {kRows, kCols}, .lo = log ? -2.0 : -8.0, .hi = log ? 2.0 : 8.0}},
      .forward = [log](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor y, log ? LogSoftmax(in[0]) : Softmax(in[0]));
        return Tensors{y};
      },
      .reference = [log](const Values& in) { return Reference(in, log); },
      .forward_bound = [log](DType, int) {
        return log ? Bound{2e-6, 2e-6, "fp32 lse (values up to ~20 in size): tests/kernels/softmax_test.cc"}
                   : Bound{1e-7, 1e-5, "fp32 exp and row sum: tests/kernels/softmax_test.cc"};
      },
      .backward = [log](const Tensors&, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor dx, log ? LogSoftmaxBackward(out[0], dout[0])
                                           : SoftmaxBackward(out[0], dout[0]));
        return Tensors{dx};
      },
      .backward_bound = [log](DType dtype, int) {
        // The backward reads y rounded into the dtype (relative error u):
        // softmax: dx_i = y_i (dy_i - sum_j dy_j y_j) moves by at most
        //   u y_i (|dy_i| + |s|) + y_i u max|dy| <= 3u (y <= 1, |dy| <= 1);
        // log-softmax: dx_i = dy_i - exp(y_i) sum_j dy_j with y_i = log p_i
        //   moves by p_i |log p_i| u |sum dy| <= u C / e (p |log p| <= 1/e).
        // Plus the fp32 backward of softmax_test.cc: atol 1e-6, rtol 1e-5.
        const double u = UnitRoundoff(dtype);
        return Bound{1e-6 + (log ? u * kCols / std::exp(1.0) : 3 * u), 1e-5,
                     "fp32 backward + the saved y's rounding into the dtype"};
      },
  };
}

const bool kRegistered = RegisterOps({Describe(/*log=*/false), Describe(/*log=*/true)});

}  // namespace
}  // namespace zeroshard::ops
