// The cuBLASLt descriptors of one GemmCall (kernels/cuda/gemm_cublaslt.h):
// the matmul descriptor (compute type, transposes, bias / GELU epilogue) and
// the three matrix layouts (types, stored shapes, leading dimensions, batch
// count and strides) of Note [Row-major GEMM on cuBLAS]. Creating them needs
// no handle and no device, so tests/kernels/cublaslt_desc_test.cc builds them
// with the real library on a machine without a GPU and reads every attribute
// back. CUDA builds only.
//
//   CublasLtDescriptors desc;
//   ZS_RETURN_IF_ERROR(MakeCublasLtDescriptors(call, desc));
//   // cublasLtMatmul(handle, desc.op, &alpha, call.b, desc.first, call.a, desc.second, &beta,
//   //                call.c, desc.d, call.c, desc.d, ...)
#ifndef ZEROSHARD_KERNELS_CUDA_CUBLASLT_DESC_H_
#define ZEROSHARD_KERNELS_CUDA_CUBLASLT_DESC_H_

#include <cublasLt.h>

#include "absl/status/status.h"
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard::cuda {

// bf16 -> CUDA_R_16BF, f16 -> CUDA_R_16F, anything else CUDA_R_32F.
cudaDataType_t CublasLtDataType(DType d);

// InvalidArgument when `call` is inconsistent (shapes, a dtype pair the
// types table of gemm_cublaslt.h does not have, tf32 on half inputs, a null
// operand); what is wrong in the message.
absl::Status CheckGemmCall(const GemmCall& call);

// Owner of one call's descriptors; "first" is cuBLASLt's A (our B), "second"
// its B (our A), "d" both C and D.
struct CublasLtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, d = nullptr;

  CublasLtDescriptors() = default;
  ~CublasLtDescriptors();
  CublasLtDescriptors(const CublasLtDescriptors&) = delete;
  CublasLtDescriptors& operator=(const CublasLtDescriptors&) = delete;
};

// Checks `call` (CheckGemmCall) and creates `out`'s descriptors (empty on
// entry). Internal with cuBLAS's status name when cuBLASLt refuses one.
absl::Status MakeCublasLtDescriptors(const GemmCall& call, CublasLtDescriptors& out);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CUBLASLT_DESC_H_
