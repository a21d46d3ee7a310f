// GEMM through cuBLASLt: bf16/f16 inputs with fp32 accumulation, f32 (TF32
// optional), the bias, GELU (with its input kept, and its gradient) and
// bias-gradient epilogues fused into the GEMM, the workspace
// taken from an Allocator. Row-major operands, as our tensors (see
// Note [Row-major GEMM on cuBLAS] in kernels/cuda/gemm_plan.h).
//
//   ZS_ASSIGN_OR_RETURN(std::unique_ptr<CublasLtGemm> gemm,
//                       CublasLtGemm::Create(/*device=*/0, &gpu_allocator));
//   GemmCall call;                              // h [B*T, 4C] = gelu(x [B*T, C] @ W^T + b)
//   call.shape = {.m = B * T, .n = 4 * C, .k = C, .transpose_b = true,
//                 .lda = C, .ldb = C, .ldc = 4 * C};
//   call.ab_dtype = call.c_dtype = DType::kBF16;
//   call.a = x.raw_data(); call.b = w.raw_data(); call.c = h.raw_data();
//   call.bias = b.raw_data(); call.gelu = true;
//   ZS_RETURN_IF_ERROR(gemm->Run(call, stream.native_handle()));
//
// Types (cuBLASLt, compute type fp32): A and B share one dtype; bf16 or f16
// inputs write C in their own dtype or f32; f32 inputs write f32 (with
// allow_tf32, on TF32 tensor cores). The bias has `bias_dtype` (by default C's)
// and N elements. GELU is cuBLASLt's epilogue, applied after the bias;
// tests/kernels/cuda_gemm_test.cc checks it against kernels/math/fast_math.h's
// GeluTanh within the GEMM tolerance plus 1e-3 (the tanh and erf forms differ
// by less than 5e-4).
//
// One CublasLtGemm owns a cuBLASLt handle, a workspace and a cache of chosen
// algorithms. Calls on one stream may share it; calls on several streams at
// once each need their own (they would share the workspace). In a CPU-only
// build Create() says so.
#ifndef ZEROSHARD_KERNELS_CUDA_GEMM_CUBLASLT_H_
#define ZEROSHARD_KERNELS_CUDA_GEMM_CUBLASLT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/kernels/cuda/gemm_plan.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard::cuda {

struct GemmCall {
  RowMajorGemm shape;
  DType ab_dtype = DType::kF32;
  DType c_dtype = DType::kF32;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C's previous contents are ignored
  const void* bias = nullptr;  // N values added to every row of C (before GELU)
  std::optional<DType> bias_dtype;  // default: c_dtype
  bool gelu = false;
  bool allow_tf32 = false;  // f32 inputs only
  // M values written with the sums over K of op(A), fused into the GEMM
  // (cuBLASLt's BGRADB epilogue, Note [Bias gradient in the GEMM]): the bias
  // gradient of a weight-gradient GEMM dW = dY^T X is the column sums of dY.
  // Type `bias_dtype` (default c_dtype); batch 1, with no bias or GELU.
  void* bias_grad = nullptr;
  // With gelu: GELU's input (the product plus the bias) also written here,
  // [M, N] row-major with `aux_ld` elements between rows, in c_dtype
  // (cuBLASLt's GELU_AUX / GELU_AUX_BIAS epilogues; Note [GELU in the GEMM]).
  void* gelu_aux = nullptr;
  // GELU's backward (cuBLASLt's DGELU epilogue): C = alpha op(A) op(B) times
  // gelu'(dgelu_aux) elementwise, where dgelu_aux is what a gelu_aux call
  // wrote (same layout, c_dtype). No bias, GELU or bias gradient with it.
  const void* dgelu_aux = nullptr;
  // Elements between rows of gelu_aux / dgelu_aux: at least N and a multiple
  // of 8 (cuBLASLt's EPILOGUE_AUX_LD rule). Aux calls take batch 1, beta 0.
  int64_t aux_ld = 0;
};

// Note [GELU in the GEMM]
// GPT-2's MLP is h = x W1^T + b1, a = gelu(h), y = a W2^T + b2. Run as ops,
// GELU costs a pass of its own each way: forward the GEMM writes h and GELU
// reads h and writes a; backward the GEMM writes da and GELU's backward reads
// h and da and writes dh (7 passes over a [rows, 4C] tensor). cuBLASLt's
// epilogues take both into the GEMMs, as llm.c does: the fc GEMM applies the
// bias and GELU and also writes h (GELU_AUX_BIAS), and the proj layer's
// input-gradient GEMM multiplies dY W2 by gelu'(h) before writing dh (DGELU):
// 4 passes, no GELU kernel. ops::GeluMlp (autograd/ops.h) asks for both
// through MatMulOptions::gelu / pre_gelu / dgelu_pre (kernels/matmul.h).
// cuBLASLt's GELU is computed in fp32 before the one rounding into C (our
// unfused path rounds h first), so results differ from the op-by-op path by
// the rounding of h: a 16-bit ulp of h times gelu' (|gelu'| <= 1.13), within
// the GEMM's own tolerance, and by cuBLASLt's own GELU (its documentation does
// not say which form; the tanh and erf forms differ by at most 4.8e-4 in value
// and 8.7e-4 in slope, what tests/kernels/cuda_gemm_test.cc allows). The CPU
// computes the unfused bits exactly. Where
// cuBLASLt has no algorithm for the epilogue, or the layout does not meet its
// rules (aux_ld a multiple of 8, batch 1, out written directly), MatMul runs
// the GEMM and then our GELU kernels, and counts the fallback
// (EpilogueCountsNow(FusedEpilogue::kGelu)); the GPU record fails on any in
// the job, as for the bias gradient.

