// Fused cross-entropy (log-softmax + negative log-likelihood) over the last
// axis, with an ignore index, forward and backward.
//
//   // logits [B, T, V] (any float dtype), targets [B, T] (i32 or i64)
//   ZS_ASSIGN_OR_RETURN(CrossEntropyStats s,
//                       CrossEntropyForward(logits, targets, losses, lse));  // losses, lse [B, T]
//   // mean reduction: every non-ignored row's loss has weight 1 / valid_rows
//   ZS_ASSIGN_OR_RETURN(Tensor dloss, Tensor::Full({1}, 1.0 / s.valid_rows, DType::kF32));
//   ZS_RETURN_IF_ERROR(CrossEntropyBackward(logits, targets, lse, dloss, dlogits));
//   // or in place, overwriting the logits with their gradient (saves a [B*T, V] buffer):
//   ZS_RETURN_IF_ERROR(CrossEntropyBackward(logits, targets, lse, dloss, logits));
//
// Per row r with target t = targets[r]:
//   lse[r]     = log(sum_v exp(logits[r, v]))                      (fp32, saved for backward)
//   losses[r]  = lse[r] - logits[r, t], or 0 when t == ignore_index
//   dlogits[r] = (softmax(logits[r]) - onehot(t)) * dlosses[r], or 0 when t == ignore_index
// The reduction over rows is the caller's: dlosses holds each row's weight
// (1 / valid_rows for a mean, 1 for a sum), or one value for every row.
// CrossEntropyStats gives the mean over non-ignored rows (NaN when all are
// ignored, as PyTorch's reduction='mean').
//
// Rules (each violation is an InvalidArgument saying what was found):
// - logits and dlogits are [..., V], V >= 1, float (any mix of f32/bf16/f16);
//   arithmetic is fp32 and dlogits is rounded once into its dtype.
// - targets, losses, lse and dlosses hold one value per row: the leading shape
//   [...] of logits, or [rows]; dlosses may also be a single value (shape [] or
//   [1]). targets are i32 or i64; lse is f32; losses and dlosses any float.
// - A target outside [0, V) that is not ignore_index is refused, naming its
//   row and value (ignore_index may itself lie inside [0, V)).
// - losses and lse are optional in the forward (undefined: not written).
// - dlogits may be exactly the logits view (in place); no other overlaps.
// - The forward reads each row of logits from memory once (an online
//   max/sum per block of the row, math/softmax_ops.h). Results do not depend on
//   the thread count or the instruction set.
#ifndef ZEROSHARD_KERNELS_CROSS_ENTROPY_H_
#define ZEROSHARD_KERNELS_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct CrossEntropyOptions {
  // Rows whose target equals this contribute no loss and get zero gradient
  // (PyTorch's default).
  int64_t ignore_index = -100;
};

struct CrossEntropyStats {
  int64_t valid_rows = 0;  // rows whose target is not ignore_index
  double sum_loss = 0;     // sum of their fp32 losses, added in row order in double
  double mean_loss = 0;    // sum_loss / valid_rows; NaN when valid_rows == 0
};

absl::StatusOr<CrossEntropyStats> CrossEntropyForward(const Tensor& logits, const Tensor& targets,
                                                      const Tensor& losses, const Tensor& lse,
                                                      const CrossEntropyOptions& options = {});

absl::Status CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                  const Tensor& dlosses, const Tensor& dlogits,
                                  const CrossEntropyOptions& options = {});

// Allocating form: f32 losses and lse of targets' shape, from logits' allocator.
struct CrossEntropyResult {
  Tensor losses;
  Tensor lse;
  CrossEntropyStats stats;
};
absl::StatusOr<CrossEntropyResult> CrossEntropy(const Tensor& logits, const Tensor& targets,
                                                const CrossEntropyOptions& options = {});

// The mean loss on a GPU with nothing read back inside: the forward kernel's
// per-row losses (and lse, f32 contiguous, written) averaged on the device
// over the rows whose target is not ignore_index (kernels/device_scalar.h).
// The targets' range check runs on the device into the thread's
// DeferredIdChecks when one is installed (kernels/deferred_checks.h; a
// failing target then counts as ignore_index until the scope reports it),
// else they are read back and checked here at once. CUDA tensors only.
struct CrossEntropyOnDevice {
  Tensor loss;     // f32 [], the mean (NaN when every row is ignored)
  Tensor weight;   // f32 [], 1 / valid rows (0 when none): the backward's dlosses scale
  Tensor targets;  // the targets the kernels read (sanitized i64 copy when deferred)
};
absl::StatusOr<CrossEntropyOnDevice> CrossEntropyMeanOnDevice(const Tensor& logits, const Tensor& targets,
                                                              const Tensor& lse,
                                                              const CrossEntropyOptions& options = {});

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_CROSS_ENTROPY_H_
