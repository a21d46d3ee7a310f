#include "zeroshard/kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/gemm.h"
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

std::atomic<bool> allow_tf32{false};

// The shape bookkeeping of one MatMul call.
struct MatMulPlan {
  int64_t batch = 1;  // number of 2-D products
  int64_t m = 0, k = 0, n = 0;
  bool b_shared = false;  // b is one matrix for every batch
  Shape out_shape;
};

absl::StatusOr<MatMulPlan> Plan(const Tensor& a, const Tensor& b, const MatMulOptions& o) {
  if (!a.defined() || !b.defined()) return absl::InvalidArgumentError("MatMul: undefined input");
  if (a.dim() < 2 || b.dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: expected inputs with at least 2 dims, got ",
                                                   ShapeToString(a.shape()), " and ",
                                                   ShapeToString(b.shape())));
  }
  MatMulPlan p;
  p.m = o.transpose_a ? a.size(-1) : a.size(-2);
  p.k = o.transpose_a ? a.size(-2) : a.size(-1);
  const int64_t kb = o.transpose_b ? b.size(-1) : b.size(-2);
  p.n = o.transpose_b ? b.size(-2) : b.size(-1);
  if (kb != p.k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatMul: inner dimensions differ: op(a) is [", p.m, ", ", p.k, "] (a ",
        ShapeToString(a.shape()), o.transpose_a ? ", transposed" : "", ") and op(b) is [", kb,
        ", ", p.n, "] (b ", ShapeToString(b.shape()), o.transpose_b ? ", transposed" : "",
        "); expected ", p.k, " == ", kb));
  }
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2);
  const Shape b_batch(b.shape().begin(), b.shape().end() - 2);
  p.b_shared = b.dim() == 2;
  if (!p.b_shared && a_batch != b_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatMul: batch dimensions differ: a ", ShapeToString(a.shape()), ", b ",
        ShapeToString(b.shape()), " (expected equal leading dimensions, or a 2-D b)"));
  }
  p.batch = NumElements(a_batch);
  p.out_shape = a_batch;
  p.out_shape.push_back(p.m);
  p.out_shape.push_back(p.n);
  return p;
}

// A float tensor each of whose 2-D slices is row- or column-major: the input
// itself when it already is (and is f32), else a contiguous f32 copy.
absl::StatusOr<Tensor> AsGemmOperand(const Tensor& t) {
  const bool f32 = t.dtype() == DType::kF32;
  const bool unit = t.stride(-1) == 1 || t.stride(-2) == 1 || t.size(-1) == 1 || t.size(-2) == 1;
  if (f32 && unit) return t;
  if (f32) return t.Clone();
  return t.To(DType::kF32);
}

cpu::ConstMatrixRef MatrixAt(const Tensor& t, int64_t batch_index, bool transpose) {
  // Offset of batch `batch_index` in the leading dims (row-major batch order).
  int64_t offset = 0;
  int64_t rem = batch_index;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    offset += (rem % t.size(d)) * t.stride(d);
    rem /= t.size(d);
  }
  const float* base = static_cast<const float*>(t.raw_data()) + offset;
  cpu::ConstMatrixRef m{base, t.size(-2), t.size(-1), t.stride(-2), t.stride(-1)};
  if (m.rows == 1) m.row_stride = m.cols;  // any stride describes a single row
  if (m.cols == 1) m.col_stride = 1;
  if (transpose) {
    std::swap(m.rows, m.cols);
    std::swap(m.row_stride, m.col_stride);
  }
  return m;
}

