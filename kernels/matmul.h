// Matrix multiplication: 2-D and batched, either operand transposed, with
// out = alpha * op(a) op(b) + beta * out.
//
//   // y[B*T, 3C] = x[B*T, C] @ W[3C, C]^T      (nn.Linear's layout)
//   ZS_RETURN_IF_ERROR(MatMul(x, w, y, {.transpose_b = true}));
//   // dW[3C, C] += dy^T @ x                     (accumulate into a gradient)
//   ZS_RETURN_IF_ERROR(MatMul(dy, x, dw, {.transpose_a = true, .beta = 1.0f}));
//   // dW = dy^T @ x and db = dy's column sums, in one pass over dy
//   ZS_RETURN_IF_ERROR(MatMul(dy, x, dw, {.transpose_a = true, .bias_grad = db}));
//   // a = gelu(x W1^T + b1), keeping h = x W1^T + b1; then dh = (dy W2) gelu'(h)
//   ZS_RETURN_IF_ERROR(MatMul(x, w1, a, {.transpose_b = true, .bias = b1, .gelu = true, .pre_gelu = h}));
//   ZS_RETURN_IF_ERROR(MatMul(dy, w2, dh, {.dgelu_pre = h}));
//   // Batched: a [..., M, K] @ b [..., K, N] -> [..., M, N]; a 2-D b is shared.
//
// Shapes: op(a) is [..., M, K] and op(b) [..., K, N]; the batch dimensions of a
// and b must be equal, or b must be 2-D (one matrix for every batch). Transposes
// and strided views cost nothing (each 2-D slice may be row- or column-major);
// other layouts are copied first. Dtypes: f32, bf16, f16 in any mix; the
// product is accumulated in fp32 and rounded once into out's dtype.
#ifndef ZEROSHARD_KERNELS_MATMUL_H_
#define ZEROSHARD_KERNELS_MATMUL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct MatMulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: out's previous contents are ignored
  // Optional [N] added to every row: out = alpha op(a) op(b) + beta out + bias
  // (nn.Linear's bias). On CUDA it is cuBLASLt's bias epilogue, added in fp32
  // before the one rounding into out's dtype; on the CPU an Add after the GEMM.
  Tensor bias;
  // Optional [M], written with the sums over K of op(a): the bias gradient of
  // a weight-gradient GEMM (dW = dY^T X with transpose_a: the column sums of
  // dY), for a 2-D a and no bias. On CUDA it is cuBLASLt's BGRADB epilogue,
  // dY read once (Note [Bias gradient in the GEMM], kernels/cuda/gemm_cublaslt.h);
  // where cuBLASLt has no algorithm for it, our column reduction after the
  // GEMM, counted. On the CPU, Sum(a) over K (the bits of zeroshard::Sum).
  Tensor bias_grad;
  // GELU (tanh form) after the bias: out = gelu(alpha op(a) op(b) + bias), and
  // `pre_gelu`, when defined, is written with GELU's input (what GELU's
  // backward reads), shaped and typed like out (Note [GELU in the GEMM],
  // kernels/cuda/gemm_cublaslt.h). On CUDA cuBLASLt's GELU_AUX_BIAS epilogue:
  // GELU on the fp32 value, rounded once into out. On the CPU (and on CUDA when
  // cuBLASLt cannot, counted) the GEMM with its bias into pre_gelu, then Gelu:
  // the bits of MatMul followed by zeroshard::Gelu. Not with beta != 0.
  bool gelu = false;
  Tensor pre_gelu;
  // GELU's backward fused: out = (alpha op(a) op(b)) * gelu'(dgelu_pre), where
  // dgelu_pre is the forward's pre_gelu, shaped like out. On CUDA cuBLASLt's
  // DGELU epilogue (the product not rounded before the multiplication); on the
  // CPU the GEMM into out, then GeluBackward(dgelu_pre, out) in place: the bits
  // of MatMul followed by zeroshard::GeluBackward. Not with beta, bias, gelu
  // or bias_grad.
  Tensor dgelu_pre;
};

// TF32 for f32 GEMMs on CUDA tensors (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_TF32:
// inputs rounded to TF32's 10-bit mantissa, products accumulated in fp32; 495
// against 67 TFLOP/s dense on an H100 SXM), process-wide and off by default,
// as PyTorch's torch.backends.cuda.matmul.allow_tf32. The CPU computes f32 as
// before; a virtual device costs such GEMMs at its profile's TF32 peak. Results
// then differ from f32 by up to about 2^-11 relative per product term (TF32's
// rounding of each input), so runs that must match the CPU keep it off. The
// job's `train.allow_tf32` (--allow_tf32) sets it.
void SetMatMulAllowTf32(bool allow);
bool MatMulAllowTf32();

absl::Status MatMul(const Tensor& a, const Tensor& b, const Tensor& out,
                    const MatMulOptions& options = {});
// Allocates out ([..., M, N], a's dtype when a and b agree, else f32).
absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b, const MatMulOptions& options = {});

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATMUL_H_
