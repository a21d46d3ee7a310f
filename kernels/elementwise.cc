#include "zeroshard/kernels/elementwise.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/elementwise.h"
#include "zeroshard/kernels/cuda/cast_launch.h"
#include "zeroshard/kernels/cuda/elementwise_launch.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

const char* UnaryOpName(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "Neg";
    case UnaryOp::kExp: return "Exp";
    case UnaryOp::kLog: return "Log";
    case UnaryOp::kTanh: return "Tanh";
    case UnaryOp::kSqrt: return "Sqrt";
    case UnaryOp::kRsqrt: return "Rsqrt";
    case UnaryOp::kRelu: return "Relu";
    case UnaryOp::kGelu: return "Gelu";
    case UnaryOp::kSigmoid: return "Sigmoid";
    case UnaryOp::kAbs: return "Abs";
    case UnaryOp::kSquare: return "Square";
    case UnaryOp::kSilu: return "Silu";
  }
  return "?";
}

const char* BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "Add";
    case BinaryOp::kSub: return "Sub";
    case BinaryOp::kMul: return "Mul";
    case BinaryOp::kDiv: return "Div";
    case BinaryOp::kPow: return "Pow";
    case BinaryOp::kMax: return "Maximum";
    case BinaryOp::kMin: return "Minimum";
    case BinaryOp::kGeluBackward: return "GeluBackward";
    case BinaryOp::kReluBackward: return "ReluBackward";
    case BinaryOp::kSiluBackward: return "SiluBackward";
  }
  return "?";
}

namespace {

// The inputs of one elementwise call, prepared for the device kernels:
// expanded to out's shape and, for mixed float dtypes, widened to f32.
struct Prepared {
  Tensor a;
  Tensor b;
};

absl::Status CheckOutput(absl::string_view op, const Tensor& out,
                         std::initializer_list<const Tensor*> inputs) {
  if (!out.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined output"));
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the output ", out.DebugString(), " has a broadcast (stride 0) dimension"));
  }
  for (const Tensor* in : inputs) {
    if (!in->defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined input"));
    if (MemoryOverlaps(out, *in) && !IsSameView(out, *in)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": the output ", out.DebugString(), " partially overlaps the input ",
          in->DebugString(), " (only exact in-place is allowed)"));
    }
  }
  return absl::OkStatus();
}

// Decides the storage types the kernel runs with and converts inputs as needed.
absl::StatusOr<Prepared> PrepareDTypes(absl::string_view op, bool op_supports_integers,
                                       const Tensor& a, const Tensor* b, const Tensor& out) {
  const bool a_int = !IsFloatingPoint(a.dtype());
  const bool b_int = b != nullptr && !IsFloatingPoint(b->dtype());
  const bool out_int = !IsFloatingPoint(out.dtype());
  Prepared p{a, b != nullptr ? *b : Tensor()};
  if (a_int || b_int || out_int) {
    const bool same = a.dtype() == out.dtype() && (b == nullptr || b->dtype() == out.dtype());
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": integer tensors must all share one dtype: got ", DTypeName(a.dtype()),
          b != nullptr ? absl::StrCat(", ", DTypeName(b->dtype())) : "", " -> ",
          DTypeName(out.dtype()), " (cast first)"));
    }
    if (!op_supports_integers) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": not defined for integer dtype ",
                                                     DTypeName(a.dtype()),
                                                     ", expected f32, bf16 or f16"));
    }
    return p;
  }
  const bool uniform = a.dtype() == out.dtype() && (b == nullptr || b->dtype() == out.dtype());
  if (!uniform) {
    // Mixed float dtypes: compute from f32 inputs, round once into out.
    if (a.dtype() != DType::kF32) {
      ZS_ASSIGN_OR_RETURN(p.a, a.To(DType::kF32));
    }
    if (b != nullptr && b->dtype() != DType::kF32) {
      ZS_ASSIGN_OR_RETURN(p.b, b->To(DType::kF32));
    }
  }
  return p;
}

absl::Status ExpandTo(absl::string_view op, Tensor& t, const Tensor& out, const char* which) {
  if (t.shape() == out.shape()) return absl::OkStatus();
  auto e = t.Expand(out.shape());
  if (!e.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input ", which, " of shape ",
                                                   ShapeToString(t.shape()),
                                                   " does not broadcast to the output shape ",
                                                   ShapeToString(out.shape())));
  }
  t = *std::move(e);
  return absl::OkStatus();
}

DType CommonDType(DType a, DType b) { return a == b ? a : DType::kF32; }

