// RMSNorm over the last axis (Llama's; Hugging Face LlamaRMSNorm): forward
// (saving each row's rstd) and backward (dx, and the weight gradient summed
// over rows).
//
//   // x [B, T, C], weight [C] -> out [B, T, C]; rstd [B, T] (f32)
//   ZS_RETURN_IF_ERROR(RmsNormForward(x, weight, 1e-5, out, rstd));
//   // dx [B, T, C]; dweight [C], added into the existing gradient:
//   ZS_RETURN_IF_ERROR(RmsNormBackward(dy, x, rstd, weight, dx, dweight, GradMode::kAccumulate));
//
// out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) over each row of C
// values (no mean subtracted, no bias). Per-element math: kernels/math/rmsnorm_ops.h.
//
// Rules (each violation is an InvalidArgument saying what was found), as LayerNorm's:
// - x, out, dy, dx are [..., C], C >= 1, of x's shape; weight and dweight are
//   [C]; rstd has x's leading shape [...] (or [N], N the number of rows) and
//   dtype f32.
// - Optional tensors may be undefined (Tensor()): weight (taken as ones), rstd
//   in the forward (not saved), dx or dweight in the backward (not computed).
//   The backward needs the rstd the forward saved.
// - Float data otherwise, any mix of f32/bf16/f16; arithmetic and sums are fp32,
//   each result rounded once into its tensor's dtype (computed in fp32, as
//   transformers does, which casts to f32 first). Inputs of different dtypes (x
//   and dy) are widened to f32 first (a copy).
// - Any strides on the CPU; on CUDA, rows equally spaced with a unit last
//   stride (contiguous, or a narrowed last axis), rstd contiguous.
// - out may be exactly x (in place), dx exactly dy or x; no other overlaps.
// - Deterministic: dweight is summed per fixed block of rows, the blocks
//   combined in a fixed order, no atomics; the bits depend on the shapes only,
//   never on the thread count or instruction set.
#ifndef ZEROSHARD_KERNELS_RMSNORM_H_
#define ZEROSHARD_KERNELS_RMSNORM_H_

#include "absl/status/status.h"
#include "zeroshard/kernels/grad_mode.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

absl::Status RmsNormForward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                            const Tensor& rstd);

// `param_grad` says whether dweight is overwritten or added to.
absl::Status RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                             GradMode param_grad);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_RMSNORM_H_
