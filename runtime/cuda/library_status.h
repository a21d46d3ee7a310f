// The rest of the error-macro family of runtime/cuda/cuda_status.h: cuBLAS,
// cuDNN and NCCL status codes to absl::Status with the library's own text, the
// failing call and file:line. Include only where the library's header is
// already needed (each macro is defined when its header was included first).
//
//   #include <cublasLt.h>
//   #include "zeroshard/runtime/cuda/library_status.h"
//   ZS_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
//   // -> Internal: "kernels/cuda/gemm_cublaslt.cc:120: cublasLtCreate(&handle)
//   //    failed: CUBLAS_STATUS_NOT_INITIALIZED (cuBLAS status 1)"
//
// The include order matters: the cuBLAS macro exists when a cuBLAS header came
// first (CUBLAS_VER_MAJOR), the cuDNN one after cudnn.h, the NCCL one after nccl.h.
//
// Out-of-memory codes (CUBLAS_STATUS_ALLOC_FAILED, cuDNN's host and device
// allocation failures; NCCL has none of its own) map to ResourceExhausted, as
// cudaErrorMemoryAllocation does; everything else to Internal. The sticky CUDA
// error state is cleared as in ZS_CUDA_RETURN_IF_ERROR (the libraries report
// CUDA failures through their own codes, leaving cudaGetLastError set).
#ifndef ZEROSHARD_RUNTIME_CUDA_LIBRARY_STATUS_H_
#define ZEROSHARD_RUNTIME_CUDA_LIBRARY_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard::cuda {

inline absl::Status LibraryErrorToStatus(const char* library, int code, const char* text,
                                         bool out_of_memory, const char* call, const char* file,
                                         int line) {
  cudaGetLastError();
  return absl::Status(
      out_of_memory ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal,
      absl::StrCat(file, ":", line, ": ", call, " failed: ", text, " (", library, " status ", code,
                   ")"));
}

}  // namespace zeroshard::cuda

#if defined(CUBLAS_VER_MAJOR)
#define ZS_CUBLAS_RETURN_IF_ERROR(call)                                                      \
  do {                                                                                       \
    const cublasStatus_t zs_cublas_status_ = (call);                                         \
    if (zs_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                        \
      return ::zeroshard::cuda::LibraryErrorToStatus(                                        \
          "cuBLAS", static_cast<int>(zs_cublas_status_),                                     \
          cublasGetStatusName(zs_cublas_status_),                                            \
          zs_cublas_status_ == CUBLAS_STATUS_ALLOC_FAILED, #call, __FILE__, __LINE__);       \
    }                                                                                        \
  } while (0)
#endif

#if defined(CUDNN_MAJOR)
#define ZS_CUDNN_RETURN_IF_ERROR(call)                                                       \
  do {                                                                                       \
    const cudnnStatus_t zs_cudnn_status_ = (call);                                           \
    if (zs_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                          \
      return ::zeroshard::cuda::LibraryErrorToStatus(                                        \
          "cuDNN", static_cast<int>(zs_cudnn_status_), cudnnGetErrorString(zs_cudnn_status_), \
          zs_cudnn_status_ == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||           \
              zs_cudnn_status_ == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,       \
          #call, __FILE__, __LINE__);                                                        \
    }                                                                                        \
  } while (0)
#endif

#if defined(NCCL_MAJOR)
#define ZS_NCCL_RETURN_IF_ERROR(call)                                                        \
  do {                                                                                       \
    const ncclResult_t zs_nccl_status_ = (call);                                             \
    if (zs_nccl_status_ != ncclSuccess) {                                                    \
      return ::zeroshard::cuda::LibraryErrorToStatus(                                        \
          "NCCL", static_cast<int>(zs_nccl_status_), ncclGetErrorString(zs_nccl_status_),    \
          false, #call, __FILE__, __LINE__);                                                 \
    }                                                                                        \
  } while (0)
#endif

#endif  // ZEROSHARD_RUNTIME_CUDA_LIBRARY_STATUS_H_
