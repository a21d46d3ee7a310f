// The SwiGLU gate in the op registry (kernels/op_registry.h): forward against
// silu(gate) * up in double, the backward kernel against finite differences.
#include <cmath>

#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/silu_gate.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

const Shape kShape = {7, 33};

double Silu(double x) { return x / (1 + std::exp(-x)); }

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "silu_gate",
    .family = "silu_gate",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    // Gates past the sigmoid's knees on both sides.
    .inputs = {{.name = "gate", .shape = kShape, .lo = -8, .hi = 8},
               {.name = "up", .shape = kShape, .lo = -2, .hi = 2}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor out, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(SiluGateForward(in[0], in[1], out));
      return Tensors{out};
    },
    .reference = [](const Values& in) {
      std::vector<double> y(in[0].size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = Silu(in[0][i]) * in[1][i];
      return Values{y};
    },
    // tests/kernels/silu_gate_test.cc: sigmoid from ExpF (2 ulp) and three
    // roundings, then two products: within 6e-7 relative, 1e-6 with margin.
    .forward_bound = [](DType, int) { return Bound{1e-7, 1e-6, "fp32 sigmoid (ExpF) and two products"}; },
    .backward = [](const Tensors& in, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dgate, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor dup, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(SiluGateBackward(dout[0], in[0], in[1], dgate, dup));
      return Tensors{dgate, dup};
    },
    // dgate: silu'(g) = s (1 + g (1 - s)) cancels near g = -1.28 (its zero),
    // so its error follows the terms, s (1 + |g| (1 - s)) <= 1.3, times ~10
    // fp32 roundings (6e-7) and |dy up| <= 2: 2e-6 absolute. dup: dy silu(g),
    // as the forward.
    .backward_bound = [](DType, int input) {
      return input == 0 ? Bound{2e-6, 1e-6, "dgate: fp32 silu' (cancels near its zero), two products"}
                        : Bound{1e-7, 1e-6, "dup: fp32 silu and a product"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