void MatMulCpu(const MatMulPlan& p, const Tensor& a, const Tensor& b, const Tensor& out,
               const MatMulOptions& o) {
  auto one = [&](int64_t i) {
    const cpu::ConstMatrixRef am = MatrixAt(a, i, o.transpose_a);
    const cpu::ConstMatrixRef bm = MatrixAt(b, p.b_shared ? 0 : i, o.transpose_b);
    const cpu::ConstMatrixRef cm_const = MatrixAt(out, i, false);
    const cpu::MatrixRef cm{const_cast<float*>(cm_const.data), cm_const.rows, cm_const.cols,
                            cm_const.row_stride, cm_const.col_stride};
    cpu::Gemm(am, bm, cm, o.alpha, o.beta);
  };
  // Many small products: one per thread (each GEMM single-threaded). Few or
  // large ones: one after the other, each using every thread.
  const int64_t flops_each = 2 * p.m * p.n * p.k;
  if (p.batch >= 2 * omp_get_max_threads() && flops_each < (int64_t{1} << 24)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < p.batch; ++i) one(i);
  }
}

// ---------------------------------------------------------------- CUDA

// One operand of the cuBLASLt GEMM: every 2-D slice stored row-major with
// `ld` elements between rows (a column-major slice is its transpose stored
// row-major: `transposed` flips), batches `batch_stride` elements apart.
struct CudaOperand {
  Tensor t;
  bool transposed = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// The stride between consecutive batches of `t`'s leading dims (row-major
// batch order), when one stride describes them all.
std::optional<int64_t> UniformBatchStride(const Tensor& t) {
  int64_t stride = 0, inner = -1;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (inner < 0) {
      stride = t.stride(d);
    } else if (t.stride(d) != t.stride(inner) * t.size(inner)) {
      return std::nullopt;
    }
    inner = d;
  }
  return stride;
}

std::optional<CudaOperand> DescribeOperand(const Tensor& t) {
  const std::optional<int64_t> bs = UniformBatchStride(t);
  if (!bs) return std::nullopt;
  const int64_t rows = t.size(-2), cols = t.size(-1);
  CudaOperand o{t, false, 0, *bs};
  if (rows <= 1 || t.stride(-1) == 1 || cols == 1) {
    if (rows <= 1) {
      o.ld = std::max<int64_t>(cols, 1);
    } else if (t.stride(-2) >= cols) {
      o.ld = t.stride(-2);
    } else {
      return std::nullopt;
    }
    return o;
  }
  if (t.stride(-2) == 1 && t.stride(-1) >= rows) {  // column-major: t^T stored row-major
    o.transposed = true;
    o.ld = t.stride(-1);
    return o;
  }
  return std::nullopt;
}

absl::StatusOr<CudaOperand> PrepareOperand(const Tensor& t, DType dtype) {
  Tensor x = t;
  if (x.dtype() != dtype) {
    ZS_ASSIGN_OR_RETURN(x, x.Contiguous());
    ZS_ASSIGN_OR_RETURN(x, cuda::ContiguousOnDevice("MatMul", x, dtype));
  }
  if (std::optional<CudaOperand> o = DescribeOperand(x)) return *o;
  ZS_ASSIGN_OR_RETURN(Tensor c, x.Contiguous());
  return *DescribeOperand(c);
}

