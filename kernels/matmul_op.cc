// MatMul in the op registry (kernels/op_registry.h).
#include "zeroshard/kernels/matmul.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kM = 7, kK = 33, kN = 5;

// a [M, K] times b^T for b [N, K] (nn.Linear's layout). The bias option is
// left to tests/kernels/matmul_test.cc: on the CPU it is an Add after the GEMM,
// a second rounding of a 16-bit output.
Values Reference(const Values& in) {
  const std::vector<double>&a = in[0], &b = in[1];
  std::vector<double> c(kM * kN);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double s = 0;
      for (int64_t k = 0; k < kK; ++k) s += a[i * kK + k] * b[j * kK + k];
      c[i * kN + j] = s;
    }
  }
  return {c};
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "matmul",
    .family = "matmul",
    // cuBLASLt on CUDA; on the simulator tools/cuda/sim/fake_cublaslt.cc.
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "a", .shape = {kM, kK}}, {.name = "b", .shape = {kN, kK}}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(Tensor c, MatMul(in[0], in[1], {.transpose_b = true}));
      return Tensors{c};
    },
    .reference = Reference,
    // tests/kernels/matmul_test.cc: fp32 dot products of K = 33 terms in
    // [-1, 1): 1e-5, plus 1e-4 absolute when the output is 16-bit.
    .forward_bound = [](DType dtype, int) {
      return dtype == DType::kF32 ? Bound{1e-5, 1e-5, "fp32 dot products of 33 terms"}
                                  : Bound{1e-4, 1e-5, "fp32 dot products, a 16-bit output"};
    },
    .no_backward = "its gradients are two more MatMuls (autograd/ops.cc)",
}});

}  // namespace
}  // namespace zeroshard::ops
