// cuBLAS's legacy (v2) calls that bench/cuda_bench.cc makes for its GEMM
// baseline, answered on the CPU for the simulated device (--define=cuda_sim=1;
// see fake_cudart.cc): linked with fake_cublaslt.cc instead of libcublas /
// libcublasLt there. cublasGemmEx is the reference loop of reference_gemm.h
// (the one cublasLtMatmul's stand-in runs): C = alpha op(A) op(B) + beta C in
// cuBLAS's column-major terms, fp32 accumulation in k order, C rounded to its
// type once, C not read when beta is 0. It runs when called (the simulated
// streams hold no work), so the handle's stream is only remembered.
//
// What it takes is what cuda_bench asks: op N or T; alpha and beta as host
// floats; A and B of one type with C's per cuBLAS's cublasGemmEx table for
// these compute types: CUBLAS_COMPUTE_32F with bf16 -> bf16 or f32, f16 -> f16
// or f32, f32 -> f32, and CUBLAS_COMPUTE_32F_FAST_TF32 with f32 only (computed
// as fp32: the simulator does not round inputs to TF32). Any algo is taken.
// Anything else is CUBLAS_STATUS_NOT_SUPPORTED; what cuBLAS itself rejects
// (negative sizes, a leading dimension below the rows it must hold, no alpha or
// beta) is CUBLAS_STATUS_INVALID_VALUE, and a null handle
// CUBLAS_STATUS_NOT_INITIALIZED.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>

#include "zeroshard/tools/cuda/sim/reference_gemm.h"

struct cublasContext {
  cudaStream_t stream = nullptr;  // cublasSetStream's; the work runs at the call anyway
};

namespace {

bool TypesSupported(cudaDataType_t ab, cudaDataType_t c, cublasComputeType_t compute) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
      if (ab == CUDA_R_16BF || ab == CUDA_R_16F) return c == ab || c == CUDA_R_32F;
      return ab == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return ab == CUDA_R_32F && c == CUDA_R_32F;
    default:
      return false;
  }
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* a, cudaDataType a_type,
                                         int lda, const void* b, cudaDataType b_type, int ldb,
                                         const void* beta, void* c, cudaDataType c_type, int ldc,
                                         cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  for (cublasOperation_t op : {transa, transb}) {
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (a_type != b_type || !TypesSupported(a_type, c_type, compute)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  // A is stored m x k (k x m when transposed), B k x n (n x k), C m x n.
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta ? k : m) ||
      ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m) || alpha == nullptr ||
      beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float alpha_f = *static_cast<const float*>(alpha);
  const float beta_f = *static_cast<const float*>(beta);
  ::zs_cuda_sim::ReferenceGemm(
      m, n, k, alpha_f, ::zs_cuda_sim::GemmOperand{a, a_type, lda, ta},
      ::zs_cuda_sim::GemmOperand{b, b_type, ldb, tb}, beta_f, c, c_type, ldc, c, c_type, ldc,
      [](int64_t, int64_t, float v) { return v; });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
