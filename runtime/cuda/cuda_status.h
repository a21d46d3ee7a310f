// ZS_CUDA_RETURN_IF_ERROR: turns a cudaError_t into an absl::Status carrying
// the error's name and text, the failing call, and file:line, and clears the
// (non-sticky) error state so later calls start clean.
//
//   ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
//
// Included only by files compiled against the CUDA toolkit.
#ifndef ZEROSHARD_RUNTIME_CUDA_CUDA_STATUS_H_
#define ZEROSHARD_RUNTIME_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard::cuda {

inline absl::Status CudaErrorToStatus(cudaError_t err, const char* call, const char* file,
                                      int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clear the error so it does not resurface in the next call
  const absl::StatusCode code = err == cudaErrorMemoryAllocation
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", call, " failed: ",
                                         cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                         ")"));
}

}  // namespace zeroshard::cuda

#define ZS_CUDA_RETURN_IF_ERROR(call)                                                      \
  do {                                                                                     \
    ::absl::Status zs_cuda_status_ =                                                       \
        ::zeroshard::cuda::CudaErrorToStatus((call), #call, __FILE__, __LINE__);           \
    if (!zs_cuda_status_.ok()) return zs_cuda_status_;                                     \
  } while (0)

#endif  // ZEROSHARD_RUNTIME_CUDA_CUDA_STATUS_H_
