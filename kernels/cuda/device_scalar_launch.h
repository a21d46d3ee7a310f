// Host launchers of the small kernels that keep a step's scalars on the
// device (kernels/cuda/device_scalar.cu): the mean cross-entropy loss, the
// gradient-clipping factor, and a scale by a factor read from device memory.
// Nothing is read back; each is enqueued on `stream` and returns a cudaError_t
// as int (0 = success). One block where a scalar is made, so the bits depend
// on the data only.
#ifndef ZEROSHARD_KERNELS_CUDA_DEVICE_SCALAR_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_DEVICE_SCALAR_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

// The mean of row_loss over the rows whose target is not ignore_index: a
// double sum (each thread a contiguous run in order, then a fixed tree), over
// the count, rounded to f32 into mean[0] (NaN when no row counts); weight[0] =
// f32(1 / count) (0 when none): the backward's per-row weight.
int LaunchMeanOfValidRows(const float* row_loss, int target_dtype, const void* targets, int64_t rows,
                          int64_t ignore_index, float* mean, float* weight, void* stream);

// out[0] = f32(parts[0] + parts[1] + ... in order, in double).
int LaunchSumInOrder(const double* parts, int64_t n, float* out, void* stream);

// From the all-reduced f32 total (sum of squares, or the max |g| when
// inf_norm): norm[0] = sqrt(total) (the total itself for inf_norm), in double;
// coef = max_norm / (norm + 1e-6); factor[0] = f32(coef) when coef < 1, else 1.
int LaunchClipFactor(const float* total, bool inf_norm, double max_norm, double* norm, float* factor,
                     void* stream);

// x[i] = factor[0] * x[i] + 0 in fp32, rounded to x's float dtype (the
// arithmetic of the Affine kernel with alpha = factor[0], beta = 0).
int LaunchScaleByDeviceScalar(int dtype, void* x, int64_t n, const float* factor, void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_DEVICE_SCALAR_LAUNCH_H_
