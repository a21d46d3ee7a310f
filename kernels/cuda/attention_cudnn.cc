// cuDNN's fused attention (kernels/cuda/attention_cudnn.h). The graphs are the
// ones cuDNN's flash-attention engines match (the composition cuDNN's own
// frontend library lowers its SDPA node to for cuDNN 9.x before the unified
// softmax operation of 9.21); K enters the first matmul as K^T, a stride swap.
//
// Forward, per (b, h), Q, K, V, O [T, D], Stats [T, 1]:
//   S  = Q K^T                          matmul, fp32
//   S  = S * scale                      pointwise MUL (scale by value)
//   S  = row >= col ? S : lowest        causal: GEN_INDEX(2), GEN_INDEX(3), CMP_GE, BINARY_SELECT
//   M  = rowmax(S);  E = exp(S - M);  L = rowsum(E)
//   Stats = M + log(L)                  (non-virtual: our lse)
//   P  = E / L                          (bf16/f16, the matmul's input type)
//   O  = P V                            matmul
// Backward (dQ_accum and softmax_sum live in our workspace; cuDNN >= 9.6
// clears dQ_accum itself):
//   softmax_sum = rowsum(dO * O) * 1
//   S  = Q K^T * scale - Stats, causal mask, P = exp(S)
//   dV = P^T dO                         (P^T: a reshape swapping the last two strides)
//   dS = (dO V^T - softmax_sum) * P * scale
//   dK = dS^T Q;   dQ_accum = dS K;   dQ = identity(dQ_accum)
// Grouped-query attention (K, V, dK, dV with Hkv heads dividing H, Note
// [Grouped-query attention] in kernels/attention.h), as cuDNN's frontend
// lowers it: the matmuls with K^T, V^T and K broadcast kv head h / (H / Hkv)
// to query head h by their dims alone; dV and dK are computed per query head
// into virtual [B, H, T, D] tensors (the input type) and summed over each
// group by a REDUCTION ADD into [B, Hkv, T, D].
#include "zeroshard/kernels/cuda/attention_cudnn.h"
#include "zeroshard/kernels/cuda/attention_cudnn_graph.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/kernels/cuda/cudnn_graph.h"
#include "zeroshard/runtime/cuda/cuda_status.h"
#include "zeroshard/runtime/cuda/library_status.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::cuda {

namespace {

// Unique ids of the tensors bound at execution.
enum Uid : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kStats = 5,
  kScale = 6,
  kLowest = 7,
  kDO = 8,
  kDQ = 9,
  kDK = 10,
  kDV = 11,
  kOne = 12,
  kSoftmaxSum = 13,
  kDqAccum = 14,
};

cudnnDataType_t CudnnType(DType d) {
  return d == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

CudnnDims Dims4(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }
CudnnDims Strides4(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }
// The last two dims swapped: K [B, H, T, D] seen as K^T [B, H, D, T].
CudnnDims Swap23(CudnnDims a) {
  std::swap(a[2], a[3]);
  return a;
}
// lse [B, H, T] as cuDNN's stats [B, H, T, 1].
CudnnDims StatsDims(const Tensor& lse) { return {lse.size(0), lse.size(1), lse.size(2), 1}; }
CudnnDims StatsStrides(const Tensor& lse) { return {lse.stride(0), lse.stride(1), lse.stride(2), 1}; }

// ---------------------------------------------------------------- handles

struct DeviceHandle {
  std::mutex mu;  // one stream binding + execution at a time
  cudnnHandle_t handle = nullptr;
  // Not OK when cuDNN could not make a handle on this device (a driver or
  // library mismatch; the CPU simulator): every call says so, as Unimplemented,
  // so kAuto runs our kernel and kCudnn reports why.
  absl::Status unavailable;
};

absl::StatusOr<DeviceHandle*> HandleFor(int device) {
  static std::mutex mu;
  static auto* handles = new std::map<int, std::unique_ptr<DeviceHandle>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*handles)[device];
  if (slot == nullptr) {
    auto h = std::make_unique<DeviceHandle>();
    ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    if (const cudnnStatus_t s = cudnnCreate(&h->handle); s != CUDNN_STATUS_SUCCESS) {
      h->handle = nullptr;
      h->unavailable = absl::UnimplementedError(absl::StrCat(
          "cuDNN cannot create a handle on cuda:", device, ": ", cudnnGetErrorString(s),
          " (cuDNN status ", static_cast<int>(s), ")"));
    }
    slot = std::move(h);
  }
  if (!slot->unavailable.ok()) return slot->unavailable;
  return slot.get();
}

}  // namespace

