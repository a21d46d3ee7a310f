// Conv2d in the op registry (kernels/op_registry.h): CPU im2col + GEMM, CUDA
// through cuDNN on GPUs and our kernels where cuDNN does not run
// (kernels/cuda/conv2d.cu: the simulator runs this case too).
#include <algorithm>
#include <cmath>
#include <vector>

#include "zeroshard/kernels/conv2d.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kN = 2, kC = 3, kH = 6, kW = 5, kO = 4, kK = 3;
const Conv2dOptions kOptions{.stride = {2, 1}, .padding = {1, 1}};
constexpr int64_t kOH = (kH + 2 - kK) / 2 + 1, kOW = kW + 2 - kK + 1;

// y[n, o, i, j] = b[o] + sum over c, ki, kj of x[n, c, 2i - 1 + ki, j - 1 + kj] w[o, c, ki, kj].
Values Reference(const Values& in) {
  const std::vector<double>&x = in[0], &w = in[1], &b = in[2];
  std::vector<double> y(kN * kO * kOH * kOW);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t o = 0; o < kO; ++o)
      for (int64_t i = 0; i < kOH; ++i)
        for (int64_t j = 0; j < kOW; ++j) {
          double s = b[o];
          for (int64_t c = 0; c < kC; ++c)
            for (int64_t ki = 0; ki < kK; ++ki)
              for (int64_t kj = 0; kj < kK; ++kj) {
                const int64_t h = 2 * i - 1 + ki, v = j - 1 + kj;
                if (h < 0 || h >= kH || v < 0 || v >= kW) continue;
                s += x[((n * kC + c) * kH + h) * kW + v] * w[((o * kC + c) * kK + ki) * kK + kj];
              }
          y[((n * kO + o) * kOH + i) * kOW + j] = s;
        }
  return {y};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "conv2d",
    .family = "conv2d",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "x", .shape = {kN, kC, kH, kW}},
               {.name = "weight", .shape = {kO, kC, kK, kK}},
               {.name = "bias", .shape = {kO}}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor y, Conv2dForward(in[0], in[1], in[2], kOptions));
      return Tensors{y};
    },
    .reference = Reference,
    // tests/kernels/conv2d_test.cc: fp32 sums of C KH KW = 27 products of
    // values in [-1, 1).
    .forward_bound = [](DType, int) { return Bound{1e-5, 1e-5, "fp32 sums of 27 products"}; },
    // cuDNN rounds a bf16 / f16 convolution to the dtype, then adds the bias
    // (rounded to the dtype too): one more rounding of each term, at most
    // u (max sum |x w| + max |b|) with u a whole ulp (2^-7 bf16, 2^-10 f16:
    // kernel_testing.h RoundingRtol). Seen on an H200: 0.16016 for 0.16154 (bf16).
    .cuda_extra_atol = [](const Values& in, DType dtype, int) -> double {
      const double u = dtype == DType::kBF16 ? 1.0 / 128 : dtype == DType::kF16 ? 1.0 / 1024 : 0.0;
      if (u == 0) return 0;
      const std::vector<double>&x = in[0], &w = in[1], &b = in[2];
      double terms = 0;  // max over outputs of sum |x w|, bounded by every kernel position counted
      for (int64_t o = 0; o < kO; ++o) {
        double s = 0;
        for (int64_t c = 0; c < kC; ++c)
          for (int64_t k = 0; k < kK * kK; ++k) {
            double xmax = 0;
            for (int64_t i = 0; i < kN * kH * kW; ++i) {
              xmax = std::max(xmax, std::abs(x[(i / (kH * kW) * kC + c) * kH * kW + i % (kH * kW)]));
            }
            s += xmax * std::abs(w[(o * kC + c) * kK * kK + k]);
          }
        terms = std::max(terms, s + std::abs(b[o]));
      }
      return u * terms;
    },
    .backward = [](const Tensors& in, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor dw, EmptyOn(in[0], in[1].shape(), in[1].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor db, EmptyOn(in[0], in[2].shape(), in[2].dtype()));
      ZS_RETURN_IF_ERROR(Conv2dBackward(dout[0], in[0], in[1], kOptions, dx, dw, db, GradMode::kOverwrite));
      return Tensors{dx, dw, db};
    },
    // The same test: dx sums at most O KH KW = 36 products; dweight and dbias
    // sum over every output position, N OH OW of them.
    .backward_bound = [](DType, int input) {
      return input == 0 ? Bound{1e-5, 1e-5, "dx: fp32 sums of 36 products"}
                        : Bound{1e-5 * (1 + kN * kOH * kOW), 1e-5, "dweight, dbias: fp32 sums over N OH OW"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
