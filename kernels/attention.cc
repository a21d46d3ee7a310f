#include "kernels/attention.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/attention.h"
#include "kernels/device_check.h"
#include "kernels/math/attention_math.h"
#include "runtime/status.h"

namespace zeroshard {

namespace {

struct Named {
  const Tensor* t;
  const char* name;
};

// Checks the [B, H, T, D] tensors against the first one and returns the dims.
absl::StatusOr<cpu::AttentionDims> CheckHeads(absl::string_view op, std::initializer_list<Named> ts,
                                              const AttentionOptions& options) {
  const Named& first = *ts.begin();
  for (const Named& n : ts) {
    if (!n.t->defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined ", n.name));
  }
  if (first.t->dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", first.name, " has shape ",
                                                   ShapeToString(first.t->shape()),
                                                   ", expected 4 dims [B, H, T, D]"));
  }
  if (!IsFloatingPoint(first.t->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", first.name, " has dtype ",
                                                   DTypeName(first.t->dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  for (const Named& n : ts) {
    if (n.t->shape() != first.t->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", n.name, " has shape ", ShapeToString(n.t->shape()), ", expected ",
          ShapeToString(first.t->shape()), " (the shape of ", first.name, ")"));
    }
    if (n.t->dtype() != first.t->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", n.name, " has dtype ", DTypeName(n.t->dtype()), ", expected ",
          DTypeName(first.t->dtype()), " (the dtype of ", first.name, ")"));
    }
  }
  cpu::AttentionDims dims;
  dims.batch = first.t->size(0);
  dims.heads = first.t->size(1);
  dims.seq = first.t->size(2);
  dims.head_dim = first.t->size(3);
  dims.causal = options.causal;
  if (dims.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": head dimension D is 0 in ",
                                                   ShapeToString(first.t->shape()),
                                                   ", expected D >= 1"));
  }
  dims.scale = options.scale.has_value() ? *options.scale : DefaultAttentionScale(dims.head_dim);
  if (!std::isfinite(dims.scale)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": scale must be finite, got ", dims.scale));
  }
  return dims;
}

absl::Status CheckLse(absl::string_view op, const Tensor& lse, const cpu::AttentionDims& dims) {
  if (!lse.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined lse"));
  const Shape want = {dims.batch, dims.heads, dims.seq};
  if (lse.dtype() != DType::kF32 || lse.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": lse is ", DTypeName(lse.dtype()), " ",
                                                   ShapeToString(lse.shape()), ", expected f32 ",
                                                   ShapeToString(want), " [B, H, T]"));
  }
  return absl::OkStatus();
}

// Outputs: no stride-0 dimension, no overlap with any input.
absl::Status CheckOutputs(absl::string_view op, std::initializer_list<Named> outputs,
                          std::initializer_list<Named> inputs) {
  for (const Named& o : outputs) {
    if (o.t->has_internal_overlap()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": output ", o.name, " ",
                                                     o.t->DebugString(),
                                                     " has a broadcast (stride 0) dimension"));
    }
    for (const Named& i : inputs) {
      if (MemoryOverlaps(*o.t, *i.t)) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": output ", o.name, " overlaps input ",
                                                       i.name, " (expected separate memory)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const AttentionOptions& options) {
  constexpr const char* kOp = "AttentionForward";
  ZS_ASSIGN_OR_RETURN(cpu::AttentionDims dims,
                      CheckHeads(kOp, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}, options));
  ZS_RETURN_IF_ERROR(CheckLse(kOp, lse, dims));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&q, &k, &v, &out, &lse}, kOp));
  ZS_RETURN_IF_ERROR(CheckOutputs(kOp, {{&out, "out"}, {&lse, "lse"}},
                                  {{&q, "q"}, {&k, "k"}, {&v, "v"}}));
  if (MemoryOverlaps(out, lse)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": out and lse overlap"));
  }
  switch (out.device().type) {
    case DeviceType::kCpu:
      if (q.numel() > 0) cpu::AttentionForward(dims, q, k, v, out, lse);
      return absl::OkStatus();
    case DeviceType::kCuda: break;
  }
  return NoDeviceKernel(kOp, out.device());
}

absl::Status AttentionBackward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const AttentionOptions& options) {
  constexpr const char* kOp = "AttentionBackward";
  ZS_ASSIGN_OR_RETURN(cpu::AttentionDims dims,
                      CheckHeads(kOp,
                                 {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&dout, "dout"},
                                  {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}},
                                 options));
  ZS_RETURN_IF_ERROR(CheckLse(kOp, lse, dims));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}, kOp));
  ZS_RETURN_IF_ERROR(CheckOutputs(
      kOp, {{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}},
      {{&dout, "dout"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}}));
  switch (dq.device().type) {
    case DeviceType::kCpu:
      if (q.numel() > 0) cpu::AttentionBackward(dims, dout, q, k, v, out, lse, dq, dk, dv);
      return absl::OkStatus();
    case DeviceType::kCuda: break;
  }
  return NoDeviceKernel(kOp, dq.device());
}

absl::StatusOr<AttentionOutputs> AttentionForward(const Tensor& q, const Tensor& k,
                                                  const Tensor& v,
                                                  const AttentionOptions& options) {
  if (!q.defined()) return absl::InvalidArgumentError("AttentionForward: undefined q");
  if (q.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("AttentionForward: q has shape ",
                                                   ShapeToString(q.shape()),
                                                   ", expected 4 dims [B, H, T, D]"));
  }
  AttentionOutputs r;
  ZS_ASSIGN_OR_RETURN(r.out, Tensor::Empty(q.shape(), q.dtype(), q.allocator()));
  ZS_ASSIGN_OR_RETURN(r.lse, Tensor::Empty({q.size(0), q.size(1), q.size(2)}, DType::kF32,
                                           q.allocator()));
  ZS_RETURN_IF_ERROR(AttentionForward(q, k, v, r.out, r.lse, options));
  return r;
}

absl::StatusOr<AttentionGrads> AttentionBackward(const Tensor& dout, const Tensor& q,
                                                 const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse,
                                                 const AttentionOptions& options) {
  if (!q.defined()) return absl::InvalidArgumentError("AttentionBackward: undefined q");
  AttentionGrads g;
  ZS_ASSIGN_OR_RETURN(g.dq, Tensor::Empty(q.shape(), q.dtype(), q.allocator()));
  ZS_ASSIGN_OR_RETURN(g.dk, Tensor::Empty(q.shape(), q.dtype(), q.allocator()));
  ZS_ASSIGN_OR_RETURN(g.dv, Tensor::Empty(q.shape(), q.dtype(), q.allocator()));
  ZS_RETURN_IF_ERROR(AttentionBackward(dout, q, k, v, out, lse, g.dq, g.dk, g.dv, options));
  return g;
}

}  // namespace zeroshard
