#include "zeroshard/kernels/attention.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/attention.h"
#include "zeroshard/kernels/cuda/attention_cudnn.h"
#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/attention_select.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/math/attention_math.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

struct Named {
  const Tensor* t;
  const char* name;
};

// Checks q and the tensors shaped like it ([B, H, T, D]), k and the tensors
// shaped like it ([B, Hkv, T, D], Note [Grouped-query attention]), one float
// dtype throughout, and returns the dims.
absl::StatusOr<cpu::AttentionDims> CheckHeads(absl::string_view op, std::initializer_list<Named> q_like,
                                              std::initializer_list<Named> k_like,
                                              const AttentionOptions& options) {
  const Named& q = *q_like.begin();
  const Named& k = *k_like.begin();
  for (std::initializer_list<Named> ts : {q_like, k_like}) {
    for (const Named& n : ts) {
      if (!n.t->defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined ", n.name));
    }
  }
  if (q.t->dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", q.name, " has shape ",
                                                   ShapeToString(q.t->shape()),
                                                   ", expected 4 dims [B, H, T, D]"));
  }
  if (!IsFloatingPoint(q.t->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", q.name, " has dtype ",
                                                   DTypeName(q.t->dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (k.t->dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", k.name, " has shape ",
                                                   ShapeToString(k.t->shape()),
                                                   ", expected 4 dims [B, Hkv, T, D]"));
  }
  const int64_t heads = q.t->size(1), kv_heads = k.t->size(1);
  // k: q's B, T and D, with its own number of heads.
  Shape k_want = q.t->shape();
  k_want[1] = kv_heads;
  if (k.t->shape() != k_want) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", k.name, " has shape ", ShapeToString(k.t->shape()), ", expected ",
        ShapeToString(k_want),
        kv_heads == heads ? std::string(" (the shape of q)")
                          : absl::StrCat(" (the shape of q with ", kv_heads, " heads)")));
  }
  if (kv_heads == 0 ? heads != 0 : heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", k.name, " has ", kv_heads, " heads, which does not divide ", q.name, "'s ", heads,
        " (grouped-query attention: each k/v head serves H / Hkv query heads)"));
  }
  for (const Named* first : {&q, &k}) {
    for (const Named& n : first == &q ? q_like : k_like) {
      if (n.t->shape() != first->t->shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": ", n.name, " has shape ", ShapeToString(n.t->shape()), ", expected ",
            ShapeToString(first->t->shape()), " (the shape of ", first->name, ")"));
      }
      if (n.t->dtype() != q.t->dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": ", n.name, " has dtype ", DTypeName(n.t->dtype()), ", expected ",
            DTypeName(q.t->dtype()), " (the dtype of ", q.name, ")"));
      }
    }
  }
  cpu::AttentionDims dims;
  dims.batch = q.t->size(0);
  dims.heads = heads;
  dims.kv_heads = kv_heads;
  dims.seq = q.t->size(2);
  dims.head_dim = q.t->size(3);
  dims.causal = options.causal;
  if (dims.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": head dimension D is 0 in ",
                                                   ShapeToString(q.t->shape()),
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

// ---------------------------------------------------------------- CUDA

cuda::AttentionOperand Operand(const Tensor& t) {
  cuda::AttentionOperand o;
  o.data = t.raw_data();
  for (int64_t d = 0; d < t.dim() && d < 4; ++d) o.stride[d] = t.stride(d);
  return o;
}

cuda::AttentionLaunchDims LaunchDims(const cpu::AttentionDims& d) {
  return {.batch = d.batch, .heads = d.heads, .kv_heads = d.kv_heads, .seq = d.seq,
          .head_dim = d.head_dim, .scale = d.scale, .causal = d.causal};
}

// What the choice of implementation depends on, over every [B, H, T, D] operand.
cuda::AttentionCall DescribeCall(const cpu::AttentionDims& d, std::initializer_list<const Tensor*> heads) {
  cuda::AttentionCall c;
  c.dtype = (*heads.begin())->dtype();
  c.head_dim = d.head_dim;
  c.seq = d.seq;
  c.heads = d.heads;
  c.kv_heads = d.kv_heads;
  const int64_t item = static_cast<int64_t>(DTypeSize(c.dtype));
  for (const Tensor* t : heads) {
    if (d.head_dim > 1 && t->stride(3) != 1) c.unit_stride_d = false;
    if (reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) c.aligned = false;
    for (int64_t i = 0; i < 3; ++i) {
      if (t->size(i) > 1 && (t->stride(i) * item) % 16 != 0) c.aligned = false;
    }
  }
  return c;
}

// Runs cuDNN when the options and the call allow. Returns nullopt when our
// kernel should run instead (kAuto and cuDNN does not take the call).
template <typename CudnnFn>
std::optional<absl::Status> MaybeCudnn(absl::string_view op, const AttentionOptions& options,
                                       const cuda::AttentionCall& call, Device device,
                                       const CudnnFn& run_cudnn) {
  if (options.impl == AttentionImpl::kOwn || options.impl == AttentionImpl::kTensorCore) return std::nullopt;
  const std::string refusal =
      cuda::CudnnAttentionRefusal(call, cuda::CudnnAttentionInfoFor(device.index));
  if (refusal.empty()) {
    absl::Status s = run_cudnn();
    // kAuto: an engine-less call (Unimplemented) falls back; real errors do not.
    if (s.ok() || options.impl == AttentionImpl::kCudnn || !absl::IsUnimplemented(s)) return s;
    return std::nullopt;
  }
  if (options.impl == AttentionImpl::kCudnn) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", device.ToString(),
                                                 ": cuDNN's fused attention was asked for but does "
                                                 "not take this call: ", refusal));
  }
  return std::nullopt;
}

