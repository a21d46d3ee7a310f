// The op registry: every op of kernels/ with its backends, the dtypes it
// claims, its double-precision reference and, when it has a backward kernel,
// that kernel. Each op family registers its ops from its own `<op>_op.cc`
// (made a library by `zs_op` in kernels/BUILD.bazel, linked only by the op
// harness, tests/kernels/op_harness_test.cc), which walks the registry: every
// op on every backend present, for every dtype it claims, forward against the
// reference and backward against finite differences of the reference, in
// double. docs/adding_an_op.md has the steps.
//
//   namespace {
//   const bool kRegistered = RegisterOps({
//       OpDescriptor{
//           .name = "softmax",
//           .family = "softmax",
//           .backends = {.cuda = true},
//           .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
//           .inputs = {{.name = "x", .shape = {7, 257}, .lo = -8, .hi = 8}},
//           .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> { ... },
//           .reference = [](const Values& in) { ... },
//           .forward_bound = [](DType, int output) { return Bound{1e-7, 1e-5, "why"}; },
//           .backward = ..., .backward_bound = ...,
//       },
//   });
//   }  // namespace
//
// What the harness demands of a descriptor (MissingParts says what is not there):
// - a forward and a reference, and a forward bound with its reason;
// - a CUDA case (`backends.cuda`) or a reason it has none (`cpu_only`);
// - a backward with its bound, or a reason it has none (`no_backward`: the op
//   is not differentiable, or autograd composes its gradient from other ops).
//
// Bounds are |got - want| <= atol + rtol |want| for the fp32 arithmetic of the
// kernel on the stored inputs (the reference reads the same rounded values);
// the harness adds one rounding of each result into its dtype.
#ifndef ZEROSHARD_KERNELS_OP_REGISTRY_H_
#define ZEROSHARD_KERNELS_OP_REGISTRY_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::ops {

using Tensors = std::vector<Tensor>;
// Values of tensors in double, row-major, one vector per tensor.
using Values = std::vector<std::vector<double>>;

struct Backends {
  bool cpu = true;
  bool cuda = false;
  // The CUDA case calls a vendor library that the CPU simulator of the device
  // has no stand-in for ("cuDNN"; cuBLASLt and NCCL have theirs in
  // tools/cuda/sim): it skips there. Empty for our own kernels.
  std::string cuda_library;
};

// One input of an op: its shape and where its values come from.
struct OpInput {
  std::string name;
  Shape shape;
  // Values uniform in [lo, hi), rounded into the dtype.
  double lo = -1;
  double hi = 1;
  // Fixed dtype (indices: kI64), else the dtype under test.
  std::optional<DType> dtype;
  // Distinct values (a shuffled grid of multiples of 1/32, exact in every
  // float dtype), for ops with a kink where two inputs tie (max, max pooling):
  // there finite differences would straddle the kink.
  bool distinct = false;
  // Whether the backward gives its gradient (false for indices, targets,
  // and inputs whose gradient the backward does not compute).
  bool differentiable = true;
};

struct Bound {
  double atol = 0;
  double rtol = 0;
  // Where the numbers come from (the error analysis, in a sentence).
  std::string why;
};

struct OpDescriptor {
  std::string name;    // unique: "softmax", "unary/gelu"
  std::string family;  // its zs_op in kernels/BUILD.bazel: "softmax", "elementwise"
  Backends backends;
  std::string cpu_only;  // why there is no CUDA case (empty when backends.cuda)
  std::vector<DType> dtypes;
  // Dtypes only the CPU kernels take (the CUDA ones refuse them: integer
  // elementwise ops); checked on the CPU only, forward only.
  std::vector<DType> cpu_only_dtypes;
  std::vector<OpInput> inputs;

  // The op on `in` (all on one device, dtypes as the case says); its outputs,
  // on that device.
  std::function<absl::StatusOr<Tensors>(const Tensors& in)> forward;
  // The outputs in double from the inputs' stored values.
  std::function<Values(const Values& in)> reference;
  // The bound of forward output `output` for inputs of `dtype`.
  std::function<Bound(DType dtype, int output)> forward_bound;
  // Optional: an absolute error the CUDA path adds for these input values on top
  // of forward_bound, from a rounding it makes inside the op that the CPU kernel
  // does not (cuDNN rounds a bf16 convolution to bf16 before it adds the bias,
  // so where the two cancel the error follows the terms, not the result).
  std::function<double(const Values& in, DType dtype, int output)> cuda_extra_atol;

  // The first `graded_outputs` outputs carry a gradient (the rest are saved
  // statistics: mean, rstd, logsumexp).
  int graded_outputs = 1;
  // Given the inputs, the forward's outputs and one cotangent per graded
  // output, the gradient of every differentiable input (in `inputs` order,
  // skipping the others).
  std::function<absl::StatusOr<Tensors>(const Tensors& in, const Tensors& out,
                                        const Tensors& dout)>
      backward;
  std::function<Bound(DType dtype, int input)> backward_bound;
  std::string no_backward;  // why there is no backward kernel (when backward is empty)
};

// An uninitialised tensor of `shape` and `dtype` on `like`'s allocator (its
// device): the outputs of a descriptor's forward and backward.
absl::StatusOr<Tensor> EmptyOn(const Tensor& like, absl::Span<const int64_t> shape, DType dtype);

// The unit roundoff of `dtype` (2^-p for p significand bits): one rounding
// into it moves a value by at most this much, relative. Descriptors use it for
// results that reach the op rounded (a saved output read by the backward).
double UnitRoundoff(DType dtype);

// What a descriptor lacks of the rules above, one sentence each; empty when complete.
std::vector<std::string> MissingParts(const OpDescriptor& op);

// Adds `ops` to the registry; called at static initialisation, as above.
// Returns true (for the initialiser).
bool RegisterOps(std::vector<OpDescriptor> ops);

// Every registered op, in registration order.
const std::vector<OpDescriptor>& RegisteredOps();

}  // namespace zeroshard::ops

#endif  // ZEROSHARD_KERNELS_OP_REGISTRY_H_
