// LayerNorm in the op registry (kernels/op_registry.h): the backward kernel
// against finite differences of the double forward.
#include <cmath>

#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kRows = 5, kCols = 33;
constexpr double kEps = 1e-5;

// out, mean, rstd of x [rows, C] with weight w and bias b: two passes, as torch.
Values Reference(const Values& in) {
  const std::vector<double>&x = in[0], &w = in[1], &b = in[2];
  std::vector<double> y(x.size()), mean(kRows), rstd(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < kCols; ++i) m += x[r * kCols + i];
    m /= kCols;
    for (int64_t i = 0; i < kCols; ++i) v += (x[r * kCols + i] - m) * (x[r * kCols + i] - m);
    const double rs = 1 / std::sqrt(v / kCols + kEps);
    for (int64_t i = 0; i < kCols; ++i) y[r * kCols + i] = (x[r * kCols + i] - m) * rs * w[i] + b[i];
    mean[r] = m;
    rstd[r] = rs;
  }
  return {y, mean, rstd};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "layernorm",
    .family = "layernorm",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "x", .shape = {kRows, kCols}, .lo = -2, .hi = 3},
               {.name = "weight", .shape = {kCols}, .lo = 0.5, .hi = 1.5},
               {.name = "bias", .shape = {kCols}, .lo = -1, .hi = 1}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor out, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor mean, EmptyOn(in[0], {kRows}, DType::kF32));
      ZS_ASSIGN_OR_RETURN(Tensor rstd, EmptyOn(in[0], {kRows}, DType::kF32));
      ZS_RETURN_IF_ERROR(LayerNormForward(in[0], in[1], in[2], kEps, out, mean, rstd));
      return Tensors{out, mean, rstd};
    },
    .reference = Reference,
    // tests/kernels/layernorm_test.cc: fp32 two-pass sums over C = 33.
    .forward_bound = [](DType, int output) {
      switch (output) {
        case 0: return Bound{1e-5, 1e-5, "out: fp32 mean, variance and affine map"};
        case 1: return Bound{1e-6, 1e-6, "mean: an fp32 sum of C values"};
        default: return Bound{0, 1e-5, "rstd: fp32 variance, then 1/sqrt"};
      }
    },
    .graded_outputs = 1,  // mean and rstd are saved statistics
    .backward = [](const Tensors& in, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor dw, EmptyOn(in[0], {kCols}, in[1].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor db, EmptyOn(in[0], {kCols}, in[2].dtype()));
      ZS_RETURN_IF_ERROR(LayerNormBackward(dout[0], in[0], out[1], out[2], in[1], dx, dw, db,
                                           GradMode::kOverwrite));
      return Tensors{dx, dw, db};
    },
    // tests/kernels/layernorm_test.cc: dx from the saved fp32 mean and rstd
    // (relative errors 1e-6 and 1e-5, carried through xhat); dweight and dbias
    // are fp32 sums over the rows, 2e-6 each.
    .backward_bound = [](DType, int input) {
      return input == 0 ? Bound{2e-5, 1e-4, "dx: fp32, from the saved mean and rstd"}
                        : Bound{2e-6 * kRows, 1e-5, "dweight, dbias: fp32 sums over the rows"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
