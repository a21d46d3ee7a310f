#include "zeroshard/kernels/reduce.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/reduce.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/reduce_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

const char* KindName(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return "Sum";
    case ReduceKind::kMean: return "Mean";
    case ReduceKind::kMax: return "Max";
  }
  return "?";
}

struct AxisPlan {
  int64_t dim = 0;
  int64_t outer = 1, r = 1, inner = 1;
  Shape reduced;       // dim removed
  Shape reduced_keep;  // dim kept as 1
};

absl::StatusOr<AxisPlan> PlanAxis(const Tensor& x, int64_t dim, absl::string_view op) {
  if (!x.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined input"));
  AxisPlan p;
  ZS_ASSIGN_OR_RETURN(p.dim, x.CheckDim(dim, op));
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < p.dim) p.outer *= x.size(d);
    if (d > p.dim) p.inner *= x.size(d);
    if (d != p.dim) p.reduced.push_back(x.size(d));
    p.reduced_keep.push_back(d == p.dim ? 1 : x.size(d));
  }
  p.r = x.size(p.dim);
  if (p.r == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": cannot reduce dimension ", p.dim,
                                                   " of size 0 (shape ",
                                                   ShapeToString(x.shape()), ")"));
  }
  return p;
}

absl::Status CheckReducedOutput(const AxisPlan& p, const Tensor& out, absl::string_view op) {
  if (!out.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined output"));
  if (out.shape() != p.reduced && out.shape() != p.reduced_keep) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": output has shape ",
                                                   ShapeToString(out.shape()), ", expected ",
                                                   ShapeToString(p.reduced), " or ",
                                                   ShapeToString(p.reduced_keep)));
  }
  return absl::OkStatus();
}

// Runs `fn(x_contiguous, out_contiguous)` and copies the result into out if
// out is not contiguous itself.
template <typename Fn>
absl::Status WithContiguous(const Tensor& x, const Tensor& out, DType acc_dtype, Fn&& fn) {
  ZS_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  if (out.is_contiguous() && out.dtype() == acc_dtype && !MemoryOverlaps(out, xc)) {
    fn(xc, out);
    return absl::OkStatus();
  }
  ZS_ASSIGN_OR_RETURN(Tensor tmp, Tensor::Empty(out.shape(), acc_dtype, DefaultCpuAllocator()));
  fn(xc, tmp);
  return out.CopyFrom(tmp);
}

// SumAll / SumOfSquares of a CUDA tensor: the two-pass kernel of
// kernels/cuda/reduce.cu, its double result copied back.
absl::StatusOr<double> SumAllCuda(absl::string_view op, const Tensor& x, bool square) {
  if (!IsFloatingPoint(x.dtype())) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", x.device().ToString(), ": dtype ",
                                                 DTypeName(x.dtype()),
                                                 ", the CUDA kernel takes f32, bf16 or f16"));
  }
  ZS_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  const int64_t n = xc.numel();
  const int64_t partials = cuda::SumAllPartials(n);
  const int64_t result_at = (partials + 1) / 2 * 2;  // float index of the 8-byte-aligned double
  ZS_ASSIGN_OR_RETURN(Tensor scratch, cuda::DeviceEmpty(op, x, {result_at + 2}, DType::kF32));
  float* const base = static_cast<float*>(scratch.raw_data());
  double* const result = reinterpret_cast<double*>(base + result_at);
  ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
      cuda::LaunchSumAll(static_cast<int>(xc.dtype()), xc.raw_data(), n, square, base, result,
                         cuda::kOpStream),
      cuda::LaunchWhat(op, x)));
  double host = 0;
  ZS_RETURN_IF_ERROR(scratch.allocator()->CopyToHost(&host, result, sizeof(double)));
  return host;
}