// Note [Bias gradient in the GEMM]
// A linear layer's backward computes dW [out, in] = dY^T [out, rows] X [rows,
// in] and db [out] = the sum of dY over its rows: the same dY, reduced over the
// same rows, which are the GEMM's K. cuBLASLt folds that sum into the GEMM's
// epilogue (BGRADB: "the bias gradient of the input matrix B, reduced over the
// GEMM's k dimension"; B is our A, Note [Row-major GEMM on cuBLAS]), so dY is
// read once and no separate reduction pass runs. Where cuBLASLt finds no
// algorithm for the epilogue, Run returns Unimplemented without launching;
// MatMul (kernels/matmul.cc) then runs the plain GEMM and our column reduction,
// and counts the fallback (BiasGradEpilogueCounts): the GPU record fails on
// any (tools/gpu_bundle/gpu_record.cc), so a fallback is never silent.
// Which fused epilogue MatMul counts: the bias gradient (BGRADB) or GELU
// (GELU_AUX / DGELU, Note [GELU in the GEMM]).
enum class FusedEpilogue { kBiasGrad = 0, kGelu = 1 };
struct EpilogueCounts {
  int64_t fused = 0;     // GEMMs that ran the epilogue
  int64_t fallback = 0;  // refused by cuBLASLt (or a layout it cannot take): plain GEMM + our kernel
};
using BiasGradEpilogueCounts = EpilogueCounts;
namespace gemm_internal {
inline std::atomic<int64_t> epilogue_fused[2] = {0, 0};
inline std::atomic<int64_t> epilogue_fallback[2] = {0, 0};
inline std::atomic<bool> epilogue_enabled[2] = {true, true};
}  // namespace gemm_internal

// Process-wide counts since start (every device, every thread).
inline EpilogueCounts EpilogueCountsNow(FusedEpilogue e) {
  const int i = static_cast<int>(e);
  return {gemm_internal::epilogue_fused[i].load(), gemm_internal::epilogue_fallback[i].load()};
}
inline void CountEpilogue(FusedEpilogue e, bool fused) {
  const int i = static_cast<int>(e);
  (fused ? gemm_internal::epilogue_fused[i] : gemm_internal::epilogue_fallback[i]).fetch_add(1);
}
inline BiasGradEpilogueCounts BiasGradEpilogueCountsNow() { return EpilogueCountsNow(FusedEpilogue::kBiasGrad); }
inline void CountBiasGradEpilogue(bool fused) { CountEpilogue(FusedEpilogue::kBiasGrad, fused); }

// false: Run answers every call asking for that epilogue with Unimplemented,
// as when cuBLASLt has no algorithm (tests of the fallback; A/B measurements).
inline void SetEpilogueEnabled(FusedEpilogue e, bool enabled) {
  gemm_internal::epilogue_enabled[static_cast<int>(e)] = enabled;
}
inline bool EpilogueEnabled(FusedEpilogue e) { return gemm_internal::epilogue_enabled[static_cast<int>(e)].load(); }
inline void SetBiasGradEpilogue(bool enabled) { SetEpilogueEnabled(FusedEpilogue::kBiasGrad, enabled); }
inline bool BiasGradEpilogueEnabled() { return EpilogueEnabled(FusedEpilogue::kBiasGrad); }

class CublasLtGemm {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // `workspace_allocator` (a device allocator of `device`) must outlive this.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(
      int device, Allocator* workspace_allocator, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues the GEMM on `stream`. InvalidArgument for an inconsistent call
  // (shapes, dtypes the types table above does not have); Internal with
  // cuBLAS's status text when cuBLASLt refuses or finds no algorithm;
  // Unimplemented, launching nothing, when no algorithm takes the
  // bias-gradient or GELU-aux epilogue (remembered per shape: asked once), or
  // that epilogue is switched off (SetEpilogueEnabled).
  absl::Status Run(const GemmCall& call, void* stream);

  // Number of algorithm searches (cache misses) so far.
  int64_t heuristic_queries() const;

 private:
  struct Impl;
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A CublasLtGemm per device for the op entries (MatMul on CUDA tensors), made
// on first use with its workspace from its own CudaAllocator, never destroyed
// (as DefaultCpuAllocator). Code that owns its streams makes its own.
absl::StatusOr<CublasLtGemm*> DefaultCublasLtGemm(int device);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_GEMM_CUBLASLT_H_