absl::Status OwnKernelTakes(absl::string_view op, const cuda::AttentionCall& call, Device device) {
  const std::string refusal = cuda::OwnAttentionRefusal(call);
  if (refusal.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(op, " on ", device.ToString(), ": ", refusal));
}

std::atomic<int64_t> g_cudnn_runs{0}, g_tensor_core_runs{0}, g_scalar_runs{0};

// Whether our tensor-core kernel runs the call: kTensorCore asks for it (an
// error when it does not take the call), kAuto takes it where it can, kOwn
// never (the scalar reference).
absl::StatusOr<bool> UseTensorCore(absl::string_view op, const AttentionOptions& options,
                                   const cuda::AttentionCall& call, Device device) {
  if (options.impl == AttentionImpl::kOwn) return false;
  const std::string refusal = cuda::TensorCoreAttentionRefusal(call);
  if (refusal.empty()) return true;
  if (options.impl == AttentionImpl::kTensorCore) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", device.ToString(),
                                                 ": our tensor-core attention was asked for but does not take "
                                                 "this call: ", refusal));
  }
  return false;
}

// Counts the kernel that ran when the launch succeeded.
absl::Status Counted(absl::Status s, std::atomic<int64_t>& counter) {
  if (s.ok()) counter.fetch_add(1, std::memory_order_relaxed);
  return s;
}

// The options with kAuto replaced by the process-wide default.
absl::StatusOr<AttentionOptions> Resolved(const AttentionOptions& options) {
  AttentionOptions o = options;
  if (o.impl == AttentionImpl::kAuto) {
    ZS_ASSIGN_OR_RETURN(o.impl, DefaultAttentionImpl());
  }
  return o;
}

absl::Status ForwardCuda(const cpu::AttentionDims& dims, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& out, const Tensor& lse,
                         const AttentionOptions& asked) {
  constexpr const char* kOp = "AttentionForward";
  ZS_ASSIGN_OR_RETURN(const AttentionOptions options, Resolved(asked));
  const cuda::AttentionLaunchDims ld = LaunchDims(dims);
  const cuda::AttentionCall call = DescribeCall(dims, {&q, &k, &v, &out});
  if (std::optional<absl::Status> s = MaybeCudnn(kOp, options, call, out.device(), [&] {
        return cuda::CudnnAttentionForward(ld, q, k, v, out, lse, cuda::kOpStream);
      })) {
    return Counted(*s, g_cudnn_runs);
  }
  ZS_ASSIGN_OR_RETURN(const bool tensor_core, UseTensorCore(kOp, options, call, out.device()));
  if (tensor_core) {
    return Counted(cuda::CudaLaunchStatus(cuda::LaunchAttentionForwardTc(
                                              static_cast<int>(q.dtype()), ld, Operand(q), Operand(k), Operand(v),
                                              Operand(out), Operand(lse), cuda::kOpStream),
                                          cuda::LaunchWhat(kOp, out)),
                   g_tensor_core_runs);
  }
  ZS_RETURN_IF_ERROR(OwnKernelTakes(kOp, call, out.device()));
  return Counted(cuda::CudaLaunchStatus(
                     cuda::LaunchAttentionForward(static_cast<int>(q.dtype()), ld, Operand(q), Operand(k),
                                                  Operand(v), Operand(out), Operand(lse), cuda::kOpStream),
                     cuda::LaunchWhat(kOp, out)),
                 g_scalar_runs);
}

