// The GEMM both cuBLAS stand-ins compute on the CPU (fake_cublaslt.cc for
// cuBLASLt's cublasLtMatmul, fake_cublas.cc for the legacy cublasGemmEx), for
// the simulated device (--define=cuda_sim=1): one reference loop, so the two
// APIs cannot drift apart in what they compute.
//
//   D[i, j] = epilogue(i, j, alpha sum_q op(A)[i, q] op(B)[q, j] + beta C[i, j])
//
// in cuBLAS's column-major terms (element (r, c) of a matrix with leading
// dimension ld is at r + c ld; op(X) is X or its transpose), accumulating in
// fp32 in q order; C is not read when beta is 0 (as cuBLAS: it may hold NaN);
// the result is rounded to D's type once. Operands are f32, bf16 or f16.
#ifndef ZEROSHARD_TOOLS_CUDA_SIM_REFERENCE_GEMM_H_
#define ZEROSHARD_TOOLS_CUDA_SIM_REFERENCE_GEMM_H_

#include <library_types.h>

#include <cstddef>
#include <cstdint>

#include "zeroshard/runtime/half.h"

namespace zs_cuda_sim {

inline bool GemmTypeSupported(cudaDataType_t t) {
  return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

inline size_t GemmTypeSize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Element i of an array of type t (one of GemmTypeSupported's), as a float.
inline float GemmLoad(const void* base, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_16F:
      return static_cast<float>(static_cast<const ::zeroshard::Float16*>(base)[i]);
    case CUDA_R_16BF:
      return static_cast<float>(static_cast<const ::zeroshard::BFloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// Stores v into element i, rounded to t once.
inline void GemmStore(void* base, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
    case CUDA_R_16F:
      static_cast<::zeroshard::Float16*>(base)[i] = ::zeroshard::Float16(v);
      break;
    case CUDA_R_16BF:
      static_cast<::zeroshard::BFloat16*>(base)[i] = ::zeroshard::BFloat16(v);
      break;
    default:
      static_cast<float*>(base)[i] = v;
      break;
  }
}

// A column-major operand: `transposed` says op(X) = X^T.
struct GemmOperand {
  const void* data = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t ld = 0;
  bool transposed = false;
};

// The m x n result D (leading dimension ldd) of op(A) (m x k) times op(B)
// (k x n), as the header comment says. `epilogue(i, j, v)` returns the value
// to store at (i, j) given v = alpha op(A) op(B) + beta C (the cuBLASLt bias,
// GELU and GELU-gradient epilogues; the identity for cublasGemmEx). C and D may be one array
// (cublasGemmEx's in-place C): each element of C is read once, just before
// its own element of D is written.
template <typename Epilogue>
void ReferenceGemm(int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a,
                   const GemmOperand& b, float beta, const void* c, cudaDataType_t c_type,
                   int64_t ldc, void* d, cudaDataType_t d_type, int64_t ldd,
                   const Epilogue& epilogue) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int64_t q = 0; q < k; ++q) {
        const float av = GemmLoad(a.data, a.type, a.transposed ? q + i * a.ld : i + q * a.ld);
        const float bv = GemmLoad(b.data, b.type, b.transposed ? j + q * b.ld : q + j * b.ld);
        acc += av * bv;
      }
      float v = alpha * acc;
      if (beta != 0.0f) v += beta * GemmLoad(c, c_type, i + j * ldc);
      GemmStore(d, d_type, i + j * ldd, epilogue(i, j, v));
    }
  }
}

}  // namespace zs_cuda_sim

#endif  // ZEROSHARD_TOOLS_CUDA_SIM_REFERENCE_GEMM_H_