// The CUDA kernels take contiguous float operands of out's exact shape:
// broadcast or strided inputs (already expanded to out's shape) are
// materialised on the device first (Tensor::Contiguous runs the strided-copy
// kernel), and a strided output is computed in a contiguous buffer and copied
// in. `launch(out_contiguous)` enqueues the kernel.
template <typename LaunchFn>
absl::Status RunCuda(absl::string_view op, const Tensor& out, std::initializer_list<Tensor*> inputs,
                     const LaunchFn& launch) {
  if (!IsFloatingPoint(out.dtype())) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", out.device().ToString(),
                                                 ": the CUDA kernel writes float outputs, got ",
                                                 DTypeName(out.dtype())));
  }
  for (Tensor* t : inputs) {
    if (!t->is_contiguous() || t->shape() != out.shape()) {
      ZS_ASSIGN_OR_RETURN(*t, t->Contiguous());
    }
  }
  if (out.is_contiguous()) return launch(out);
  if (out.allocator() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, " on ", out.device().ToString(),
        ": a strided output over external memory (no allocator for the contiguous buffer)"));
  }
  ZS_ASSIGN_OR_RETURN(Tensor work, Tensor::Empty(out.shape(), out.dtype(), out.allocator()));
  ZS_RETURN_IF_ERROR(launch(work));
  return out.CopyFrom(work);
}

std::string LaunchName(absl::string_view op, const Tensor& out) {
  return absl::StrCat(op, " on ", out.device().ToString());
}

}  // namespace

absl::Status Unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const char* name = UnaryOpName(op);
  ZS_RETURN_IF_ERROR(CheckOutput(name, out, {&x}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out}, name));
  ZS_ASSIGN_OR_RETURN(Prepared p,
                      PrepareDTypes(name, UnaryOpSupportsIntegers(op), x, nullptr, out));
  ZS_RETURN_IF_ERROR(ExpandTo(name, p.a, out, "x"));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(name, out, {&p.a}, 1);
    case DeviceType::kCpu: cpu::Unary(op, p.a, out); return absl::OkStatus();
    case DeviceType::kCuda:
      return RunCuda(name, out, {&p.a}, [&](const Tensor& o) {
        return cuda::CudaLaunchStatus(
            cuda::LaunchUnary(static_cast<int>(op), static_cast<int>(p.a.dtype()),
                              static_cast<int>(o.dtype()), p.a.raw_data(), o.raw_data(),
                              o.numel(), nullptr),
            LaunchName(name, o));
      });
  }
  return NoDeviceKernel(name, out.device());
}

absl::Status Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = BinaryOpName(op);
  ZS_RETURN_IF_ERROR(CheckOutput(name, out, {&a, &b}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&a, &b, &out}, name));
  ZS_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.shape(), b.shape()));
  if (shape != out.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": inputs of shapes ", ShapeToString(a.shape()), " and ", ShapeToString(b.shape()),
        " broadcast to ", ShapeToString(shape), " but the output is ",
        ShapeToString(out.shape())));
  }
  // Note [Widening add]: on CUDA, f32 + bf16/f16 into f32 (a gradient
  // accumulated into an f32 .grad: AccumulateGrad's Add(grad, g, grad) under
  // mixed precision) runs as one kernel that widens the 16-bit operand in
  // registers, instead of a cast into a temporary f32 buffer and an add:
  // 10 bytes an element instead of 18, one launch and no allocation. Casting
  // bf16/f16 to f32 is exact and a + b == b + a, so the bits are the same.
  if (op == BinaryOp::kAdd && out.device().type == DeviceType::kCuda && out.dtype() == DType::kF32 &&
      a.shape() == out.shape() && b.shape() == out.shape() && a.is_contiguous() && b.is_contiguous() &&
      out.is_contiguous()) {
    const bool b_narrow = b.dtype() == DType::kBF16 || b.dtype() == DType::kF16;
    const bool a_narrow = a.dtype() == DType::kBF16 || a.dtype() == DType::kF16;
    if ((a.dtype() == DType::kF32 && b_narrow) || (b.dtype() == DType::kF32 && a_narrow)) {
      const Tensor& wide = a.dtype() == DType::kF32 ? a : b;
      const Tensor& narrow = a.dtype() == DType::kF32 ? b : a;
      return cuda::CudaLaunchStatus(
          cuda::LaunchAddWidening(static_cast<int>(narrow.dtype()), static_cast<const float*>(wide.raw_data()),
                                  narrow.raw_data(), static_cast<float*>(out.raw_data()), out.numel(), nullptr),
          LaunchName(name, out));
    }
  }
  ZS_ASSIGN_OR_RETURN(Prepared p, PrepareDTypes(name, BinaryOpSupportsIntegers(op), a, &b, out));
  ZS_RETURN_IF_ERROR(ExpandTo(name, p.a, out, "a"));
  ZS_RETURN_IF_ERROR(ExpandTo(name, p.b, out, "b"));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise(name, out, {&p.a, &p.b}, 1);
    case DeviceType::kCpu: cpu::Binary(op, p.a, p.b, out); return absl::OkStatus();
    case DeviceType::kCuda:
      return RunCuda(name, out, {&p.a, &p.b}, [&](const Tensor& o) {
        return cuda::CudaLaunchStatus(
            cuda::LaunchBinary(static_cast<int>(op), static_cast<int>(p.a.dtype()),
                               static_cast<int>(o.dtype()), p.a.raw_data(), p.b.raw_data(),
                               o.raw_data(), o.numel(), nullptr),
            LaunchName(name, o));
      });
  }
  return NoDeviceKernel(name, out.device());
}

