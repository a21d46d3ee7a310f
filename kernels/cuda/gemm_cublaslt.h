// GEMM through cuBLASLt: bf16/f16 inputs with fp32 accumulation, f32 (TF32
// optional), the bias and GELU epilogues fused into the GEMM, the workspace
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
};

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
struct BiasGradEpilogueCounts {
  int64_t fused = 0;     // GEMMs that computed the bias gradient in the epilogue
  int64_t fallback = 0;  // refused by cuBLASLt: plain GEMM + our reduction
};
namespace gemm_internal {
inline std::atomic<int64_t> bias_grad_fused{0};
inline std::atomic<int64_t> bias_grad_fallback{0};
}  // namespace gemm_internal

// Process-wide counts since start (every device, every thread).
inline BiasGradEpilogueCounts BiasGradEpilogueCountsNow() {
  return {gemm_internal::bias_grad_fused.load(), gemm_internal::bias_grad_fallback.load()};
}
inline void CountBiasGradEpilogue(bool fused) {
  (fused ? gemm_internal::bias_grad_fused : gemm_internal::bias_grad_fallback).fetch_add(1);
}

namespace gemm_internal {
inline std::atomic<bool> bias_grad_epilogue{true};
}  // namespace gemm_internal

// false: Run answers every bias-gradient call with Unimplemented, as when
// cuBLASLt has no algorithm (tests of the fallback; A/B measurements).
inline void SetBiasGradEpilogue(bool enabled) { gemm_internal::bias_grad_epilogue = enabled; }
inline bool BiasGradEpilogueEnabled() { return gemm_internal::bias_grad_epilogue.load(); }

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
  // Unimplemented, launching nothing, when no algorithm takes the bias-gradient
  // epilogue (remembered per shape: asked once).
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
