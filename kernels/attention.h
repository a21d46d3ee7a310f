// Scaled dot-product self-attention, forward and backward, heads batched, with
// an optional causal mask and grouped-query attention (GQA; multi-query, MQA,
// when k and v have one head). The forward saves only the per-row
// log-sum-exp (like cuDNN's SDPA "stats"); the backward recomputes the
// probabilities.
//
//   // q: [B, H, T, D]; k, v: [B, H, T, D] (views of a fused qkv [B, T, 3, H, D]
//   // are fine), or [B, Hkv, T, D] with Hkv dividing H (GQA, see below)
//   ZS_ASSIGN_OR_RETURN(AttentionOutputs fwd, AttentionForward(q, k, v));   // causal by default
//   // ... later, with dout [B, H, T, D]:
//   ZS_ASSIGN_OR_RETURN(AttentionGrads g,
//                       AttentionBackward(dout, q, k, v, fwd.out, fwd.lse));
//   // or into existing tensors (e.g. views of a fused gradient buffer):
//   ZS_RETURN_IF_ERROR(AttentionBackward(dout, q, k, v, out, lse, dq, dk, dv, {.causal = true}));
//
// The math, per batch b and head h (Q, K, V, O, dO are T x D matrices, i and j
// index query and key positions, c = scale, default 1/sqrt(D)):
//   S     = c Q K^T                        T x T scores
//   S_ij  = -inf where causal and j > i    (masked: such entries contribute exactly 0)
//   lse_i = log sum_j exp(S_ij)            saved, fp32, [B, H, T]
//   P_ij  = exp(S_ij - lse_i)              row softmax
//   O     = P V                            written to `out`
// Backward, given dO = dL/dO (P recomputed from S and lse, never stored):
//   dV      = P^T dO
//   dP      = dO V^T
//   delta_i = rowsum(dO o O)_i = sum_d dO_id O_id     (equals sum_j P_ij dP_ij)
//   dS      = P o (dP - delta 1^T)         masked entries: P = 0, so dS = 0
//   dQ      = c dS K
//   dK      = c dS^T Q
// The per-element pieces are kernels/math/attention_math.h.
//
// Note [Grouped-query attention]: k and v may have Hkv heads, Hkv dividing H,
// G = H / Hkv. Query head h reads kv head h / G, as Hugging Face's repeat_kv
// lays them out (kv head j serves query heads j G .. j G + G - 1), and the
// repeated K and V are never materialised. dk and dv are [B, Hkv, T, D]: dK of
// kv head j is the sum of the per-query-head dK above over its G query heads
// (dV likewise). Our kernels (CPU and CUDA) add the G heads in the order of h
// in fp32 and round once, no atomics, so the bits do not depend on the thread
// count; cuDNN reduces its per-query-head dK, dV (attention_cudnn.cc). Hkv == H
// is plain multi-head attention, bit for bit as before.
//
// CUDA: cuDNN's fused flash attention (kernels/cuda/attention_cudnn.h) for
// bf16/f16 with D a multiple of 8 and unit stride in D, our own kernel
// (kernels/cuda/attention.cu: online softmax, fp32 accumulation, any strides,
// D <= 256) for the rest or when forced; kernels/cuda/attention_select.h
// decides. Enqueued on the legacy default stream as the other op entries.
// Ours is deterministic (fixed sums, no atomics); cuDNN's backward accumulates
// dQ with atomics, so under kAuto bf16/f16 gradients may differ run to run in
// the last bits (kOwn when bitwise reproducibility matters more than speed).
//
// CPU: the forward runs one (b, h) query head per OpenMP task, the backward
// one (b, kv head) group per task, its G query heads in order of h; each task
// is a sequence of single-threaded GEMMs (kernels/cpu/gemm.h) over blocks of
// 64 query rows; a causal block only multiplies the key columns up to its last
// row. Scratch is per thread and O(64 T + T D), never T x T (nor G T D: a
// group's dK and dV accumulate in one T x D each). Accumulation is fp32, and
// each head (each group in the backward) is computed by one thread in a fixed
// order, so results are bitwise identical for any number of threads. (MQA's
// backward has B tasks: one per batch element.)
//
// Rules (each violation is an InvalidArgument saying what was found):
// - q, out, dout, dq: 4-D [B, H, T, D], all the same shape; k, v, dk, dv: 4-D
//   [B, Hkv, T, D], all the shape of k, with q's B, T and D and Hkv dividing H
//   ("k has 3 heads, which does not divide q's 8"); all of one float dtype
//   (f32, bf16, f16; 16-bit values are widened on load and the results
//   rounded once); D >= 1.
// - lse: f32 [B, H, T].
// - Any strides: views whose last dimension has unit stride (e.g. carved out of
//   a fused buffer) are used in place; other inputs are copied per head.
// - Outputs must not overlap the inputs (checked conservatively: the byte
//   ranges spanned must be disjoint) and have no broadcast (stride 0)
//   dimension. dq, dk and dv may be interleaved views of one buffer (they are
//   not checked against each other: they must not share elements).
#ifndef ZEROSHARD_KERNELS_ATTENTION_H_
#define ZEROSHARD_KERNELS_ATTENTION_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// Which implementation runs on CUDA tensors (CPU tensors have one).
enum class AttentionImpl {
  kAuto,        // cuDNN's fused attention when it takes the call, else our
                // tensor-core kernel when it takes it, else our scalar kernel
  kOwn,         // our scalar kernel (kernels/cuda/attention_launch.h), the reference
  kCudnn,       // cuDNN's fused attention, or an error saying why not
  kTensorCore,  // our tensor-core flash kernel (bf16/f16, D a multiple of 16 up to 128;
                // Note [Tensor-core attention] in
                // kernels/cuda/attention_tc.cu), or an error saying why not
};