absl::Status MatMulCuda(const MatMulPlan& p, const Tensor& a, const Tensor& b, const Tensor& out,
                        const MatMulOptions& o) {
  const DType in = a.dtype() == b.dtype() ? a.dtype() : DType::kF32;
  ZS_ASSIGN_OR_RETURN(CudaOperand oa, PrepareOperand(a, in));
  ZS_ASSIGN_OR_RETURN(CudaOperand ob, PrepareOperand(b, in));
  // cuBLASLt writes f32 from f32 inputs, and f32 or the input dtype from 16-bit ones.
  const bool out_type_ok = out.dtype() == DType::kF32 || (in != DType::kF32 && out.dtype() == in);
  std::optional<CudaOperand> oc = out_type_ok ? DescribeOperand(out) : std::nullopt;
  if (oc && oc->transposed) oc.reset();  // C must be row-major
  Tensor work = out;
  if (!oc) {
    // Through a contiguous f32 buffer (holding out's values when beta needs them).
    ZS_ASSIGN_OR_RETURN(work, cuda::DeviceEmpty("MatMul", out, out.shape(), DType::kF32));
    if (o.beta != 0.0f) ZS_RETURN_IF_ERROR(cuda::CastInto("MatMul", out, work));
    oc = DescribeOperand(work);
  }
  ZS_ASSIGN_OR_RETURN(cuda::CublasLtGemm* gemm, cuda::DefaultCublasLtGemm(out.device().index));
  Tensor bias;  // in the dtype C is written in
  if (o.bias.defined()) {
    ZS_ASSIGN_OR_RETURN(bias, cuda::ContiguousOnDevice("MatMul", o.bias, work.dtype()));
  }
  cuda::GemmCall call;
  call.shape.m = p.m;
  call.shape.n = p.n;
  call.shape.k = p.k;
  call.shape.transpose_a = o.transpose_a != oa.transposed;
  call.shape.transpose_b = o.transpose_b != ob.transposed;
  call.shape.lda = oa.ld;
  call.shape.ldb = ob.ld;
  call.shape.ldc = oc->ld;
  call.shape.batch = p.batch;
  call.shape.stride_a = oa.batch_stride;
  call.shape.stride_b = p.b_shared ? 0 : ob.batch_stride;
  call.shape.stride_c = oc->batch_stride;
  call.ab_dtype = in;
  call.c_dtype = work.dtype();
  call.a = oa.t.raw_data();
  call.b = ob.t.raw_data();
  call.c = work.raw_data();
  call.alpha = o.alpha;
  call.beta = o.beta;
  call.allow_tf32 = in == DType::kF32 && MatMulAllowTf32();
  if (bias.defined()) {
    call.bias = bias.raw_data();
    call.bias_dtype = bias.dtype();
  }
  // The bias gradient in C's dtype, contiguous (Note [Bias gradient in the GEMM]).
  Tensor bias_grad;
  if (o.bias_grad.defined()) {
    bias_grad = o.bias_grad;
    if (bias_grad.dtype() != work.dtype() || !bias_grad.is_contiguous()) {
      ZS_ASSIGN_OR_RETURN(bias_grad,
                          cuda::DeviceEmpty("MatMul", o.bias_grad, o.bias_grad.shape(), work.dtype()));
    }
    call.bias_grad = bias_grad.raw_data();
    call.bias_dtype = bias_grad.dtype();
  }
  // Note [GELU in the GEMM]: GELU without its input kept is cuBLASLt's plain
  // GELU epilogue; with it, or GELU's backward, the aux matrix must be laid
  // out as out (written directly, row-major, ld a multiple of 8), one GEMM.
  call.gelu = o.gelu;
  const Tensor& aux = o.gelu ? o.pre_gelu : o.dgelu_pre;
  if (aux.defined()) {
    const std::optional<CudaOperand> oaux = DescribeOperand(aux);
    if (!IsSameView(work, out) || aux.dtype() != work.dtype() || !oaux || oaux->transposed ||
        oaux->ld != oc->ld || oaux->batch_stride != oc->batch_stride || oaux->ld % 8 != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "MatMul: the GELU aux epilogue needs the GELU input laid out as out (", DTypeName(work.dtype()),
          ", row-major, ld a multiple of 8), found ", aux.DebugString(), " for ", out.DebugString()));
    }
    if (o.gelu) {
      call.gelu_aux = aux.raw_data();
    } else {
      call.dgelu_aux = aux.raw_data();
    }
    call.aux_ld = oaux->ld;
  }
  cuda::FoldSharedBatch(call.shape);
  if (aux.defined() && call.shape.batch != 1) {
    return absl::UnimplementedError(
        absl::StrCat("MatMul: the GELU aux epilogue takes one GEMM, found a batch of ", call.shape.batch));
  }
  if (call.shape.batch > 1 && call.shape.stride_b == 0) {
    // A shared B that could not be folded: one GEMM per batch.
    const cuda::RowMajorGemm whole = call.shape;
    call.shape.batch = 1;
    for (int64_t i = 0; i < whole.batch; ++i) {
      cuda::GemmCall one = call;
      one.a = static_cast<const char*>(call.a) + i * whole.stride_a * oa.t.itemsize();
      one.c = static_cast<char*>(call.c) + i * whole.stride_c * work.itemsize();
      ZS_RETURN_IF_ERROR(gemm->Run(one, cuda::kOpStream));
    }
  } else {
    absl::Status ran = gemm->Run(call, cuda::kOpStream);
    if (call.bias_grad != nullptr && (ran.ok() || absl::IsUnimplemented(ran))) {
      const bool fused = ran.ok();
      cuda::CountBiasGradEpilogue(fused);
      if (!fused) {  // no algorithm for the epilogue: the plain GEMM, then our reduction
        call.bias_grad = nullptr;
        call.bias_dtype.reset();
        ran = gemm->Run(call, cuda::kOpStream);
        if (ran.ok()) ran = Sum(a, o.transpose_a ? -2 : -1, bias_grad);
      }
    }
    ZS_RETURN_IF_ERROR(ran);
  }
  if (bias_grad.defined() && !IsSameView(bias_grad, o.bias_grad)) {
    ZS_RETURN_IF_ERROR(o.bias_grad.CopyFrom(bias_grad));
  }
  if (IsSameView(work, out)) return absl::OkStatus();
  return cuda::CastInto("MatMul", work, out);
}