// The CUDA path's shape on a virtual device: one reduction kernel, then the
// host reads the 8-byte result (a synchronising copy). The value reads 0.
absl::StatusOr<double> SumAllVirtual(absl::string_view name, const Tensor& x) {
  ZS_RETURN_IF_ERROR(ChargeVirtual(x.device(), OpCost{.op = name, .flops = 2.0 * static_cast<double>(x.numel()),
                                                      .bytes = TrafficBytes(x), .dtype = x.dtype()}));
  ZS_RETURN_IF_ERROR(ChargeVirtualCopy(x.device(), VirtualDevice::kCompute, sizeof(double), /*async=*/false));
  return 0.0;
}

}  // namespace

absl::Status Reduce(ReduceKind kind, const Tensor& x, int64_t dim, const Tensor& out) {
  const char* name = KindName(kind);
  ZS_ASSIGN_OR_RETURN(AxisPlan p, PlanAxis(x, dim, name));
  ZS_RETURN_IF_ERROR(CheckReducedOutput(p, out, name));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out}, name));
  const bool x_int = !IsFloatingPoint(x.dtype());
  if (kind == ReduceKind::kMean && x_int) {
    return absl::InvalidArgumentError(absl::StrCat("Mean: expected a float tensor, got ",
                                                   DTypeName(x.dtype())));
  }
  if (x.device().is_cuda()) {
    ZS_RETURN_IF_ERROR(CheckCurrentDevice(x, name));
    if (x_int) {
      return absl::UnimplementedError(absl::StrCat(name, " on ", x.device().ToString(),
                                                   ": integer dtype ", DTypeName(x.dtype()),
                                                   "; the CUDA kernel reduces f32, bf16 or f16"));
    }
    if (!IsFloatingPoint(out.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": output dtype ",
                                                     DTypeName(out.dtype()),
                                                     " for a float input; expected a float dtype"));
    }
    ZS_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
    Tensor work = out;
    if (!out.is_contiguous() || MemoryOverlaps(out, xc)) {
      ZS_ASSIGN_OR_RETURN(work, cuda::DeviceEmpty(name, x, out.shape(), out.dtype()));
    }
    ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
        cuda::LaunchReduceAxis(static_cast<int>(kind), static_cast<int>(xc.dtype()),
                               static_cast<int>(work.dtype()), xc.raw_data(), work.raw_data(),
                               p.outer, p.r, p.inner, cuda::kOpStream),
        cuda::LaunchWhat(name, x)));
    return IsSameView(work, out) ? absl::OkStatus() : out.CopyFrom(work);
  }
  if (x.device().is_virtual()) return ChargeMemoryBound(name, {&out}, {&x}, 1.0 * p.r);
  if (!x.device().is_cpu()) return NoDeviceKernel(name, x.device());
  // Integers reduce into i64 (sum) or their own type (max); floats into out's
  // dtype directly when it is a float type.
  DType acc = out.dtype();
  if (x_int) acc = kind == ReduceKind::kSum ? DType::kI64 : x.dtype();
  if (!x_int && !IsFloatingPoint(out.dtype())) acc = DType::kF32;
  return WithContiguous(x, out, acc, [&](const Tensor& xc, const Tensor& oc) {
    cpu::ReduceAxis(kind, xc, p.outer, p.r, p.inner, oc);
  });
}

absl::StatusOr<Tensor> Reduce(ReduceKind kind, const Tensor& x, int64_t dim, bool keepdim) {
  ZS_ASSIGN_OR_RETURN(AxisPlan p, PlanAxis(x, dim, KindName(kind)));
  const DType dtype = IsFloatingPoint(x.dtype()) ? x.dtype()
                                                 : (kind == ReduceKind::kSum ? DType::kI64 : x.dtype());
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(keepdim ? p.reduced_keep : p.reduced, dtype,
                                                x.allocator()));
  ZS_RETURN_IF_ERROR(Reduce(kind, x, dim, out));
  return out;
}

