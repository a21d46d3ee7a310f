// Per-element Adam / AdamW update math, shared by the CPU kernel
// (optim/cpu/optim_kernels.cc, vectorised through RunWithIsa) and the CUDA one,
// so the CPU tests check the arithmetic the GPU runs.
//
//   const AdamScalars s = MakeAdamScalars(hyper, /*step=*/t, lr, weight_decay, grad_scale);
//   for (int64_t i = 0; i < n; ++i) AdamWUpdate(p[i], g[i], m[i], v[i], s);   // torch.optim.AdamW
//   for (int64_t i = 0; i < n; ++i) AdamUpdate(p[i], g[i], m[i], v[i], s);    // torch.optim.Adam
//
// The float operations and their order are those of PyTorch 1.13's
// single-tensor (for-loop) implementations, with every per-step scalar computed
// on the host in double and rounded once to float, as PyTorch does when it
// passes a Python float to a float tensor op:
//
//   g     = grad * grad_scale                      (grad_scale = clip coefficient / loss scale)
//   Adam:  g = g + weight_decay * p                (L2 penalty, torch.optim.Adam)
//   AdamW: p = p * (1 - lr * weight_decay)         (decoupled decay, torch.optim.AdamW)
//   m     = m * beta1 + (1 - beta1) * g
//   v     = v * beta2 + ((1 - beta2) * g) * g
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps      (eps added to sqrt(v_hat), as PyTorch)
//   p     = p + ((-lr / (1 - beta1^t)) * m) / denom
//
// t is the 1-based step count after this step. The build disables implicit
// FMA contraction (.bazelrc), so every instruction set rounds the same way and
// the results are bitwise equal across them (PyTorch itself uses FMA in its
// vector paths, so it agrees with this to a few ulp, not bitwise).
//
// Host-only parts (MakeAdamScalars) use <cmath> in double; the per-element
// functions are plain float arithmetic (no libm call except sqrt, which every
// target has as one correctly rounded instruction).
#ifndef ZEROSHARD_OPTIM_ADAMW_MATH_H_
#define ZEROSHARD_OPTIM_ADAMW_MATH_H_

#include <cmath>
#include <cstdint>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard::optim {

// sqrt as one correctly rounded instruction (sqrtss / vsqrtps / sqrt.rn.f32).
ZS_HOST_DEVICE inline float SqrtF(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return __builtin_sqrtf(x);
#endif
}

// The optimizer's hyperparameters that do not vary by parameter group.
struct AdamHyper {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// Everything one step of one parameter group needs, rounded to float.
struct AdamScalars {
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float neg_step_size = 0;            // -lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1;    // sqrt(1 - beta2^t)
  float eps = 1e-8f;
  float decay_factor = 1;             // AdamW: 1 - lr * weight_decay
  float weight_decay = 0;             // Adam: the L2 coefficient
  float grad_scale = 1;               // multiplies the stored gradient
};

// `step` is the 1-based count including this step (t above).
inline AdamScalars MakeAdamScalars(const AdamHyper& hyper, int64_t step, double lr,
                                   double weight_decay, double grad_scale = 1.0) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(hyper.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(hyper.beta2, t);
  AdamScalars s;
  s.beta1 = static_cast<float>(hyper.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  s.beta2 = static_cast<float>(hyper.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(hyper.eps);
  s.decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  s.weight_decay = static_cast<float>(weight_decay);
  s.grad_scale = static_cast<float>(grad_scale);
  return s;
}

// The moment updates and the parameter step, after weight decay has been applied.
ZS_HOST_DEVICE inline void AdamMomentsAndStep(float& p, float g, float& m, float& v,
                                              const AdamScalars& s) {
  const float m1 = m * s.beta1 + s.one_minus_beta1 * g;
  const float v1 = v * s.beta2 + s.one_minus_beta2 * g * g;
  const float denom = SqrtF(v1) / s.bias_correction2_sqrt + s.eps;
  p = p + s.neg_step_size * m1 / denom;
  m = m1;
  v = v1;
}

// torch.optim.AdamW: decoupled weight decay (decay_factor), then Adam.
ZS_HOST_DEVICE inline void AdamWUpdate(float& p, float grad, float& m, float& v,
                                       const AdamScalars& s) {
  const float g = grad * s.grad_scale;
  p = p * s.decay_factor;
  AdamMomentsAndStep(p, g, m, v, s);
}

// torch.optim.Adam: weight decay as an L2 term added to the gradient. PyTorch
// skips the add when weight_decay is 0 (so g stays -0.0 and NaN/Inf params do
// not leak into g); the select keeps that exactly.
ZS_HOST_DEVICE inline void AdamUpdate(float& p, float grad, float& m, float& v,
                                      const AdamScalars& s) {
  float g = grad * s.grad_scale;
  g = s.weight_decay != 0.0f ? g + s.weight_decay * p : g;
  AdamMomentsAndStep(p, g, m, v, s);
}

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_ADAMW_MATH_H_