// MatMulOptions' GELU fields against the call (Note [GELU in the GEMM]).
absl::Status CheckGeluOptions(const Tensor& a, const Tensor& b, const Tensor& out, const MatMulOptions& o) {
  if (o.pre_gelu.defined() && !o.gelu) {
    return absl::InvalidArgumentError("MatMul: pre_gelu is written only with gelu = true");
  }
  if (o.gelu && o.beta != 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: gelu takes beta 0, got ", o.beta));
  }
  if (o.gelu && o.bias_grad.defined()) {
    return absl::InvalidArgumentError("MatMul: gelu takes no bias_grad (a forward's epilogue, not a weight gradient's)");
  }
  if (o.dgelu_pre.defined() && (o.gelu || o.bias.defined() || o.bias_grad.defined() || o.beta != 0.0f)) {
    return absl::InvalidArgumentError("MatMul: dgelu_pre takes no gelu, bias, bias_grad or beta");
  }
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&o.pre_gelu, "pre_gelu"},
                                std::pair<const Tensor*, const char*>{&o.dgelu_pre, "dgelu_pre"}}) {
    if (!t->defined()) continue;
    if (t->shape() != out.shape() || !IsFloatingPoint(t->dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul: ", name, " is ", DTypeName(t->dtype()), " ",
                                                     ShapeToString(t->shape()), ", expected a float ",
                                                     ShapeToString(out.shape()), " (out's shape)"));
    }
    ZS_RETURN_IF_ERROR(CheckSameDevice({t, &out}, "MatMul"));
    if (MemoryOverlaps(*t, out) || MemoryOverlaps(*t, a) || MemoryOverlaps(*t, b) ||
        (o.bias.defined() && MemoryOverlaps(*t, o.bias))) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul: ", name, " overlaps an operand or the output"));
    }
    if (t == &o.pre_gelu && t->has_internal_overlap()) {
      return absl::InvalidArgumentError("MatMul: pre_gelu has a broadcast (stride 0) dimension");
    }
  }
  return absl::OkStatus();
}

