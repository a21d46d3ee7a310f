// Embedding lookup (a gather of weight rows by id) and its backward (a
// deterministic scatter-add of the output gradient rows into the weight gradient).
//
//   // wte [V, C], tokens [B, T] (i32 or i64) -> x [B, T, C]
//   ZS_RETURN_IF_ERROR(Embedding(wte, tokens, x));
//   // dwte [V, C] += the sum of dx[b, t] over the positions holding each id
//   ZS_RETURN_IF_ERROR(EmbeddingBackward(dx, tokens, dwte, GradMode::kAccumulate));
//
// Rules (each violation is an InvalidArgument saying what was found):
// - weight and dweight are [V, C]; ids have any shape [...] (i32 or i64); out
//   and dout are [..., C], ids' shape followed by C.
// - Every id must lie in [0, V); the first one that does not is reported with
//   its position and value, before anything is written. On a GPU with a
//   DeferredIdChecks installed on the thread (kernels/deferred_checks.h; the
//   training job does), the check runs on the device and is reported at the
//   scope's next Resolve instead (nothing is read back here).
// - Float data, any mix of f32/bf16/f16: out gets the weight rows converted
//   to its dtype; the backward sums in fp32 and rounds once into dweight
//   (kAccumulate: dweight + sum; kOverwrite: rows no id names become 0).
// - Any strides; rows with a unit last stride are used where they are.
// - Outputs may not overlap inputs.
// - Deterministic, no atomics: the backward groups the positions by id (a
//   counting sort that keeps position order on the CPU; a sort of (id,
//   position) keys on the GPU, kernels/cuda/embedding_launch.h), and each
//   (id, column block) is summed by one thread in position order; only the
//   rows named by some id are read and written (besides kOverwrite's zeroing).
//   The bits do not depend on the thread count, the instruction set or the
//   device. Nothing is read back to the host on a GPU in the backward.
#ifndef ZEROSHARD_KERNELS_EMBEDDING_H_
#define ZEROSHARD_KERNELS_EMBEDDING_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/kernels/grad_mode.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

absl::Status Embedding(const Tensor& weight, const Tensor& ids, const Tensor& out);
// Allocates out ([..., C], weight's dtype and allocator).
absl::StatusOr<Tensor> Embedding(const Tensor& weight, const Tensor& ids);

// `mode` says whether dweight is added to or overwritten (no default: the
// call site shows which).
absl::Status EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dweight,
                               GradMode mode);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_EMBEDDING_H_
