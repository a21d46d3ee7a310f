#include "zeroshard/kernels/silu_gate.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/silu_gate.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/silu_gate_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

// A float tensor of `like`'s shape (`like` itself is checked by the caller).
absl::Status CheckOperand(absl::string_view op, absl::string_view name, const Tensor& t,
                          const Tensor& like, absl::string_view like_name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.shape() != like.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()),
                                                   ", expected ", ShapeToString(like.shape()),
                                                   " (the shape of ", like_name, ")"));
  }
  return absl::OkStatus();
}

// An output: no broadcast dimension, and no overlap with any of `others`
// except an input that is exactly the same view.
absl::Status CheckOutput(absl::string_view op, absl::string_view name, const Tensor& out,
                         std::initializer_list<const Tensor*> inputs,
                         std::initializer_list<const Tensor*> outputs) {
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the output ", name, " ", out.DebugString(),
                                                   " has a broadcast (stride 0) dimension"));
  }
  for (const Tensor* in : inputs) {
    if (MemoryOverlaps(out, *in) && !IsSameView(out, *in)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": the output ", name, " ", out.DebugString(),
                                                     " partially overlaps the input ", in->DebugString(),
                                                     " (only exact in-place is allowed)"));
    }
  }
  for (const Tensor* o : outputs) {
    if (o->defined() && MemoryOverlaps(out, *o)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": the outputs ", name, " ", out.DebugString(),
                                                     " and ", o->DebugString(), " overlap"));
    }
  }
  return absl::OkStatus();
}

// The inputs in one storage type: their own when they share one, else f32 copies.
absl::StatusOr<std::vector<Tensor>> CommonDType(std::vector<Tensor> in) {
  bool same = true;
  for (const Tensor& t : in) same = same && t.dtype() == in[0].dtype();
  if (same) return in;
  for (Tensor& t : in) {
    if (t.dtype() != DType::kF32) {
      ZS_ASSIGN_OR_RETURN(t, t.To(DType::kF32));
    }
  }
  return in;
}

// The CUDA kernels take contiguous operands: an input is copied when strided,
// an output written through a contiguous buffer when strided (Finish copies it in).
absl::StatusOr<Tensor> CudaInput(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return t.Contiguous();
}

struct CudaOutput {
  Tensor out, work;
  static absl::StatusOr<CudaOutput> For(absl::string_view op, const Tensor& t) {
    CudaOutput o{t, t};
    if (t.defined() && !t.is_contiguous()) {
      ZS_ASSIGN_OR_RETURN(o.work, cuda::DeviceEmpty(op, t, t.shape(), t.dtype()));
    }
    return o;
  }
  void* data() const { return work.defined() ? work.raw_data() : nullptr; }
  absl::Status Finish() const {
    if (!out.defined() || IsSameView(out, work)) return absl::OkStatus();
    return out.CopyFrom(work);
  }
};

}  // namespace

absl::Status SiluGateForward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  constexpr absl::string_view op = "SiluGateForward";
  if (!gate.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": gate is undefined"));
  ZS_RETURN_IF_ERROR(CheckOperand(op, "gate", gate, gate, "gate"));
  ZS_RETURN_IF_ERROR(CheckOperand(op, "up", up, gate, "gate"));
  ZS_RETURN_IF_ERROR(CheckOperand(op, "out", out, gate, "gate"));
  ZS_RETURN_IF_ERROR(CheckOutput(op, "out", out, {&gate, &up}, {}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&gate, &up, &out}, op));
  if (out.numel() == 0) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(std::vector<Tensor> in, CommonDType({gate, up}));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(op, out, {&gate, &up}, 6);
    case DeviceType::kCpu:
      cpu::SiluGateForward(in[0], in[1], out);
      return absl::OkStatus();
    case DeviceType::kCuda: {
      ZS_ASSIGN_OR_RETURN(Tensor g, CudaInput(in[0]));
      ZS_ASSIGN_OR_RETURN(Tensor u, CudaInput(in[1]));
      ZS_ASSIGN_OR_RETURN(CudaOutput o, CudaOutput::For(op, out));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchSiluGateForward(static_cast<int>(g.dtype()), static_cast<int>(out.dtype()),
                                      g.raw_data(), u.raw_data(), o.data(), out.numel(), cuda::kOpStream),
          cuda::LaunchWhat(op, out)));
      return o.Finish();
    }
  }
  return NoDeviceKernel(op, out.device());
}

absl::Status SiluGateBackward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup) {
  constexpr absl::string_view op = "SiluGateBackward";
  if (!gate.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": gate is undefined"));
  ZS_RETURN_IF_ERROR(CheckOperand(op, "gate", gate, gate, "gate"));
  ZS_RETURN_IF_ERROR(CheckOperand(op, "up", up, gate, "gate"));
  ZS_RETURN_IF_ERROR(CheckOperand(op, "dy", dy, gate, "gate"));
  if (dgate.defined()) {
    ZS_RETURN_IF_ERROR(CheckOperand(op, "dgate", dgate, gate, "gate"));
    ZS_RETURN_IF_ERROR(CheckOutput(op, "dgate", dgate, {&dy, &gate, &up}, {&dup}));
  }
  if (dup.defined()) {
    ZS_RETURN_IF_ERROR(CheckOperand(op, "dup", dup, gate, "gate"));
    ZS_RETURN_IF_ERROR(CheckOutput(op, "dup", dup, {&dy, &gate, &up}, {}));
  }
  if (dgate.defined() && dup.defined() && dgate.dtype() != dup.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dgate is ", DTypeName(dgate.dtype()), " and dup ",
                                                   DTypeName(dup.dtype()), ", expected one dtype"));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dy, &gate, &up, &dgate, &dup}, op));
  if (gate.numel() == 0 || (!dgate.defined() && !dup.defined())) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(std::vector<Tensor> in, CommonDType({dy, gate, up}));
  switch (gate.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dgate, &dup}, {&dy, &gate, &up}, 10);
    case DeviceType::kCpu:
      cpu::SiluGateBackward(in[0], in[1], in[2], dgate, dup);
      return absl::OkStatus();
    case DeviceType::kCuda: {
      ZS_ASSIGN_OR_RETURN(Tensor d, CudaInput(in[0]));
      ZS_ASSIGN_OR_RETURN(Tensor g, CudaInput(in[1]));
      ZS_ASSIGN_OR_RETURN(Tensor u, CudaInput(in[2]));
      ZS_ASSIGN_OR_RETURN(CudaOutput dg, CudaOutput::For(op, dgate));
      ZS_ASSIGN_OR_RETURN(CudaOutput du, CudaOutput::For(op, dup));
      const DType out = dgate.defined() ? dgate.dtype() : dup.dtype();
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchSiluGateBackward(static_cast<int>(g.dtype()), static_cast<int>(out), d.raw_data(),
                                       g.raw_data(), u.raw_data(), dg.data(), du.data(), gate.numel(),
                                       cuda::kOpStream),
          cuda::LaunchWhat(op, gate)));
      ZS_RETURN_IF_ERROR(dg.Finish());
      return du.Finish();
    }
  }
  return NoDeviceKernel(op, gate.device());
}

}  // namespace zeroshard
