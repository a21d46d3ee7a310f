// The cuBLAS / cuDNN / NCCL status macros: codes to Status with the library's
// text, the call and file:line; out-of-memory codes to ResourceExhausted. The
// libraries' string functions run on the host: no GPU needed. (Built only with
// the CUDA toolkit; a CPU-only build has an empty test.)
#include <cublas_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "zeroshard/runtime/cuda/library_status.h"

#include <gtest/gtest.h>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

absl::Status Cublas(cublasStatus_t s) {
  ZS_CUBLAS_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}
absl::Status Cudnn(cudnnStatus_t s) {
  ZS_CUDNN_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}
absl::Status Nccl(ncclResult_t s) {
  ZS_NCCL_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

TEST(LibraryStatus, CodesBecomeStatusesWithTextAndPlace) {
  ZS_EXPECT_OK(Cublas(CUBLAS_STATUS_SUCCESS));
  EXPECT_THAT(Cublas(CUBLAS_STATUS_NOT_INITIALIZED),
              StatusIs(absl::StatusCode::kInternal,
                       ::testing::AllOf(HasSubstr("library_status_test.cc:"),
                                        HasSubstr(": s failed: CUBLAS_STATUS_NOT_INITIALIZED "
                                                  "(cuBLAS status 1)"))));
  EXPECT_EQ(Cublas(CUBLAS_STATUS_ALLOC_FAILED).code(), absl::StatusCode::kResourceExhausted);
  ZS_EXPECT_OK(Cudnn(CUDNN_STATUS_SUCCESS));
  EXPECT_THAT(Cudnn(CUDNN_STATUS_BAD_PARAM),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("(cuDNN status 2000)")));
  EXPECT_EQ(Cudnn(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED).code(),
            absl::StatusCode::kResourceExhausted);
  ZS_EXPECT_OK(Nccl(ncclSuccess));
  EXPECT_THAT(Nccl(ncclInvalidArgument),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("(NCCL status 4)")));
}

}  // namespace
}  // namespace zeroshard