// ---------------------------------------------------------------- graphs

namespace {

// S masked to `lowest` above the diagonal (row < col).
absl::StatusOr<cudnnBackendDescriptor_t> CausalMask(CudnnGraph& g, cudnnBackendDescriptor_t s,
                                                    const CudnnDims& dims,
                                                    cudnnBackendDescriptor_t lowest) {
  ZS_ASSIGN_OR_RETURN(auto row, g.Virtual(dims, CUDNN_DATA_INT32));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_INT32, 2));
  ZS_ASSIGN_OR_RETURN(auto col, g.Virtual(dims, CUDNN_DATA_INT32));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_INT32, 3));
  ZS_ASSIGN_OR_RETURN(auto keep, g.Virtual(dims, CUDNN_DATA_BOOLEAN));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN));
  ZS_ASSIGN_OR_RETURN(auto masked, g.Virtual(dims));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, lowest, keep, masked));
  return masked;
}

}  // namespace

absl::Status BuildCudnnAttentionForwardGraph(CudnnGraph& g, const AttentionLaunchDims& d,
                                             const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& lse) {
  const cudnnDataType_t io = CudnnType(q.dtype());
  const CudnnDims scores{d.batch, d.heads, d.seq, d.seq};
  const CudnnDims rows{d.batch, d.heads, d.seq, 1};
  ZS_ASSIGN_OR_RETURN(auto tq, g.Tensor(kQ, io, Dims4(q), Strides4(q)));
  ZS_ASSIGN_OR_RETURN(auto tkt, g.Tensor(kK, io, Swap23(Dims4(k)), Swap23(Strides4(k))));
  ZS_ASSIGN_OR_RETURN(auto tv, g.Tensor(kV, io, Dims4(v), Strides4(v)));
  ZS_ASSIGN_OR_RETURN(auto to, g.Tensor(kO, io, Dims4(out), Strides4(out)));
  ZS_ASSIGN_OR_RETURN(auto tstats, g.Tensor(kStats, CUDNN_DATA_FLOAT, StatsDims(lse), StatsStrides(lse)));
  ZS_ASSIGN_OR_RETURN(auto tscale, g.Scalar(kScale));

  ZS_ASSIGN_OR_RETURN(auto s, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Matmul(tq, tkt, s));
  ZS_ASSIGN_OR_RETURN(auto scaled, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_MUL, s, tscale, nullptr, scaled));
  auto last = scaled;
  if (d.causal) {
    ZS_ASSIGN_OR_RETURN(auto lowest, g.Scalar(kLowest));
    ZS_ASSIGN_OR_RETURN(last, CausalMask(g, last, scores, lowest));
  }
  // Softmax with stats.
  ZS_ASSIGN_OR_RETURN(auto m, g.Virtual(rows));
  ZS_RETURN_IF_ERROR(g.Reduction(CUDNN_REDUCE_TENSOR_MAX, last, m));
  ZS_ASSIGN_OR_RETURN(auto sub, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_SUB, last, m, nullptr, sub));
  ZS_ASSIGN_OR_RETURN(auto e, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, nullptr, e));
  ZS_ASSIGN_OR_RETURN(auto l, g.Virtual(rows));
  ZS_RETURN_IF_ERROR(g.Reduction(CUDNN_REDUCE_TENSOR_ADD, e, l));
  ZS_ASSIGN_OR_RETURN(auto log_l, g.Virtual(rows));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_LOG, l, nullptr, nullptr, log_l));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_ADD, m, log_l, nullptr, tstats));
  ZS_ASSIGN_OR_RETURN(auto p, g.Virtual(scores, io));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_DIV, e, l, nullptr, p));
  return g.Matmul(p, tv, to);
}