// GELU or its backward after a plain GEMM: the CPU's path, and CUDA's where
// cuBLASLt cannot (Note [GELU in the GEMM]). The bits of MatMul followed by
// Gelu / GeluBackward.
absl::Status GeluAfterGemm(const Tensor& a, const Tensor& b, const Tensor& out, const MatMulOptions& o) {
  const MatMulOptions plain{.transpose_a = o.transpose_a,
                            .transpose_b = o.transpose_b,
                            .alpha = o.alpha,
                            .beta = o.beta,
                            .bias = o.bias,
                            .bias_grad = o.bias_grad};
  if (o.dgelu_pre.defined()) {
    ZS_RETURN_IF_ERROR(MatMul(a, b, out, plain));
    return Binary(BinaryOp::kGeluBackward, o.dgelu_pre, out, out);
  }
  Tensor pre = o.pre_gelu;
  if (!pre.defined()) {
    ZS_ASSIGN_OR_RETURN(pre, Tensor::Empty(out.shape(), out.dtype(), out.allocator()));
  }
  ZS_RETURN_IF_ERROR(MatMul(a, b, pre, plain));
  return Unary(UnaryOp::kGelu, pre, out);
}

}  // namespace

void SetMatMulAllowTf32(bool allow) { allow_tf32 = allow; }
bool MatMulAllowTf32() { return allow_tf32.load(); }