// Which kernel ran, one count per forward or backward call on CUDA tensors,
// every thread of the process (monotonic; subtract a reading taken before).
// No fallback is silent: the job and cuda_bench print these, and the GPU
// record's checker fails a GPT step that ran the scalar kernel.
struct AttentionKernelCounts {
  int64_t cudnn = 0;
  int64_t tensor_core = 0;
  int64_t scalar = 0;
};
AttentionKernelCounts AttentionKernelCountsNow();

struct AttentionOptions {
  bool causal = true;
  std::optional<float> scale;  // default 1/sqrt(D)
  AttentionImpl impl = AttentionImpl::kAuto;  // kAuto: DefaultAttentionImpl() decides
};

// "auto", "own", "cudnn", "tensor_core"; ParseAttentionImpl: nullopt otherwise.
absl::string_view AttentionImplName(AttentionImpl impl);
std::optional<AttentionImpl> ParseAttentionImpl(absl::string_view name);

// What a call that leaves impl at kAuto runs, process-wide, so that one kernel
// can be measured inside a whole model without touching the model's code
// (the GPT and Llama call with kAuto): SetDefaultAttentionImpl, else the
// environment's ZEROSHARD_ATTENTION (read once; an unknown value makes every
// CUDA attention call fail with InvalidArgument naming the accepted ones),
// else kAuto.
absl::StatusOr<AttentionImpl> DefaultAttentionImpl();
void SetDefaultAttentionImpl(AttentionImpl impl);

// out = softmax(scale Q K^T + mask) V; lse = the rows' log-sum-exp.
absl::Status AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const AttentionOptions& options = {});

// dq, dk, dv from dout and the forward's inputs, out and lse (same options).
absl::Status AttentionBackward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const AttentionOptions& options = {});

// Allocating forms: out like q (contiguous), lse f32 [B, H, T]; dq shaped like
// q, dk and dv like k (contiguous).
struct AttentionOutputs {
  Tensor out;  // [B, H, T, D]
  Tensor lse;  // [B, H, T], f32
};
struct AttentionGrads {
  Tensor dq;      // [B, H, T, D]
  Tensor dk, dv;  // [B, Hkv, T, D]
};
absl::StatusOr<AttentionOutputs> AttentionForward(const Tensor& q, const Tensor& k,
                                                  const Tensor& v,
                                                  const AttentionOptions& options = {});
absl::StatusOr<AttentionGrads> AttentionBackward(const Tensor& dout, const Tensor& q,
                                                 const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse,
                                                 const AttentionOptions& options = {});

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_ATTENTION_H_
