// CPU-only build: CublasLtGemm exists so that MatMul links, and says how this
// binary was built.
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"

namespace zeroshard::cuda {

namespace {
absl::Status NotBuilt() {
  return absl::FailedPreconditionError(
      "cuBLASLt GEMM: zeroshard was built without CUDA (ZEROSHARD_CUDA=0 or no toolkit at build "
      "time)");
}
}  // namespace

struct CublasLtGemm::Impl {};

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtGemm::~CublasLtGemm() = default;

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(int, Allocator*, size_t) {
  return NotBuilt();
}
absl::Status CublasLtGemm::Run(const GemmCall&, void*) { return NotBuilt(); }
int64_t CublasLtGemm::heuristic_queries() const { return 0; }
absl::StatusOr<CublasLtGemm*> DefaultCublasLtGemm(int) { return NotBuilt(); }

}  // namespace zeroshard::cuda
