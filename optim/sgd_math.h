// Per-element SGD update math (momentum, dampening, nesterov, weight decay),
// used by the CPU kernel (optim/cpu/optim_kernels.cc) and the CUDA one
// (optim/cuda/sgd.cu); ZS_HOST_DEVICE as optim/adamw_math.h.
//
//   const SgdScalars s = MakeSgdScalars(hyper, /*first_step=*/state.step == 0, lr, wd, grad_scale);
//   for (int64_t i = 0; i < n; ++i) SgdMomentumUpdate(p[i], g[i], buf[i], s);
//   for (int64_t i = 0; i < n; ++i) SgdUpdate(p[i], g[i], s);      // momentum == 0: no buffer
//
// Exactly torch.optim.SGD (PyTorch 1.13, single-tensor path), in float, with the
// per-step scalars computed in double and rounded once:
//
//   g   = grad * grad_scale
//   g   = g + weight_decay * p               (only when weight_decay != 0)
//   buf = g                                  (first step: the buffer starts as the gradient,
//                                             without dampening)
//   buf = buf * momentum + (1 - dampening) * g   (later steps)
//   g   = nesterov ? g + momentum * buf : buf
//   p   = p + (-lr) * g
#ifndef ZEROSHARD_OPTIM_SGD_MATH_H_
#define ZEROSHARD_OPTIM_SGD_MATH_H_

#include "zeroshard/runtime/host_device.h"

namespace zeroshard::optim {

// The optimizer's hyperparameters that do not vary by parameter group.
struct SgdHyper {
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
};

struct SgdScalars {
  float momentum = 0;
  float one_minus_dampening = 1;
  float neg_lr = 0;
  float weight_decay = 0;
  float grad_scale = 1;
  // Flags as floats, 1 or 0: GCC vectorises a select on a float comparison but
  // turns a test of a bool member into a branch, which stops the vectoriser.
  float first_step = 1;  // the momentum buffer is initialised from the gradient
  float nesterov = 0;
};

inline SgdScalars MakeSgdScalars(const SgdHyper& hyper, bool first_step, double lr,
                                 double weight_decay, double grad_scale = 1.0) {
  SgdScalars s;
  s.momentum = static_cast<float>(hyper.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - hyper.dampening);
  s.neg_lr = static_cast<float>(-lr);
  s.weight_decay = static_cast<float>(weight_decay);
  s.grad_scale = static_cast<float>(grad_scale);
  s.first_step = first_step ? 1.0f : 0.0f;
  s.nesterov = hyper.nesterov ? 1.0f : 0.0f;
  return s;
}

// The gradient after scaling and the L2 term (selects, so loops stay branch-free).
ZS_HOST_DEVICE inline float SgdGradient(float p, float grad, const SgdScalars& s) {
  const float g = grad * s.grad_scale;
  return s.weight_decay != 0.0f ? g + s.weight_decay * p : g;
}

// SGD without momentum (torch: momentum == 0, no buffer).
ZS_HOST_DEVICE inline void SgdUpdate(float& p, float grad, const SgdScalars& s) {
  const float g = SgdGradient(p, grad, s);
  p = p + s.neg_lr * g;
}

// SGD with a momentum buffer.
ZS_HOST_DEVICE inline void SgdMomentumUpdate(float& p, float grad, float& buf,
                                             const SgdScalars& s) {
  const float g = SgdGradient(p, grad, s);
  const float b = s.first_step != 0.0f ? g : buf * s.momentum + s.one_minus_dampening * g;
  const float d = s.nesterov != 0.0f ? g + s.momentum * b : b;
  buf = b;
  p = p + s.neg_lr * d;
}

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_SGD_MATH_H_