absl::Status BuildCudnnAttentionBackwardGraph(CudnnGraph& g, const AttentionLaunchDims& d,
                                              const Tensor& dout, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& out, const Tensor& lse,
                                              const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const cudnnDataType_t io = CudnnType(q.dtype());
  const int64_t B = d.batch, H = d.heads, T = d.seq, D = d.head_dim;
  const CudnnDims scores{B, H, T, T};
  const CudnnDims scores_t_strides{H * T * T, T * T, 1, T};  // S^T as a view of S
  const CudnnDims rows{B, H, T, 1};
  ZS_ASSIGN_OR_RETURN(auto tq, g.Tensor(kQ, io, Dims4(q), Strides4(q)));
  ZS_ASSIGN_OR_RETURN(auto tkt, g.Tensor(kK, io, Swap23(Dims4(k)), Swap23(Strides4(k))));
  ZS_ASSIGN_OR_RETURN(auto tvt, g.Tensor(kV, io, Swap23(Dims4(v)), Swap23(Strides4(v))));
  ZS_ASSIGN_OR_RETURN(auto to, g.Tensor(kO, io, Dims4(out), Strides4(out)));
  ZS_ASSIGN_OR_RETURN(auto tdo, g.Tensor(kDO, io, Dims4(dout), Strides4(dout)));
  ZS_ASSIGN_OR_RETURN(auto tstats, g.Tensor(kStats, CUDNN_DATA_FLOAT, StatsDims(lse), StatsStrides(lse)));
  ZS_ASSIGN_OR_RETURN(auto tdq, g.Tensor(kDQ, io, Dims4(dq), Strides4(dq)));
  ZS_ASSIGN_OR_RETURN(auto tdk, g.Tensor(kDK, io, Dims4(dk), Strides4(dk)));
  ZS_ASSIGN_OR_RETURN(auto tdv, g.Tensor(kDV, io, Dims4(dv), Strides4(dv)));
  ZS_ASSIGN_OR_RETURN(auto tscale, g.Scalar(kScale));
  ZS_ASSIGN_OR_RETURN(auto tone, g.Scalar(kOne));
  ZS_ASSIGN_OR_RETURN(auto tsum, g.Tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rows, PackedStrides(rows)));
  const CudnnDims heads{B, H, T, D};
  ZS_ASSIGN_OR_RETURN(auto tacc, g.Tensor(kDqAccum, CUDNN_DATA_FLOAT, heads, PackedStrides(heads)));

  // softmax_sum = rowsum(dO * O) * 1.
  ZS_ASSIGN_OR_RETURN(auto do_o, g.Virtual(heads));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_MUL, tdo, to, nullptr, do_o));
  ZS_ASSIGN_OR_RETURN(auto rowsum, g.Virtual(rows));
  ZS_RETURN_IF_ERROR(g.Reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, rowsum));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_MUL, rowsum, tone, nullptr, tsum));

  // P = exp(Q K^T * scale - stats), masked.
  ZS_ASSIGN_OR_RETURN(auto s, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Matmul(tq, tkt, s));
  ZS_ASSIGN_OR_RETURN(auto scaled, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_MUL, s, tscale, nullptr, scaled));
  ZS_ASSIGN_OR_RETURN(auto centered, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_SUB, scaled, tstats, nullptr, centered));
  auto last = centered;
  if (d.causal) {
    ZS_ASSIGN_OR_RETURN(auto lowest, g.Scalar(kLowest));
    ZS_ASSIGN_OR_RETURN(last, CausalMask(g, last, scores, lowest));
  }
  ZS_ASSIGN_OR_RETURN(auto p, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_EXP, last, nullptr, nullptr, p));

  // Grouped-query: dK and dV per query head, then summed over each group.
  const bool grouped = dk.size(1) != H;
  auto per_query_head =
      [&](cudnnBackendDescriptor_t grad) -> absl::StatusOr<cudnnBackendDescriptor_t> {
    if (!grouped) return grad;
    return g.Virtual(heads, PackedStrides(heads), io);
  };

  // dV = P^T dO.
  ZS_ASSIGN_OR_RETURN(auto pt, g.Virtual(scores, scores_t_strides, io));
  ZS_RETURN_IF_ERROR(g.Reshape(p, pt));
  ZS_ASSIGN_OR_RETURN(auto dv_heads, per_query_head(tdv));
  ZS_RETURN_IF_ERROR(g.Matmul(pt, tdo, dv_heads));
  if (grouped) ZS_RETURN_IF_ERROR(g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dv_heads, tdv));

  // dS = (dO V^T - softmax_sum) * P * scale.
  ZS_ASSIGN_OR_RETURN(auto dp, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Matmul(tdo, tvt, dp));
  ZS_ASSIGN_OR_RETURN(auto dp_sub, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_SUB, dp, tsum, nullptr, dp_sub));
  ZS_ASSIGN_OR_RETURN(auto dp_p, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_MUL, dp_sub, p, nullptr, dp_p));
  ZS_ASSIGN_OR_RETURN(auto ds, g.Virtual(scores));
  ZS_RETURN_IF_ERROR(g.Pointwise(CUDNN_POINTWISE_MUL, dp_p, tscale, nullptr, ds));

  // dK = dS^T Q.
  ZS_ASSIGN_OR_RETURN(auto dst, g.Virtual(scores, scores_t_strides, io));
  ZS_RETURN_IF_ERROR(g.Reshape(ds, dst));
  ZS_ASSIGN_OR_RETURN(auto dk_heads, per_query_head(tdk));
  ZS_RETURN_IF_ERROR(g.Matmul(dst, tq, dk_heads));
  if (grouped) ZS_RETURN_IF_ERROR(g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dk_heads, tdk));

  // dQ = dS K (K^T reshaped back), through the fp32 accumulator.
  ZS_ASSIGN_OR_RETURN(auto tk, g.Virtual(Dims4(k), Strides4(k), io));
  ZS_RETURN_IF_ERROR(g.Reshape(tkt, tk));
  ZS_RETURN_IF_ERROR(g.Matmul(ds, tk, tacc));
  return g.Pointwise(CUDNN_POINTWISE_IDENTITY, tacc, nullptr, nullptr, tdq);
}

