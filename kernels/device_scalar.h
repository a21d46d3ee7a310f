// A training step's scalars kept on a GPU (kernels/cuda/device_scalar_launch.h):
// the mean cross-entropy loss, the pieces of gradient-norm clipping, and a
// scale by a factor in device memory. CUDA tensors only (InvalidArgument
// otherwise); nothing is read back, so none of these synchronises the host.
// Doubles live in i64 tensors (8-byte storage; there is no f64 dtype): read
// one back with CopyToHost into a double.
//
//   // clipping without a host read: per-unit sums of squares, in order
//   ZS_RETURN_IF_ERROR(SumOfSquaresOnDevice(grad_shard, parts, u));   // parts: i64 [U] holding doubles
//   ZS_RETURN_IF_ERROR(SumInOrder(parts, total));                      // total: f32 [1]
//   ... all-reduce total on the device (NCCL) ...
//   ZS_RETURN_IF_ERROR(ClipFactor(total, 1.0, norm, factor));          // norm: one double (i64 storage), factor f32 [1]
//   ZS_RETURN_IF_ERROR(ScaleByDeviceScalar(grad_shard, factor));
#ifndef ZEROSHARD_KERNELS_DEVICE_SCALAR_H_
#define ZEROSHARD_KERNELS_DEVICE_SCALAR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// mean (f32, one element) = the mean of row_loss (f32, contiguous) over the
// rows whose target (i32/i64, as many) is not ignore_index, NaN when none;
// weight (f32, one element) = 1 / that count, 0 when none.
absl::Status MeanOfValidRows(const Tensor& row_loss, const Tensor& targets, int64_t ignore_index,
                             const Tensor& mean, const Tensor& weight);

// parts[index] (a double in an i64 tensor) = the sum of squares of x (a float tensor), in double:
// SumOfSquares' kernel and order, left on the device.
absl::Status SumOfSquaresOnDevice(const Tensor& x, const Tensor& parts, int64_t index);

// out (f32, one element) = f32(sum of parts (doubles), in order, in double).
absl::Status SumInOrder(const Tensor& parts, const Tensor& out);

// From total (f32, one element: the all-reduced sum of squares):
// norm (a double) = sqrt(total), factor (f32) = min(1, max_norm / (norm + 1e-6)).
absl::Status ClipFactor(const Tensor& total, double max_norm, const Tensor& norm, const Tensor& factor);

// x = factor[0] * x (x a contiguous float tensor, factor f32 one element).
absl::Status ScaleByDeviceScalar(const Tensor& x, const Tensor& factor);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_DEVICE_SCALAR_H_
