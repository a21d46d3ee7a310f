// The elementwise ops in the op registry (kernels/op_registry.h): every
// UnaryOp and BinaryOp (the backward BinaryOps as the backward of GELU, ReLU
// and SiLU), Affine, PowScalar and Cast.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

const Shape kShape = {7, 33};
const std::vector<DType> kFloats = {DType::kF32, DType::kBF16, DType::kF16};
const std::vector<DType> kIntegers = {DType::kI32, DType::kI64};

// tests/kernels/elementwise_test.cc: the fp32 functions are accurate to a few
// ulp (4e-7 relative); products and quotients round once (1e-6).
Bound UnaryBound(DType, int) { return {1e-6, 4e-7, "fp32 math to a few ulp"}; }
Bound BinaryBound(DType, int) { return {1e-6, 1e-6, "one fp32 operation"}; }

// The gradient of the ops without a backward kernel is other elementwise ops
// of dy, composed by autograd (autograd/ops.cc), each checked here.
constexpr const char* kComposed = "autograd composes its gradient from elementwise ops";

double Gelu(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

Values PerElement(const Values& in, const std::function<double(double)>& f) {
  std::vector<double> y(in[0].size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = f(in[0][i]);
  return {y};
}

OpDescriptor UnaryDescriptor(UnaryOp op, double lo, double hi, std::function<double(double)> ref) {
  OpDescriptor d{
      .name = std::string("unary/") + UnaryOpName(op),
      .family = "elementwise",
      .backends = {.cuda = true},
      .dtypes = kFloats,
      .cpu_only_dtypes = UnaryOpSupportsIntegers(op) ? kIntegers : std::vector<DType>{},
      .inputs = {{.name = "x", .shape = kShape, .lo = lo, .hi = hi}},
      .forward = [op](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor y, Unary(op, in[0]));
        return Tensors{y};
      },
      .reference = [ref](const Values& in) { return PerElement(in, ref); },
      .forward_bound = UnaryBound,
      .no_backward = kComposed,
  };
  if (op == UnaryOp::kGelu || op == UnaryOp::kRelu || op == UnaryOp::kSilu) {
    d.backward = [op](const Tensors& in, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(op == UnaryOp::kGelu   ? GeluBackward(in[0], dout[0], dx)
                         : op == UnaryOp::kSilu ? SiluBackward(in[0], dout[0], dx)
                                                : ReluBackward(in[0], dout[0], dx));
      return Tensors{dx};
    };
    d.backward_bound = BinaryBound;
    d.no_backward.clear();
  }
  return d;
}

OpDescriptor BinaryDescriptor(BinaryOp op, double lo, double hi, std::function<double(double, double)> ref) {
  return OpDescriptor{
      .name = std::string("binary/") + BinaryOpName(op),
      .family = "elementwise",
      .backends = {.cuda = true},
      .dtypes = kFloats,
      .cpu_only_dtypes = BinaryOpSupportsIntegers(op) ? kIntegers : std::vector<DType>{},
      // b broadcast along the rows of a.
      .inputs = {{.name = "a", .shape = kShape, .lo = lo, .hi = hi},
                 {.name = "b", .shape = {kShape[1]}, .lo = lo, .hi = hi}},
      .forward = [op](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor y, Binary(op, in[0], in[1]));
        return Tensors{y};
      },
      .reference = [ref](const Values& in) {
        std::vector<double> y(in[0].size());
        for (size_t i = 0; i < y.size(); ++i) y[i] = ref(in[0][i], in[1][i % in[1].size()]);
        return Values{y};
      },
      .forward_bound = BinaryBound,
      .no_backward = kComposed,
  };
}

