// Embedding (a gather of weight rows) in the op registry (kernels/op_registry.h).
#include "zeroshard/kernels/embedding.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

// 9 ids into 5 rows: some rows are named twice (the backward sums them),
// some never (their gradient is 0).
constexpr int64_t kVocab = 5, kCols = 33, kIds = 9;

Values Reference(const Values& in) {
  const std::vector<double>&w = in[0], &ids = in[1];
  std::vector<double> out(kIds * kCols);
  for (int64_t p = 0; p < kIds; ++p) {
    for (int64_t c = 0; c < kCols; ++c) out[p * kCols + c] = w[static_cast<int64_t>(ids[p]) * kCols + c];
  }
  return {out};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "embedding",
    .family = "embedding",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "weight", .shape = {kVocab, kCols}},
               {.name = "ids", .shape = {kIds}, .lo = 0, .hi = kVocab, .dtype = DType::kI64,
                .differentiable = false}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor out, Embedding(in[0], in[1]));
      return Tensors{out};
    },
    .reference = Reference,
    .forward_bound = [](DType, int) { return Bound{0, 0, "a copy of weight rows: exact"}; },
    .backward = [](const Tensors& in, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor dw, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(EmbeddingBackward(dout[0], in[1], dw, GradMode::kOverwrite));
      return Tensors{dw};
    },
    .backward_bound = [](DType, int) {
      // tests/kernels/embedding_test.cc: an fp32 sum of at most kIds rows of
      // |dout| <= 1, one rounding each: 1e-6 * (count + 1).
      return Bound{1e-6 * (kIds + 1), 1e-6, "fp32 sums of dout rows per id"};
    },
}});

}  // namespace
}  // namespace zeroshard::ops