absl::Status ArgMax(const Tensor& x, int64_t dim, const Tensor& out) {
  ZS_ASSIGN_OR_RETURN(AxisPlan p, PlanAxis(x, dim, "ArgMax"));
  ZS_RETURN_IF_ERROR(CheckReducedOutput(p, out, "ArgMax"));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &out}, "ArgMax"));
  if (out.dtype() != DType::kI64 && out.dtype() != DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat("ArgMax: output dtype ", DTypeName(out.dtype()),
                                                   ", expected i64 or i32"));
  }
  if (x.device().is_cuda()) {
    // No CUDA kernel (evaluation only, never in a training step): through the host.
    ZS_ASSIGN_OR_RETURN(Tensor host_x, x.To(DefaultCpuAllocator()));
    ZS_ASSIGN_OR_RETURN(Tensor host_out, Tensor::Empty(out.shape(), out.dtype(), DefaultCpuAllocator()));
    ZS_RETURN_IF_ERROR(ArgMax(host_x, dim, host_out));
    return out.CopyFrom(host_out);
  }
  if (x.device().is_virtual()) return ChargeMemoryBound("ArgMax", {&out}, {&x}, 1.0 * p.r);
  if (!x.device().is_cpu()) return NoDeviceKernel("ArgMax", x.device());
  return WithContiguous(x, out, out.dtype(), [&](const Tensor& xc, const Tensor& oc) {
    cpu::ArgMaxAxis(xc, p.outer, p.r, p.inner, oc);
  });
}

absl::StatusOr<Tensor> ArgMax(const Tensor& x, int64_t dim, bool keepdim) {
  ZS_ASSIGN_OR_RETURN(AxisPlan p, PlanAxis(x, dim, "ArgMax"));
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(keepdim ? p.reduced_keep : p.reduced, DType::kI64,
                                                x.allocator()));
  ZS_RETURN_IF_ERROR(ArgMax(x, dim, out));
  return out;
}

absl::Status SumToShape(const Tensor& x, const Tensor& out) {
  if (!x.defined() || !out.defined()) return absl::InvalidArgumentError("SumToShape: undefined tensor");
  auto b = BroadcastShapes(out.shape(), x.shape());
  if (!b.ok() || *b != x.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("SumToShape: ", ShapeToString(x.shape()),
                                                   " is not a broadcast of the output shape ",
                                                   ShapeToString(out.shape())));
  }
  // Sum away leading dims, then each dim where out has size 1, one axis at a time
  // (each pass shrinks the data, so the total work is about one read of x).
  Tensor cur = x;
  const int64_t lead = x.dim() - out.dim();
  for (int64_t i = 0; i < lead; ++i) {
    ZS_ASSIGN_OR_RETURN(cur, Reduce(ReduceKind::kSum, cur, 0, false));
  }
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) == 1 && cur.size(d) != 1) {
      ZS_ASSIGN_OR_RETURN(cur, Reduce(ReduceKind::kSum, cur, d, true));
    }
  }
  return out.CopyFrom(cur);
}

absl::StatusOr<double> SumAll(const Tensor& x) {
  if (!x.defined()) return absl::InvalidArgumentError("SumAll: undefined input");
  if (x.device().is_cuda()) {
    ZS_RETURN_IF_ERROR(CheckCurrentDevice(x, "SumAll"));
    return SumAllCuda("SumAll", x, /*square=*/false);
  }
  if (x.device().is_virtual()) return SumAllVirtual("SumAll", x);
  if (!x.device().is_cpu()) return NoDeviceKernel("SumAll", x.device());
  ZS_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  return cpu::SumAll(xc, false);
}

absl::StatusOr<double> SumOfSquares(const Tensor& x) {
  if (!x.defined()) return absl::InvalidArgumentError("SumOfSquares: undefined input");
  if (x.device().is_cuda()) {
    ZS_RETURN_IF_ERROR(CheckCurrentDevice(x, "SumOfSquares"));
    return SumAllCuda("SumOfSquares", x, /*square=*/true);
  }
  if (x.device().is_virtual()) return SumAllVirtual("SumOfSquares", x);
  if (!x.device().is_cpu()) return NoDeviceKernel("SumOfSquares", x.device());
  ZS_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  return cpu::SumAll(xc, true);
}

}  // namespace zeroshard