absl::Status MatMul(const Tensor& a, const Tensor& b, const Tensor& out, const MatMulOptions& o) {
  ZS_ASSIGN_OR_RETURN(MatMulPlan p, Plan(a, b, o));
  if (!out.defined()) return absl::InvalidArgumentError("MatMul: undefined output");
  if (out.shape() != p.out_shape) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: output has shape ",
                                                   ShapeToString(out.shape()), ", expected ",
                                                   ShapeToString(p.out_shape)));
  }
  ZS_RETURN_IF_ERROR(CheckSameDevice({&a, &b, &out}, "MatMul"));
  for (const Tensor* t : {&a, &b, &out}) {
    if (!IsFloatingPoint(t->dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul: expected f32, bf16 or f16 tensors, got ",
                                                     DTypeName(t->dtype())));
    }
  }
  if (MemoryOverlaps(out, a) || MemoryOverlaps(out, b)) {
    return absl::InvalidArgumentError("MatMul: the output overlaps an input");
  }
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError("MatMul: the output has a broadcast (stride 0) dimension");
  }
  if (o.bias.defined()) {
    if (o.bias.dim() != 1 || o.bias.size(0) != p.n || !IsFloatingPoint(o.bias.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul: bias is ", DTypeName(o.bias.dtype()),
                                                     " ", ShapeToString(o.bias.shape()),
                                                     ", expected a float [", p.n, "] (N)"));
    }
    ZS_RETURN_IF_ERROR(CheckSameDevice({&o.bias, &out}, "MatMul"));
    if (MemoryOverlaps(out, o.bias)) {
      return absl::InvalidArgumentError("MatMul: the output overlaps the bias");
    }
  }
  if (o.bias_grad.defined()) {
    if (o.bias.defined() || a.dim() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MatMul: bias_grad needs a 2-D a and no bias, got a ", ShapeToString(a.shape()),
          o.bias.defined() ? " with a bias" : ""));
    }
    if (o.bias_grad.dim() != 1 || o.bias_grad.size(0) != p.m || !IsFloatingPoint(o.bias_grad.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MatMul: bias_grad is ", DTypeName(o.bias_grad.dtype()), " ",
          ShapeToString(o.bias_grad.shape()), ", expected a float [", p.m, "] (M)"));
    }
    ZS_RETURN_IF_ERROR(CheckSameDevice({&o.bias_grad, &out}, "MatMul"));
    if (MemoryOverlaps(o.bias_grad, out) || MemoryOverlaps(o.bias_grad, a) ||
        MemoryOverlaps(o.bias_grad, b)) {
      return absl::InvalidArgumentError("MatMul: bias_grad overlaps an operand or the output");
    }
  }
  ZS_RETURN_IF_ERROR(CheckGeluOptions(a, b, out, o));
  if (out.numel() == 0) {
    return o.bias_grad.defined() ? Sum(a, o.transpose_a ? -2 : -1, o.bias_grad) : absl::OkStatus();
  }
  if (out.device().is_virtual()) {  // one (batched) GEMM with the bias (gradient) or GELU in its epilogue
    const DType in = a.dtype() == b.dtype() ? a.dtype() : DType::kF32;
    return ChargeGemm("MatMul", out.device(), p.batch, p.m, p.n, p.k, a.dtype(),
                      TrafficBytes(a) + TrafficBytes(b) + TrafficBytes(out) * (o.beta != 0.0f ? 2 : 1) +
                          TrafficBytes(o.bias) + TrafficBytes(o.bias_grad) + TrafficBytes(o.pre_gelu) +
                          TrafficBytes(o.dgelu_pre),
                      /*tf32=*/in == DType::kF32 && MatMulAllowTf32());
  }
  if (o.gelu || o.dgelu_pre.defined()) {
    if (out.device().is_cuda() && p.k > 0) {
      const absl::Status fused = MatMulCuda(p, a, b, out, o);
      if (!absl::IsUnimplemented(fused)) {
        if (fused.ok()) cuda::CountEpilogue(cuda::FusedEpilogue::kGelu, true);
        return fused;
      }
      cuda::CountEpilogue(cuda::FusedEpilogue::kGelu, false);
    }
    return GeluAfterGemm(a, b, out, o);
  }
  if (!out.device().is_cpu() && !out.device().is_cuda()) return NoDeviceKernel("MatMul", out.device());
  if (p.k == 0) {  // empty sum
    if (o.beta == 0.0f) ZS_RETURN_IF_ERROR(out.Fill(0.0));
    if (o.bias_grad.defined()) ZS_RETURN_IF_ERROR(o.bias_grad.Fill(0.0));
    return o.bias.defined() ? Add(out, o.bias, out) : absl::OkStatus();
  }
  if (out.device().is_cuda()) {
    ZS_RETURN_IF_ERROR(CheckSameDevice({&a, &b, &out}, "MatMul"));
    return MatMulCuda(p, a, b, out, o);
  }
  if (o.bias_grad.defined()) {  // the CPU: Sum over K, then the GEMM
    ZS_RETURN_IF_ERROR(Sum(a, o.transpose_a ? -2 : -1, o.bias_grad));
    MatMulOptions without = o;
    without.bias_grad = Tensor();
    return MatMul(a, b, out, without);
  }
  if (o.bias.defined()) {
    MatMulOptions without_bias = o;
    without_bias.bias = Tensor();
    ZS_RETURN_IF_ERROR(MatMul(a, b, out, without_bias));
    return Add(out, o.bias, out);
  }

  ZS_ASSIGN_OR_RETURN(Tensor ga, AsGemmOperand(a));
  ZS_ASSIGN_OR_RETURN(Tensor gb, AsGemmOperand(b));
  // The output: written directly when it is f32 with a unit stride, else
  // through an f32 buffer (holding out's values when beta needs them).
  const bool direct = out.dtype() == DType::kF32 && (out.stride(-1) == 1 || out.stride(-2) == 1);
  if (direct) {
    MatMulCpu(p, ga, gb, out, o);
    return absl::OkStatus();
  }
  ZS_ASSIGN_OR_RETURN(Tensor acc, o.beta == 0.0f
                                      ? Tensor::Empty(out.shape(), DType::kF32, DefaultCpuAllocator())
                                      : out.To(DType::kF32));
  if (IsSameView(acc, out)) {  // f32 but strided: work on a copy
    ZS_ASSIGN_OR_RETURN(acc, out.Clone());
  }
  MatMulCpu(p, ga, gb, acc, o);
  return out.CopyFrom(acc);
}

absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b, const MatMulOptions& o) {
  ZS_ASSIGN_OR_RETURN(MatMulPlan p, Plan(a, b, o));
  const DType dtype = a.dtype() == b.dtype() ? a.dtype() : DType::kF32;
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(p.out_shape, dtype, a.allocator()));
  MatMulOptions without_beta = o;
  without_beta.beta = 0.0f;
  ZS_RETURN_IF_ERROR(MatMul(a, b, out, without_beta));
  return out;
}

}  // namespace zeroshard
