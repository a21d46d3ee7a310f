// Dropout in the op registry (kernels/op_registry.h).
#include "zeroshard/kernels/dropout.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

// p = 0.2: the scale 1 / (1 - p) = 1.25 is exact in fp32.
constexpr double kP = 0.2;
constexpr PhiloxStream kStream{.seed = 7, .offset = 12};
const Shape kShape = {7, 33};

// y = x * mask * 1.25, the mask from DropoutMask on the CPU (Philox4x32-10,
// checked against Random123's known-answer vectors in tests/kernels/dropout_test.cc):
// the same elements must be dropped on every backend.
Values Reference(const Values& in) {
  const Tensor mask_t = Tensor::Empty(kShape, DType::kF32).value();
  const std::vector<double> mask = DropoutMask(kP, kStream, mask_t).ok()
                                       ? mask_t.ToVector<double>().value()
                                       : std::vector<double>(in[0].size(), -1.0);
  std::vector<double> y(in[0].size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = in[0][i] * mask[i] / (1 - kP);
  return {y};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "dropout",
    .family = "dropout",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "x", .shape = kShape}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor y, Dropout(in[0], kP, kStream));
      return Tensors{y};
    },
    .reference = Reference,
    .forward_bound = [](DType, int) { return Bound{0, 0x1p-24, "one fp32 product by 1.25"}; },
    .backward = [](const Tensors& in, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), dout[0].dtype()));
      ZS_RETURN_IF_ERROR(DropoutBackward(dout[0], kP, kStream, dx));
      return Tensors{dx};
    },
    .backward_bound = [](DType, int) { return Bound{0, 0x1p-24, "one fp32 product by 1.25"}; },
}});

}  // namespace
}  // namespace zeroshard::ops
