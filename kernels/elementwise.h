// Elementwise kernels with broadcasting: unary and binary ops, affine maps,
// casts. CPU today; a CUDA tensor gets a clear error until its kernel lands.
//
//   ZS_RETURN_IF_ERROR(Add(a, b, out));                 // out = a + b, broadcast to out's shape
//   ZS_RETURN_IF_ERROR(Gelu(x, y));                     // y = gelu(x), tanh form
//   ZS_RETURN_IF_ERROR(GeluBackward(x, dy, dx));        // dx = dy * gelu'(x)
//   ZS_RETURN_IF_ERROR(Silu(x, y));                     // y = x sigmoid(x) (SiluBackward too)
//   ZS_ASSIGN_OR_RETURN(Tensor s, Binary(BinaryOp::kMul, a, b));   // allocates the result
//
// Rules (each violation is an InvalidArgument saying what was found):
// - Inputs broadcast (numpy rules) to exactly `out`'s shape.
// - Float data: any mix of f32/bf16/f16. Arithmetic is fp32; 16-bit inputs are
//   widened on load and the result is rounded once into `out`'s dtype.
// - Integer data (i32, i64): all operands the same integer dtype, and only the
//   ops that make sense on integers (see *SupportsIntegers in math/elementwise_ops.h).
// - `out` may be the same view as an input (in place); any other overlap between
//   `out` and an input is refused.
// - Allocating forms return a contiguous tensor from the first input's
//   allocator; its dtype is the inputs' common dtype (f32 when they differ).
#ifndef ZEROSHARD_KERNELS_ELEMENTWISE_H_
#define ZEROSHARD_KERNELS_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/kernels/math/elementwise_ops.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

absl::Status Unary(UnaryOp op, const Tensor& x, const Tensor& out);
absl::Status Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = alpha * x + beta.
absl::Status Affine(const Tensor& x, double alpha, double beta, const Tensor& out);
// out = x ** exponent (float only; exponent 2 and 0.5 take exact fast paths).
absl::Status PowScalar(const Tensor& x, double exponent, const Tensor& out);
// out = x converted to out's dtype (broadcasting x); the same as out.CopyFrom(x).
absl::Status Cast(const Tensor& x, const Tensor& out);

absl::StatusOr<Tensor> Unary(UnaryOp op, const Tensor& x);
absl::StatusOr<Tensor> Binary(BinaryOp op, const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Affine(const Tensor& x, double alpha, double beta);

// ---------------------------------------------------------------- named forms
inline absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kAdd, a, b, out);
}
inline absl::Status Sub(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kSub, a, b, out);
}
inline absl::Status Mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kMul, a, b, out);
}
inline absl::Status Div(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kDiv, a, b, out);
}
inline absl::Status Pow(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kPow, a, b, out);
}
inline absl::Status Maximum(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kMax, a, b, out);
}
inline absl::Status Minimum(const Tensor& a, const Tensor& b, const Tensor& out) {
  return Binary(BinaryOp::kMin, a, b, out);
}
inline absl::Status GeluBackward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  return Binary(BinaryOp::kGeluBackward, x, dy, dx);
}
inline absl::Status SiluBackward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  return Binary(BinaryOp::kSiluBackward, x, dy, dx);
}
inline absl::Status ReluBackward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  return Binary(BinaryOp::kReluBackward, x, dy, dx);
}
inline absl::Status Neg(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kNeg, x, out); }
inline absl::Status Exp(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kExp, x, out); }
inline absl::Status Log(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kLog, x, out); }
inline absl::Status Tanh(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kTanh, x, out); }
inline absl::Status Sqrt(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kSqrt, x, out); }
inline absl::Status Rsqrt(const Tensor& x, const Tensor& out) {
  return Unary(UnaryOp::kRsqrt, x, out);
}
inline absl::Status Relu(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kRelu, x, out); }
inline absl::Status Gelu(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kGelu, x, out); }
inline absl::Status Silu(const Tensor& x, const Tensor& out) { return Unary(UnaryOp::kSilu, x, out); }
inline absl::Status Scale(const Tensor& x, double alpha, const Tensor& out) {
  return Affine(x, alpha, 0.0, out);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_ELEMENTWISE_H_
