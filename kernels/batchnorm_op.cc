// BatchNorm (training mode) in the op registry (kernels/op_registry.h): CPU
// kernels, CUDA through cuDNN on GPUs and our kernels where cuDNN does not run
// (kernels/cuda/batchnorm.cu: the simulator runs this case too).
#include <cmath>

#include "zeroshard/kernels/batchnorm.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kN = 4, kC = 3, kL = 5;
constexpr double kEps = 1e-5;

// Per channel over its N L values: y = (x - mean) rstd w + b, the biased variance.
Values Reference(const Values& in) {
  const std::vector<double>&x = in[0], &w = in[1], &b = in[2];
  std::vector<double> y(x.size()), mean(kC), rstd(kC);
  for (int64_t c = 0; c < kC; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t l = 0; l < kL; ++l) m += x[(n * kC + c) * kL + l];
    m /= kN * kL;
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t l = 0; l < kL; ++l) v += std::pow(x[(n * kC + c) * kL + l] - m, 2);
    const double rs = 1 / std::sqrt(v / (kN * kL) + kEps);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t l = 0; l < kL; ++l) {
        const int64_t i = (n * kC + c) * kL + l;
        y[i] = (x[i] - m) * rs * w[c] + b[c];
      }
    mean[c] = m;
    rstd[c] = rs;
  }
  return {y, mean, rstd};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "batchnorm",
    .family = "batchnorm",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "x", .shape = {kN, kC, kL}, .lo = -2, .hi = 3},
               {.name = "weight", .shape = {kC}, .lo = 0.5, .hi = 1.5},
               {.name = "bias", .shape = {kC}}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor y, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor mean, EmptyOn(in[0], {kC}, DType::kF32));
      ZS_ASSIGN_OR_RETURN(Tensor rstd, EmptyOn(in[0], {kC}, DType::kF32));
      ZS_RETURN_IF_ERROR(BatchNormForward(in[0], in[1], in[2], Tensor(), Tensor(),
                                          {.training = true, .eps = kEps}, y, mean, rstd));
      return Tensors{y, mean, rstd};
    },
    .reference = Reference,
    // tests/kernels/batchnorm_test.cc: fp32 statistics over N L = 20 values.
    .forward_bound = [](DType, int output) {
      switch (output) {
        case 0: return Bound{2e-5, 2e-5, "y: fp32 statistics and affine map"};
        case 1: return Bound{1e-6, 1e-5, "save_mean: an fp32 sum"};
        default: return Bound{1e-5, 1e-5, "save_rstd: fp32 variance, then 1/sqrt"};
      }
    },
    .graded_outputs = 1,  // save_mean and save_rstd are the backward's constants
    .backward = [](const Tensors& in, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor dw, EmptyOn(in[0], {kC}, in[1].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor db, EmptyOn(in[0], {kC}, in[2].dtype()));
      ZS_RETURN_IF_ERROR(BatchNormBackward(dout[0], in[0], out[1], out[2], in[1], /*training=*/true,
                                           dx, dw, db, GradMode::kOverwrite));
      return Tensors{dx, dw, db};
    },
    // The same test: dx 1e-4, dweight and dbias fp32 sums of N L = 20 terms.
    .backward_bound = [](DType, int input) {
      return input == 0 ? Bound{1e-4, 1e-4, "dx: fp32, through the batch statistics"}
                        : Bound{1e-5 * kN * kL, 1e-5, "dweight, dbias: fp32 sums over N L"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