// ---------------------------------------------------------------- plan cache

namespace {

struct CachedGraph {
  std::unique_ptr<CudnnGraph> graph;  // null: refused
  absl::Status refusal;
};

// The plan's identity: which graph, device, B x H x T x D, Hkv (the heads of
// k and v, grouped-query attention), mask, dtype and every operand's strides.
std::string Key(const char* which, int device, const AttentionLaunchDims& d, int64_t kv_heads,
                std::initializer_list<const Tensor*> ts) {
  std::string key = absl::StrCat(which, " dev", device, " ", d.batch, "x", d.heads, "x", d.seq, "x",
                                 d.head_dim, " kv", kv_heads, d.causal ? " causal" : "", " ",
                                 DTypeName((*ts.begin())->dtype()));
  for (const Tensor* t : ts) {
    absl::StrAppend(&key, " [", absl::StrJoin(t->strides(), ","), "]");
  }
  return key;
}

// The cached graph for `key`, built by `build` on first use.
template <typename BuildFn>
absl::StatusOr<CudnnGraph*> GraphFor(const std::string& key, cudnnHandle_t handle,
                                     const BuildFn& build) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, CachedGraph>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it == cache->end()) {
    CachedGraph entry;
    auto g = std::make_unique<CudnnGraph>();
    absl::Status s = build(*g);
    if (s.ok()) s = g->Build(handle);
    if (s.ok()) {
      entry.graph = std::move(g);
    } else if (absl::IsUnimplemented(s)) {
      entry.refusal = s;  // no engine: remember, the caller falls back
    } else {
      return s;           // a real failure: not cached, reported
    }
    it = cache->emplace(key, std::move(entry)).first;
  }
  if (it->second.graph == nullptr) {
    return absl::UnimplementedError(absl::StrCat("cuDNN attention (", key, "): ",
                                                 it->second.refusal.message()));
  }
  return it->second.graph.get();
}

// Bytes rounded up to 256 (workspace regions).
int64_t Round256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

CudnnAttentionInfo CudnnAttentionInfoFor(int device) {
  CudnnAttentionInfo info;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return info;
  }
  info.built = true;
  info.version = static_cast<int64_t>(cudnnGetVersion());
  info.sm = 10 * major + minor;
  return info;
}

