// The step's scalars on the device: see device_scalar_launch.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/device_scalar_launch.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;

template <typename I>
__global__ void MeanOfValidRows(const float* row_loss, const I* targets, int64_t rows, int64_t ignore,
                                float* mean, float* weight) {
  __shared__ double sums[kWarp];
  __shared__ double counts[kWarp];
  const int64_t per = (rows + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * per;
  double acc = 0.0, valid = 0.0;
  for (int64_t r = begin; r < begin + per && r < rows; ++r) {
    if (static_cast<int64_t>(targets[r]) == ignore) continue;
    acc += static_cast<double>(row_loss[r]);
    valid += 1.0;
  }
  acc = BlockSumD(acc, sums);
  valid = BlockSumD(valid, counts);  // exact: integers below 2^53
  if (threadIdx.x == 0) {
    // NaN when no row counts, as the CPU's mean.
    mean[0] = valid > 0 ? static_cast<float>(acc / valid) : kInfF * 0.0f;
    weight[0] = valid > 0 ? static_cast<float>(1.0 / valid) : 0.0f;
  }
}

__global__ void SumInOrder(const double* parts, int64_t n, float* out) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += parts[i];
  out[0] = static_cast<float>(acc);
}

__global__ void ClipFactor(const float* total, int inf_norm, double max_norm, double* norm, float* factor) {
  const double t = static_cast<double>(total[0]);
  const double nrm = inf_norm != 0 ? t : sqrt(t);
  const double coef = max_norm / (nrm + 1e-6);
  norm[0] = nrm;
  factor[0] = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

template <typename T>
__global__ void ScaleByDeviceScalar(T* x, int64_t n, const float* factor) {
  const float a = factor[0];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    x[i] = FromFloat<T>(a * ToFloat(x[i]) + 0.0f);
  }
}

}  // namespace

int LaunchMeanOfValidRows(const float* row_loss, int target_dtype, const void* targets, int64_t rows,
                          int64_t ignore_index, float* mean, float* weight, void* stream) {
  return DispatchIndex(target_dtype, [&]<typename I>() {
    Launch(MeanOfValidRows<I>, 1, kThreads, 0, AsStream(stream), row_loss, static_cast<const I*>(targets),
           rows, ignore_index, mean, weight);
    return Launched();
  });
}

int LaunchSumInOrder(const double* parts, int64_t n, float* out, void* stream) {
  Launch(SumInOrder, 1, 1, 0, AsStream(stream), parts, n, out);
  return Launched();
}

int LaunchClipFactor(const float* total, bool inf_norm, double max_norm, double* norm, float* factor,
                     void* stream) {
  Launch(ClipFactor, 1, 1, 0, AsStream(stream), total, inf_norm ? 1 : 0, max_norm, norm, factor);
  return Launched();
}

int LaunchScaleByDeviceScalar(int dtype, void* x, int64_t n, const float* factor, void* stream) {
  if (n == 0) return 0;
  return DispatchFloat(dtype, [&]<typename T>() {
    Launch(ScaleByDeviceScalar<T>, GridFor(n, kThreads), kThreads, 0, AsStream(stream), static_cast<T*>(x), n,
           factor);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
