#include "zeroshard/kernels/op_registry.h"

#include <utility>

namespace zeroshard::ops {

namespace {

std::vector<OpDescriptor>& Registry() {
  static auto* ops = new std::vector<OpDescriptor>();
  return *ops;
}

}  // namespace

absl::StatusOr<Tensor> EmptyOn(const Tensor& like, absl::Span<const int64_t> shape, DType dtype) {
  return Tensor::Empty(shape, dtype, like.allocator());
}

double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 1.0 / 256;   // 8 significand bits
    case DType::kF16: return 1.0 / 2048;   // 11
    case DType::kF32: return 1.0 / 16777216;  // 24
    default: return 0;                      // integers: exact
  }
}

std::vector<std::string> MissingParts(const OpDescriptor& op) {
  std::vector<std::string> missing;
  if (op.name.empty()) missing.push_back("no name");
  if (op.family.empty()) missing.push_back("no family (its zs_op in kernels/BUILD.bazel)");
  if (op.dtypes.empty()) missing.push_back("no dtypes");
  if (!op.forward) missing.push_back("no forward");
  if (!op.reference) missing.push_back("no double-precision reference");
  if (!op.forward_bound) missing.push_back("no forward bound");
  if (!op.backends.cuda && op.cpu_only.empty()) {
    missing.push_back("no CUDA case and no reason it is CPU only (cpu_only)");
  }
  if (op.backends.cuda && !op.cpu_only.empty()) {
    missing.push_back("a CUDA case and a CPU-only mark at once");
  }
  if (!op.backward && op.no_backward.empty()) {
    missing.push_back("no backward (gradient check) and no reason it has none (no_backward)");
  }
  if (op.backward && !op.backward_bound) missing.push_back("a backward without a bound");
  if (op.backward && op.graded_outputs < 1) missing.push_back("a backward with no graded output");
  return missing;
}

bool RegisterOps(std::vector<OpDescriptor> ops) {
  for (OpDescriptor& op : ops) Registry().push_back(std::move(op));
  return true;
}

const std::vector<OpDescriptor>& RegisteredOps() { return Registry(); }

}  // namespace zeroshard::ops
