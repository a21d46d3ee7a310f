// StepOptions: what one optimizer step takes besides the parameters, the
// gradients and the state (shared by AdamWStep and SgdStep).
//
//   StepOptions step;
//   step.grad_scale = clip.clip_coef / loss_scale;   // g = grad * grad_scale, in the same pass
//   step.param_copy = bf16_shard;                     // also write param rounded to bf16
//   ZS_RETURN_IF_ERROR(AdamWStep(options, groups, param, grad, state, step));
//
// Note [Zero grad]: a step only reads the gradient; it never clears it. The
// owner of the flat gradient buffer chooses between torch's two zero_grad
// modes: "set to zero" (Fill(0), the next backward accumulates with +=), or
// "drop" (set_to_none: the buffer is marked empty and the next backward writes
// its first contribution with = instead of +=, saving a pass over the buffer).
// Either way the optimizer sees the same values; with "drop", a step must not
// run on a buffer no backward has written since.
#ifndef ZEROSHARD_OPTIM_STEP_OPTIONS_H_
#define ZEROSHARD_OPTIM_STEP_OPTIONS_H_

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::optim {

struct StepOptions {
  // Multiplies every gradient element as it is read: the clip coefficient
  // (optim/grad_clip.h), times 1 / loss_scale when gradients are loss-scaled.
  // Must be finite and >= 0.
  double grad_scale = 1.0;
  // When defined: a contiguous f32/bf16/f16 CPU tensor with the param's
  // element count that receives the updated parameters, rounded to nearest-even
  // (the param_dtype copy of mixed precision), for the stepped elements only.
  Tensor param_copy;
  // OpenMP threads for the step; 0 uses the OpenMP default (OMP_NUM_THREADS or
  // the cores). Ranks that run as threads of one process can pass 1 so that
  // their steps do not oversubscribe the cores. Results do not depend on it.
  int num_threads = 0;
};

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_STEP_OPTIONS_H_