absl::Status BackwardCuda(const cpu::AttentionDims& dims, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const AttentionOptions& asked) {
  constexpr const char* kOp = "AttentionBackward";
  ZS_ASSIGN_OR_RETURN(const AttentionOptions options, Resolved(asked));
  const cuda::AttentionLaunchDims ld = LaunchDims(dims);
  const cuda::AttentionCall call =
      DescribeCall(dims, {&q, &k, &v, &out, &dout, &dq, &dk, &dv});
  if (std::optional<absl::Status> s = MaybeCudnn(kOp, options, call, dq.device(), [&] {
        return cuda::CudnnAttentionBackward(ld, dout, q, k, v, out, lse, dq, dk, dv,
                                            cuda::kOpStream);
      })) {
    return Counted(*s, g_cudnn_runs);
  }
  ZS_ASSIGN_OR_RETURN(const bool tensor_core, UseTensorCore(kOp, options, call, dq.device()));
  if (!tensor_core) ZS_RETURN_IF_ERROR(OwnKernelTakes(kOp, call, dq.device()));
  // delta_i = dO_i . O_i, f32 scratch freed on return (see kernels/cuda/op_util.h).
  ZS_ASSIGN_OR_RETURN(Tensor delta, cuda::DeviceEmpty(kOp, q, {dims.batch * dims.heads * dims.seq},
                                                      DType::kF32));
  const int code = static_cast<int>(q.dtype());
  float* delta_data = static_cast<float*>(delta.raw_data());
  if (tensor_core) {
    return Counted(cuda::CudaLaunchStatus(
                       cuda::LaunchAttentionBackwardTc(code, ld, Operand(dout), Operand(q), Operand(k),
                                                       Operand(v), Operand(out), Operand(lse), Operand(dq),
                                                       Operand(dk), Operand(dv), delta_data, cuda::kOpStream),
                       cuda::LaunchWhat(kOp, dq)),
                   g_tensor_core_runs);
  }
  return Counted(cuda::CudaLaunchStatus(
                     cuda::LaunchAttentionBackward(code, ld, Operand(dout), Operand(q), Operand(k), Operand(v),
                                                   Operand(out), Operand(lse), Operand(dq), Operand(dk),
                                                   Operand(dv), delta_data, cuda::kOpStream),
                     cuda::LaunchWhat(kOp, dq)),
                 g_scalar_runs);
}

}  // namespace

namespace {

// On a virtual device: `products` T x T x D matrix products per (batch,
// head), charged as GEMMs in `dtype` (the fused kernels run them on the
// tensor cores), the causal mask halving the rows each computes. The
// simulator costs them by the op's name at the profile's attention
// efficiency for the head dimension, gemm_k here, and the sequence length,
// gemm_n: the key length T, whole under the causal mask, where gemm_m holds
// the halved rows (Note [Attention efficiency] in sim/cost_model.h).
absl::Status ChargeAttention(const char* op, Device device, const cpu::AttentionDims& dims, DType dtype,
                             int products, double bytes) {
  const int64_t rows = dims.causal ? (dims.seq + 1) / 2 : dims.seq;
  return ChargeGemm(op, device, products * dims.batch * dims.heads, rows, dims.seq, dims.head_dim, dtype, bytes);
}

}  // namespace

absl::string_view AttentionImplName(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::kAuto: return "auto";
    case AttentionImpl::kOwn: return "own";
    case AttentionImpl::kCudnn: return "cudnn";
    case AttentionImpl::kTensorCore: return "tensor_core";
  }
  return "?";
}

std::optional<AttentionImpl> ParseAttentionImpl(absl::string_view name) {
  for (AttentionImpl i : {AttentionImpl::kAuto, AttentionImpl::kOwn, AttentionImpl::kCudnn, AttentionImpl::kTensorCore}) {
    if (name == AttentionImplName(i)) return i;
  }
  return std::nullopt;
}

namespace {

// The default's slot: -1 not read yet, -2 an unknown environment value, else an AttentionImpl.
std::atomic<int>& DefaultImplSlot() {
  static std::atomic<int> slot(-1);
  return slot;
}

}  // namespace

absl::StatusOr<AttentionImpl> DefaultAttentionImpl() {
  int v = DefaultImplSlot().load(std::memory_order_relaxed);
  if (v == -1) {
    const char* env = std::getenv("ZEROSHARD_ATTENTION");
    int read = static_cast<int>(AttentionImpl::kAuto);
    if (env != nullptr) {
      const std::optional<AttentionImpl> parsed = ParseAttentionImpl(env);
      read = parsed.has_value() ? static_cast<int>(*parsed) : -2;
    }
    DefaultImplSlot().compare_exchange_strong(v, read);
    v = DefaultImplSlot().load(std::memory_order_relaxed);
  }
  if (v == -2) {
    const char* env = std::getenv("ZEROSHARD_ATTENTION");
    return absl::InvalidArgumentError(absl::StrCat("ZEROSHARD_ATTENTION is \"", env == nullptr ? "" : env,
                                                   "\", expected auto, own, cudnn or tensor_core"));
  }
  return static_cast<AttentionImpl>(v);
}

