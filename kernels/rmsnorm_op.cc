// RMSNorm in the op registry (kernels/op_registry.h): the backward kernel
// against finite differences of the double forward.
#include <cmath>

#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/rmsnorm.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kRows = 5, kCols = 33;
constexpr double kEps = 1e-5;

// out, rstd of x [rows, C] with weight w, as transformers' LlamaRMSNorm in double.
Values Reference(const Values& in) {
  const std::vector<double>&x = in[0], &w = in[1];
  std::vector<double> y(x.size()), rstd(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < kCols; ++i) ms += x[r * kCols + i] * x[r * kCols + i];
    const double rs = 1 / std::sqrt(ms / kCols + kEps);
    for (int64_t i = 0; i < kCols; ++i) y[r * kCols + i] = x[r * kCols + i] * rs * w[i];
    rstd[r] = rs;
  }
  return {y, rstd};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "rmsnorm",
    .family = "rmsnorm",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "x", .shape = {kRows, kCols}, .lo = -2, .hi = 3},
               {.name = "weight", .shape = {kCols}, .lo = 0.5, .hi = 1.5}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor out, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor rstd, EmptyOn(in[0], {kRows}, DType::kF32));
      ZS_RETURN_IF_ERROR(RmsNormForward(in[0], in[1], kEps, out, rstd));
      return Tensors{out, rstd};
    },
    .reference = Reference,
    // tests/kernels/rmsnorm_test.cc: the sum of C positive squares in 16
    // fp32 lanes is within (C/16 + 16) 2^-24 relative (1.1e-6 for C = 33),
    // halved by the square root, plus the roundings of sqrt, 1/x and the two
    // products: rstd within 2e-6, out within 4e-6 relative.
    .forward_bound = [](DType, int output) {
      return output == 0 ? Bound{1e-7, 4e-6, "out: fp32 mean of squares, rsqrt, two products"}
                         : Bound{0, 2e-6, "rstd: an fp32 sum of C squares, then 1/sqrt"};
    },
    .graded_outputs = 1,  // rstd is a saved statistic
    .backward = [](const Tensors& in, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor dw, EmptyOn(in[0], {kCols}, in[1].dtype()));
      ZS_RETURN_IF_ERROR(RmsNormBackward(dout[0], in[0], out[1], in[1], dx, dw, GradMode::kOverwrite));
      return Tensors{dx, dw};
    },
    // tests/kernels/rmsnorm_test.cc: dx = rstd (g - xhat mean(g xhat)) from
    // the saved rstd (relative error 1.1e-6, entering the second term cubed)
    // with terms up to ~2 (rstd ~ 0.65, |xhat| <= 2, |g| <= 1.5): where the
    // two cancel the error follows the terms, hence the absolute 2e-5.
    // dweight: fp32 sums over the rows of |dy xhat| <= 2, each off by the
    // rstd's 1.1e-6 relative: 4e-6 per row.
    .backward_bound = [](DType, int input) {
      return input == 0 ? Bound{2e-5, 1e-4, "dx: fp32, from the saved rstd"}
                        : Bound{4e-6 * kRows, 1e-5, "dweight: fp32 sums over the rows"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
