// Flat-buffer pack and unpack in the op registry (kernels/op_registry.h).
#include <vector>

#include "zeroshard/kernels/flat_buffer.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

// Two pieces with a gap of one element after each (alignment padding).
const std::vector<int64_t> kOffsets = {0, 16};
constexpr int64_t kFlat = 24;

// flat: the pieces at their offsets, zeros in the gaps; then the pieces again.
Values Reference(const Values& in) {
  std::vector<double> flat(kFlat, 0.0);
  for (size_t p = 0; p < in.size(); ++p) {
    for (size_t i = 0; i < in[p].size(); ++i) flat[kOffsets[p] + i] = in[p][i];
  }
  return {flat, in[0], in[1]};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "pack_unpack_flat",
    .family = "flat_buffer",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "w", .shape = {3, 5}}, {.name = "b", .shape = {7}}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor flat, Tensor::Zeros({kFlat}, in[0].dtype(), in[0].allocator()));
      ZS_RETURN_IF_ERROR(PackFlat(in, kOffsets, flat));
      ZS_ASSIGN_OR_RETURN(Tensor w, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_ASSIGN_OR_RETURN(Tensor b, EmptyOn(in[0], in[1].shape(), in[1].dtype()));
      ZS_RETURN_IF_ERROR(UnpackFlat(flat, kOffsets, {w, b}));
      return Tensors{flat, w, b};
    },
    .reference = Reference,
    .forward_bound = [](DType, int) { return Bound{0, 0, "copies: exact"}; },
    .no_backward = "data movement of FSDP's flat buffers, never differentiated",
}});

}  // namespace
}  // namespace zeroshard::ops