void SetDefaultAttentionImpl(AttentionImpl impl) {
  DefaultImplSlot().store(static_cast<int>(impl), std::memory_order_relaxed);
}

AttentionKernelCounts AttentionKernelCountsNow() {
  return {.cudnn = g_cudnn_runs.load(std::memory_order_relaxed),
          .tensor_core = g_tensor_core_runs.load(std::memory_order_relaxed),
          .scalar = g_scalar_runs.load(std::memory_order_relaxed)};
}

absl::Status AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const AttentionOptions& options) {
  constexpr const char* kOp = "AttentionForward";
  ZS_ASSIGN_OR_RETURN(cpu::AttentionDims dims,
                      CheckHeads(kOp, {{&q, "q"}, {&out, "out"}}, {{&k, "k"}, {&v, "v"}}, options));
  ZS_RETURN_IF_ERROR(CheckLse(kOp, lse, dims));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&q, &k, &v, &out, &lse}, kOp));
  ZS_RETURN_IF_ERROR(CheckOutputs(kOp, {{&out, "out"}, {&lse, "lse"}},
                                  {{&q, "q"}, {&k, "k"}, {&v, "v"}}));
  if (MemoryOverlaps(out, lse)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": out and lse overlap"));
  }
  switch (out.device().type) {
    case DeviceType::kVirtual:  // QK^T and PV, two T x T x D products per head (tensor cores in q's dtype)
      return ChargeAttention(kOp, out.device(), dims, q.dtype(), 2,
                             TrafficBytes(q) + TrafficBytes(k) + TrafficBytes(v) + TrafficBytes(out) + TrafficBytes(lse));
    case DeviceType::kCpu:
      if (q.numel() > 0) cpu::AttentionForward(dims, q, k, v, out, lse);
      return absl::OkStatus();
    case DeviceType::kCuda:
      if (q.numel() == 0) return absl::OkStatus();
      return ForwardCuda(dims, q, k, v, out, lse, options);
  }
  return NoDeviceKernel(kOp, out.device());
}

absl::Status AttentionBackward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const AttentionOptions& options) {
  constexpr const char* kOp = "AttentionBackward";
  ZS_ASSIGN_OR_RETURN(cpu::AttentionDims dims,
                      CheckHeads(kOp, {{&q, "q"}, {&out, "out"}, {&dout, "dout"}, {&dq, "dq"}},
                                 {{&k, "k"}, {&v, "v"}, {&dk, "dk"}, {&dv, "dv"}}, options));
  ZS_RETURN_IF_ERROR(CheckLse(kOp, lse, dims));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}, kOp));
  ZS_RETURN_IF_ERROR(CheckOutputs(
      kOp, {{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}},
      {{&dout, "dout"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}}));
  switch (dq.device().type) {
    case DeviceType::kVirtual:  // five T x T x D products per head (FlashAttention's backward: 2.5x the forward)
      return ChargeAttention(kOp, dq.device(), dims, q.dtype(), 5,
                             TrafficBytes(dout) + TrafficBytes(q) + TrafficBytes(k) + TrafficBytes(v) +
                                 TrafficBytes(out) + TrafficBytes(lse) + TrafficBytes(dq) + TrafficBytes(dk) +
                                 TrafficBytes(dv));
    case DeviceType::kCpu:
      if (q.numel() > 0) cpu::AttentionBackward(dims, dout, q, k, v, out, lse, dq, dk, dv);
      return absl::OkStatus();
    case DeviceType::kCuda:
      if (q.numel() == 0) return absl::OkStatus();
      return BackwardCuda(dims, dout, q, k, v, out, lse, dq, dk, dv, options);
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
  if (!k.defined()) return absl::InvalidArgumentError("AttentionBackward: undefined k");
  // dk and dv like k: [B, Hkv, T, D] (Note [Grouped-query attention]).
  AttentionGrads g;
  ZS_ASSIGN_OR_RETURN(g.dq, Tensor::Empty(q.shape(), q.dtype(), q.allocator()));
  ZS_ASSIGN_OR_RETURN(g.dk, Tensor::Empty(k.shape(), q.dtype(), q.allocator()));
  ZS_ASSIGN_OR_RETURN(g.dv, Tensor::Empty(k.shape(), q.dtype(), q.allocator()));
  ZS_RETURN_IF_ERROR(AttentionBackward(dout, q, k, v, out, lse, g.dq, g.dk, g.dv, options));
  return g;
}

}  // namespace zeroshard
