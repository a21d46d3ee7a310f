// Dropout from a counter-based RNG: the mask is a function of (seed, stream
// offset, element index) only, so the CPU kernel here and a CUDA kernel draw
// the same mask, and backward recomputes it instead of storing it.
//
//   PhiloxGenerator gen{.seed = 1234};                  // kernels/math/philox.h
//   const PhiloxStream s = gen.Next(x.numel());         // saved for backward
//   ZS_RETURN_IF_ERROR(Dropout(x, /*p=*/0.1, s, y));     // y = x * mask / (1 - p)
//   ZS_RETURN_IF_ERROR(DropoutBackward(dy, 0.1, s, dx)); // dx = dy * mask / (1 - p), same mask
//
// Element i (row-major index into the tensor, whatever its strides) is kept
// iff PhiloxUniform(word(s.offset + i)) < float(1 - p), and then scaled by
// float(1 / (1 - p)); dropped elements are exactly 0. The exact rule is
// kernels/math/dropout_math.h, the stream layout Note [Philox stream layout]
// in kernels/math/philox.h. Consequences the tests check:
// - the same (seed, offset + i) gives the same decision for any shape, and a
//   call over a tensor equals calls over its pieces with offsets advanced by
//   the elements before each piece;
// - p = 0 is the identity, p = 1 gives zeros;
// - DropoutBackward(dy, p, s, dx) applies the identical mask and scale.
//
// Rules (each violation is an InvalidArgument saying what was found):
// - p in [0, 1]; x and out (dy and dx) have the same shape and the same float
//   dtype (f32, bf16, f16; 16-bit values are scaled in fp32, rounded once);
// - out may be the same view as x (in place); any other overlap is refused.
// Successive calls must not reuse a stream: take each from PhiloxGenerator::Next.
#ifndef ZEROSHARD_KERNELS_DROPOUT_H_
#define ZEROSHARD_KERNELS_DROPOUT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/kernels/math/philox.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// out = x * mask / (1 - p).
absl::Status Dropout(const Tensor& x, double p, const PhiloxStream& stream, const Tensor& out);
absl::StatusOr<Tensor> Dropout(const Tensor& x, double p, const PhiloxStream& stream);

// dx = dy * mask / (1 - p), the mask regenerated from the forward call's stream.
absl::Status DropoutBackward(const Tensor& dy, double p, const PhiloxStream& stream,
                             const Tensor& dx);

// The mask itself, as 0 / 1 values in `mask`'s float dtype (tests, debugging;
// the training path never materialises it).
absl::Status DropoutMask(double p, const PhiloxStream& stream, const Tensor& mask);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_DROPOUT_H_