std::vector<OpDescriptor> Describe() {
  std::vector<OpDescriptor> ops = {
      UnaryDescriptor(UnaryOp::kNeg, -5, 5, [](double x) { return -x; }),
      // e^10 < 65504, the f16 maximum.
      UnaryDescriptor(UnaryOp::kExp, -10, 10, [](double x) { return std::exp(x); }),
      UnaryDescriptor(UnaryOp::kLog, 1e-3, 100, [](double x) { return std::log(x); }),
      UnaryDescriptor(UnaryOp::kTanh, -6, 6, [](double x) { return std::tanh(x); }),
      UnaryDescriptor(UnaryOp::kSqrt, 0, 100, [](double x) { return std::sqrt(x); }),
      UnaryDescriptor(UnaryOp::kRsqrt, 1e-2, 100, [](double x) { return 1 / std::sqrt(x); }),
      UnaryDescriptor(UnaryOp::kRelu, -5, 5, [](double x) { return x > 0 ? x : 0; }),
      UnaryDescriptor(UnaryOp::kGelu, -6, 6, Gelu),
      UnaryDescriptor(UnaryOp::kSigmoid, -10, 10, [](double x) { return 1 / (1 + std::exp(-x)); }),
      UnaryDescriptor(UnaryOp::kAbs, -5, 5, [](double x) { return std::fabs(x); }),
      UnaryDescriptor(UnaryOp::kSquare, -5, 5, [](double x) { return x * x; }),
      UnaryDescriptor(UnaryOp::kSilu, -10, 10, [](double x) { return x / (1 + std::exp(-x)); }),
      BinaryDescriptor(BinaryOp::kAdd, -5, 5, [](double a, double b) { return a + b; }),
      BinaryDescriptor(BinaryOp::kSub, -5, 5, [](double a, double b) { return a - b; }),
      BinaryDescriptor(BinaryOp::kMul, -5, 5, [](double a, double b) { return a * b; }),
      BinaryDescriptor(BinaryOp::kDiv, 0.5, 5, [](double a, double b) { return a / b; }),
      BinaryDescriptor(BinaryOp::kPow, 0.5, 3, [](double a, double b) { return std::pow(a, b); }),
      BinaryDescriptor(BinaryOp::kMax, -5, 5, [](double a, double b) { return std::max(a, b); }),
      BinaryDescriptor(BinaryOp::kMin, -5, 5, [](double a, double b) { return std::min(a, b); }),
  };
  ops.push_back(OpDescriptor{
      .name = "affine",
      .family = "elementwise",
      .backends = {.cuda = true},
      .dtypes = kFloats,
      .inputs = {{.name = "x", .shape = kShape, .lo = -5, .hi = 5}},
      .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor y, Affine(in[0], 2.5, -1.0));
        return Tensors{y};
      },
      .reference = [](const Values& in) { return PerElement(in, [](double x) { return 2.5 * x - 1; }); },
      .forward_bound = BinaryBound,  // a product and a sum in fp32: two roundings within 1e-6
      .no_backward = "its gradient is Affine(dy, alpha, 0), the same kernel",
  });
  ops.push_back(OpDescriptor{
      .name = "pow_scalar",
      .family = "elementwise",
      .backends = {.cuda = true},
      .dtypes = kFloats,
      .inputs = {{.name = "x", .shape = kShape, .lo = 0.1, .hi = 3}},
      .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor y, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
        ZS_RETURN_IF_ERROR(PowScalar(in[0], 3.0, y));
        return Tensors{y};
      },
      .reference = [](const Values& in) { return PerElement(in, [](double x) { return x * x * x; }); },
      .forward_bound = UnaryBound,  // fp32 pow to a few ulp
      .no_backward = kComposed,
  });
  // Into f32 (exact) and f16 (one rounding, which the harness adds).
  ops.push_back(OpDescriptor{
      .name = "cast",
      .family = "elementwise",
      .backends = {.cuda = true},
      .dtypes = kFloats,
      .inputs = {{.name = "x", .shape = kShape, .lo = -5, .hi = 5}},
      .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor f32, EmptyOn(in[0], in[0].shape(), DType::kF32));
        ZS_ASSIGN_OR_RETURN(Tensor f16, EmptyOn(in[0], in[0].shape(), DType::kF16));
        ZS_RETURN_IF_ERROR(Cast(in[0], f32));
        ZS_RETURN_IF_ERROR(Cast(in[0], f16));
        return Tensors{f32, f16};
      },
      .reference = [](const Values& in) { return Values{in[0], in[0]}; },
      .forward_bound = [](DType, int) { return Bound{0, 0, "a conversion: exact but for its rounding"}; },
      .no_backward = "its gradient is the cast of dy back, the same kernel",
  });
  return ops;
}

const bool kRegistered = RegisterOps(Describe());

}  // namespace
}  // namespace zeroshard::ops
