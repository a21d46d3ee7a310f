// LayerNorm over the last axis: forward (saving each row's mean and rstd) and
// backward (dx, and the weight and bias gradients summed over rows).
//
//   // x [B, T, C], weight [C], bias [C] -> out [B, T, C]; mean, rstd [B, T] (f32)
//   ZS_RETURN_IF_ERROR(LayerNormForward(x, weight, bias, 1e-5, out, mean, rstd));
//   // dx [B, T, C]; dweight, dbias [C], added into the existing gradients:
//   ZS_RETURN_IF_ERROR(LayerNormBackward(dy, x, mean, rstd, weight, dx, dweight, dbias,
//                                        GradMode::kAccumulate));
//
// out = (x - mean) * rstd * weight + bias, mean and the (biased) variance of
// each row of C values, rstd = 1 / sqrt(var + eps); as torch.nn.LayerNorm.
//
// Rules (each violation is an InvalidArgument saying what was found):
// - x, out, dy, dx are [..., C], C >= 1, of x's shape; weight, bias, dweight,
//   dbias are [C]; mean and rstd have x's leading shape [...] (or [N], N the
//   number of rows) and dtype f32.
// - Optional tensors may be undefined (Tensor()): weight (taken as ones), bias
//   (zeros), mean and rstd in the forward (not saved), and any of dx, dweight,
//   dbias in the backward (not computed).
// - Float data otherwise, any mix of f32/bf16/f16; arithmetic and sums are fp32,
//   each result rounded once into its tensor's dtype. Inputs of different
//   dtypes (x and dy) are widened to f32 first (a copy).
// - Any strides; rows with a unit last stride are used where they are.
// - out may be exactly x (in place), dx exactly dy or x; no other overlaps.
// - Deterministic: dweight and dbias are summed per fixed block of rows, the
//   blocks combined in a fixed order, no atomics; the bits depend on the shapes
//   only, never on the thread count or instruction set.
#ifndef ZEROSHARD_KERNELS_LAYERNORM_H_
#define ZEROSHARD_KERNELS_LAYERNORM_H_

#include "absl/status/status.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/kernels/grad_mode.h"

namespace zeroshard {

// GPT-2's epsilon.
inline constexpr double kLayerNormDefaultEps = 1e-5;

absl::Status LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                              const Tensor& out, const Tensor& mean, const Tensor& rstd);

// `param_grad` says whether dweight and dbias are overwritten or added to
// (no default: the call site shows which).
absl::Status LayerNormBackward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& weight, const Tensor& dx,
                               const Tensor& dweight, const Tensor& dbias,
                               GradMode param_grad);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_LAYERNORM_H_
