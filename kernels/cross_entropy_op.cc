// Fused cross-entropy in the op registry (kernels/op_registry.h).
#include <algorithm>
#include <cmath>

#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kRows = 6, kVocab = 37;

// losses and lse per row: lse = log(sum(exp(row))), loss = lse - row[target].
Values Reference(const Values& in) {
  const std::vector<double>&x = in[0], &t = in[1];
  std::vector<double> losses(kRows), lse(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t v = 0; v < kVocab; ++v) m = std::max(m, x[r * kVocab + v]);
    for (int64_t v = 0; v < kVocab; ++v) s += std::exp(x[r * kVocab + v] - m);
    lse[r] = m + std::log(s);
    losses[r] = lse[r] - x[r * kVocab + static_cast<int64_t>(t[r])];
  }
  return {losses, lse};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "cross_entropy",
    .family = "cross_entropy",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "logits", .shape = {kRows, kVocab}, .lo = -4, .hi = 4},
               {.name = "targets", .shape = {kRows}, .lo = 0, .hi = kVocab, .dtype = DType::kI64,
                .differentiable = false}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(CrossEntropyResult r, CrossEntropy(in[0], in[1]));
      return Tensors{r.losses, r.lse};
    },
    .reference = Reference,
    .forward_bound = [](DType, int) {
      return Bound{1e-5, 1e-6, "fp32 online max/sum over V: tests/kernels/cross_entropy_test.cc"};
    },
    .graded_outputs = 1,  // lse is saved for the backward
    .backward = [](const Tensors& in, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dlogits, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(CrossEntropyBackward(in[0], in[1], out[1], dout[0], dlogits));
      return Tensors{dlogits};
    },
    .backward_bound = [](DType, int) {
      // tests/kernels/cross_entropy_test.cc: the probabilities come from the
      // saved fp32 lse (ulp < 1e-6 for |lse| < 16), which shows in p - 1 at
      // the target, times |dloss| <= 1; plus 2^-24, the spacing of f16
      // subnormals (tiny gradients).
      return Bound{1e-6 + 0x1p-24, 1e-5, "softmax from the saved fp32 lse"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