absl::Status CudnnAttentionForward(const AttentionLaunchDims& dims, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& out,
                                   const Tensor& lse, void* stream) {
  const int device = out.device().index;
  ZS_ASSIGN_OR_RETURN(DeviceHandle * h, HandleFor(device));
  ZS_ASSIGN_OR_RETURN(CudnnGraph * g,
                      GraphFor(Key("fwd", device, dims, k.size(1), {&q, &k, &v, &out, &lse}),
                               h->handle, [&](CudnnGraph& graph) {
                                 return BuildCudnnAttentionForwardGraph(graph, dims, q, k, v, out, lse);
                               }));
  if (q.allocator() == nullptr) {
    return absl::FailedPreconditionError("cuDNN attention: q has no allocator for the workspace");
  }
  ZS_ASSIGN_OR_RETURN(Tensor workspace,
                      Tensor::Empty({Round256(g->workspace_bytes()) / 4 + 1}, DType::kF32,
                                    q.allocator()));
  const float scale = dims.scale;
  const float lowest = std::numeric_limits<float>::lowest();
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs = {q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
                             lse.raw_data(), const_cast<float*>(&scale)};
  if (dims.causal) {
    uids.push_back(kLowest);
    ptrs.push_back(const_cast<float*>(&lowest));
  }
  std::lock_guard<std::mutex> lock(h->mu);
  ZS_CUDNN_RETURN_IF_ERROR(cudnnSetStream(h->handle, static_cast<cudaStream_t>(stream)));
  return g->Execute(h->handle, uids, ptrs, workspace.raw_data());
}

absl::Status CudnnAttentionBackward(const AttentionLaunchDims& dims, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv, void* stream) {
  const int device = dq.device().index;
  ZS_ASSIGN_OR_RETURN(DeviceHandle * h, HandleFor(device));
  ZS_ASSIGN_OR_RETURN(
      CudnnGraph * g,
      GraphFor(Key("bwd", device, dims, k.size(1), {&q, &k, &v, &out, &dout, &lse, &dq, &dk, &dv}),
               h->handle, [&](CudnnGraph& graph) {
                 return BuildCudnnAttentionBackwardGraph(graph, dims, dout, q, k, v, out, lse, dq,
                                                         dk, dv);
               }));
  if (q.allocator() == nullptr) {
    return absl::FailedPreconditionError("cuDNN attention: q has no allocator for the workspace");
  }
  // [plan workspace | softmax_sum (B H T f32) | dQ_accum (B H T D f32)]
  const int64_t rows = dims.batch * dims.heads * dims.seq;
  const int64_t plan_bytes = Round256(g->workspace_bytes());
  const int64_t sum_bytes = Round256(rows * 4);
  const int64_t acc_bytes = Round256(rows * dims.head_dim * 4);
  ZS_ASSIGN_OR_RETURN(Tensor workspace,
                      Tensor::Empty({(plan_bytes + sum_bytes + acc_bytes) / 4 + 1}, DType::kF32,
                                    q.allocator()));
  char* base = static_cast<char*>(workspace.raw_data());
  const float scale = dims.scale;
  const float lowest = std::numeric_limits<float>::lowest();
  const float one = 1.0f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kOne,
                               kSoftmaxSum, kDqAccum};
  std::vector<void*> ptrs = {q.raw_data(),  k.raw_data(),  v.raw_data(),  out.raw_data(),
                             dout.raw_data(), lse.raw_data(), dq.raw_data(), dk.raw_data(),
                             dv.raw_data(), const_cast<float*>(&scale), const_cast<float*>(&one),
                             base + plan_bytes, base + plan_bytes + sum_bytes};
  if (dims.causal) {
    uids.push_back(kLowest);
    ptrs.push_back(const_cast<float*>(&lowest));
  }
  std::lock_guard<std::mutex> lock(h->mu);
  ZS_CUDNN_RETURN_IF_ERROR(cudnnSetStream(h->handle, static_cast<cudaStream_t>(stream)));
  if (cudnnGetVersion() < 90600) {
    // Older cuDNN leaves clearing the dQ accumulator to the caller.
    ZS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(base + plan_bytes + sum_bytes, 0, acc_bytes,
                                            static_cast<cudaStream_t>(stream)));
  }
  return g->Execute(h->handle, uids, ptrs, workspace.raw_data());
}

}  // namespace zeroshard::cuda