absl::Status Affine(const Tensor& x, double alpha, double beta, const Tensor& out) {
  ZS_RETURN_IF_ERROR(CheckOutput("Affine", out, {&x}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out}, "Affine"));
  ZS_ASSIGN_OR_RETURN(Prepared p, PrepareDTypes("Affine", false, x, nullptr, out));
  ZS_RETURN_IF_ERROR(ExpandTo("Affine", p.a, out, "x"));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise("Affine", out, {&p.a}, 2);
    case DeviceType::kCpu:
      cpu::Affine(p.a, static_cast<float>(alpha), static_cast<float>(beta), out);
      return absl::OkStatus();
    case DeviceType::kCuda:
      return RunCuda("Affine", out, {&p.a}, [&](const Tensor& o) {
        return cuda::CudaLaunchStatus(
            cuda::LaunchAffine(static_cast<int>(p.a.dtype()), static_cast<int>(o.dtype()),
                               p.a.raw_data(), o.raw_data(), static_cast<float>(alpha),
                               static_cast<float>(beta), o.numel(), nullptr),
            LaunchName("Affine", o));
      });
  }
  return NoDeviceKernel("Affine", out.device());
}

absl::Status PowScalar(const Tensor& x, double exponent, const Tensor& out) {
  ZS_RETURN_IF_ERROR(CheckOutput("PowScalar", out, {&x}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out}, "PowScalar"));
  ZS_ASSIGN_OR_RETURN(Prepared p, PrepareDTypes("PowScalar", false, x, nullptr, out));
  ZS_RETURN_IF_ERROR(ExpandTo("PowScalar", p.a, out, "x"));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeElementwise("PowScalar", out, {&p.a}, 4);
    case DeviceType::kCpu: cpu::PowScalar(p.a, static_cast<float>(exponent), out); return absl::OkStatus();
    case DeviceType::kCuda:
      return RunCuda("PowScalar", out, {&p.a}, [&](const Tensor& o) {
        return cuda::CudaLaunchStatus(
            cuda::LaunchPowScalar(static_cast<int>(p.a.dtype()), static_cast<int>(o.dtype()),
                                  p.a.raw_data(), o.raw_data(), static_cast<float>(exponent),
                                  o.numel(), nullptr),
            LaunchName("PowScalar", o));
      });
  }
  return NoDeviceKernel("PowScalar", out.device());
}

absl::Status Cast(const Tensor& x, const Tensor& out) {
  if (!out.defined() || !x.defined()) return absl::InvalidArgumentError("Cast: undefined tensor");
  // Float to float on one CUDA device, both contiguous: the cast kernel (the
  // copy path would go through the host).
  if (out.device().is_cuda() && x.device() == out.device() && x.shape() == out.shape() &&
      x.dtype() != out.dtype() && IsFloatingPoint(x.dtype()) && IsFloatingPoint(out.dtype()) &&
      x.is_contiguous() && out.is_contiguous() && !MemoryOverlaps(x, out)) {
    return cuda::CudaLaunchStatus(
        cuda::LaunchCast(static_cast<int>(x.dtype()), static_cast<int>(out.dtype()), x.raw_data(),
                         out.raw_data(), out.numel(), nullptr),
        LaunchName("Cast", out));
  }
  return out.CopyFrom(x);
}

absl::StatusOr<Tensor> Unary(UnaryOp op, const Tensor& x) {
  if (!x.defined()) return absl::InvalidArgumentError(absl::StrCat(UnaryOpName(op), ": undefined input"));
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::EmptyLike(x));
  ZS_RETURN_IF_ERROR(Unary(op, x, out));
  return out;
}

absl::StatusOr<Tensor> Binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(BinaryOpName(op), ": undefined input"));
  }
  ZS_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.shape(), b.shape()));
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, CommonDType(a.dtype(), b.dtype()), a.allocator()));
  ZS_RETURN_IF_ERROR(Binary(op, a, b, out));
  return out;
}

absl::StatusOr<Tensor> Affine(const Tensor& x, double alpha, double beta) {
  if (!x.defined()) return absl::InvalidArgumentError("Affine: undefined input");
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::EmptyLike(x));
  ZS_RETURN_IF_ERROR(Affine(x, alpha, beta, out));
  return out;
}

}  // namespace zeroshard
