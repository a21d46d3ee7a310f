// Differentiable ops on Variables. Each runs the kernel of the same name on
// the values and, when a gradient is needed, records a node that saves exactly
// what its backward reads.
//
//   ZS_ASSIGN_OR_RETURN(Variable h, ops::Linear(x, w, b));    // x [..., in], w [out, in]
//   ZS_ASSIGN_OR_RETURN(Variable a, ops::Gelu(h));
//   ZS_ASSIGN_OR_RETURN(Variable loss, ops::MeanAll(a));
//
// Shapes and dtypes follow the kernels (kernels/*.h); errors are the kernels'
// Status values. Broadcasting ops reduce their gradients back to each input's
// shape. View ops return views of the input's storage in forward.
#ifndef ZEROSHARD_AUTOGRAD_OPS_H_
#define ZEROSHARD_AUTOGRAD_OPS_H_

#include "absl/status/statusor.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/math/philox.h"
#include "zeroshard/kernels/matmul.h"
#include "zeroshard/kernels/rope.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::ops {

using autograd::Variable;

// ---------------------------------------------------------------- elementwise
absl::StatusOr<Variable> Add(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Sub(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Div(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Neg(const Variable& x);
absl::StatusOr<Variable> Exp(const Variable& x);
absl::StatusOr<Variable> Log(const Variable& x);
absl::StatusOr<Variable> Tanh(const Variable& x);
absl::StatusOr<Variable> Sqrt(const Variable& x);
absl::StatusOr<Variable> Rsqrt(const Variable& x);
absl::StatusOr<Variable> Relu(const Variable& x);
absl::StatusOr<Variable> Gelu(const Variable& x);  // tanh form
absl::StatusOr<Variable> Sigmoid(const Variable& x);
absl::StatusOr<Variable> Square(const Variable& x);
absl::StatusOr<Variable> PowScalar(const Variable& x, double exponent);
// alpha * x + beta
absl::StatusOr<Variable> Affine(const Variable& x, double alpha, double beta = 0.0);
inline absl::StatusOr<Variable> Scale(const Variable& x, double alpha) { return Affine(x, alpha); }
// A copy converted to `dtype` (gradients convert back).
absl::StatusOr<Variable> Cast(const Variable& x, DType dtype);

// ---------------------------------------------------------------- linear algebra
absl::StatusOr<Variable> MatMul(const Variable& a, const Variable& b,
                                const MatMulOptions& options = {});
// y = x @ w^T + b, x [..., in], w [out, in], b [out] (b may be undefined).
absl::StatusOr<Variable> Linear(const Variable& x, const Variable& w, const Variable& b);
// GPT-2's MLP as one op: gelu(x w1^T + b1) w2^T + b2 (GELU's tanh form; b1,
// b2 may be undefined). On the CPU the bits of Linear, Gelu, Linear; on CUDA
// GELU rides in the first GEMM's epilogue (keeping its input for the
// backward) and GELU's backward in the second layer's input-gradient GEMM
// (Note [GELU in the GEMM], kernels/cuda/gemm_cublaslt.h). Saves what the
// three ops would: x, GELU's input and output.
absl::StatusOr<Variable> GeluMlp(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2,
                                 const Variable& b2);

// ---------------------------------------------------------------- reductions
absl::StatusOr<Variable> Sum(const Variable& x, int64_t dim, bool keepdim = false);
absl::StatusOr<Variable> Mean(const Variable& x, int64_t dim, bool keepdim = false);
// Sum / mean of all elements, as a 0-d (shape []) f32 variable.
absl::StatusOr<Variable> SumAll(const Variable& x);
absl::StatusOr<Variable> MeanAll(const Variable& x);

// ---------------------------------------------------------------- views and copies
absl::StatusOr<Variable> Reshape(const Variable& x, absl::Span<const int64_t> shape);
absl::StatusOr<Variable> Transpose(const Variable& x, int64_t dim0, int64_t dim1);
absl::StatusOr<Variable> Permute(const Variable& x, absl::Span<const int64_t> dims);
absl::StatusOr<Variable> Narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
absl::StatusOr<Variable> Expand(const Variable& x, absl::Span<const int64_t> shape);
absl::StatusOr<Variable> Contiguous(const Variable& x);
// Views of consecutive pieces of `dim` with the given sizes (summing to its
// size); the backward writes every piece's gradient into one buffer.
absl::StatusOr<std::vector<Variable>> Split(const Variable& x, int64_t dim,
                                            absl::Span<const int64_t> sizes);

// ---------------------------------------------------------------- nn ops
// softmax(scale q k^T + causal mask) v over q [B, H, T, D] and k, v
// [B, Hkv, T, D], Hkv dividing H (grouped-query attention, multi-query at
// Hkv = 1; Note [Grouped-query attention] in kernels/attention.h): the
// gradients of k and v have k's and v's shapes. Saves the row log-sum-exp
// instead of the probabilities (backward recomputes them).
absl::StatusOr<Variable> Attention(const Variable& q, const Variable& k, const Variable& v,
                                   const AttentionOptions& options = {});
// Attention over a packed projection (Note [Packed attention]): qkv [B, T, 3C]
// holds q, k and v side by side (C = heads * D each, heads of D in order), the
// result is [B, T, C] with the heads side by side, and the backward writes one
// [B, T, 3C] gradient. The same kernels as Attention over strided views: no
// head split, merge or gradient concatenation is copied.
absl::StatusOr<Variable> QkvAttention(const Variable& qkv, int64_t heads,
                                      const AttentionOptions& options = {});
// Softmax / log-softmax over the last axis.
absl::StatusOr<Variable> Softmax(const Variable& x);
absl::StatusOr<Variable> LogSoftmax(const Variable& x);
// LayerNorm over the last axis with weight and bias [C] (either may be undefined).
absl::StatusOr<Variable> LayerNorm(const Variable& x, const Variable& weight, const Variable& bias,
                                   double eps = 1e-5);
// Rows of weight [V, C] picked by ids [...] (i32/i64): [..., C].
absl::StatusOr<Variable> Embedding(const Variable& weight, const Tensor& ids);
// Mean cross-entropy of logits [..., V] against targets [...] over the rows
// whose target is not ignore_index: a 0-d f32 variable.
absl::StatusOr<Variable> CrossEntropy(const Variable& logits, const Tensor& targets,
                                      const CrossEntropyOptions& options = {});
// Inverted dropout with probability p from `generator` (which advances); the
// identity when !training or p == 0. Backward replays the same stream.
absl::StatusOr<Variable> Dropout(const Variable& x, double p, PhiloxGenerator& generator,
                                 bool training);

// ---------------------------------------------------------------- Llama ops
// RMSNorm over the last axis (transformers' LlamaRMSNorm, in fp32, rounded
// once): x rsqrt(mean(x^2) + eps) weight; weight [C] may be undefined (ones).
// Saves x and the row rstd.
absl::StatusOr<Variable> RmsNorm(const Variable& x, const Variable& weight, double eps);
// SiLU (swish): x sigmoid(x), elementwise. Saves x.
absl::StatusOr<Variable> Silu(const Variable& x);
// The SwiGLU gate, fused: silu(gate) * up (one shape). Saves gate and up.
absl::StatusOr<Variable> SiluGate(const Variable& gate, const Variable& up);
// Rotary position embedding of x [B, T, H, D] (kernels/rope.h), out of place;
// the backward is the inverse rotation. Saves nothing but the tables.
absl::StatusOr<Variable> Rope(const Variable& x, const RopeTables& tables);

}  // namespace zeroshard::ops

#endif  // ZEROSHARD_AUTOGRAD_OPS_H_
