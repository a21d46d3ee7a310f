#include <cuda_runtime.h>

#include "zeroshard/collectives/cuda/convert_kernels.h"
#include "zeroshard/runtime/cuda/launch.cuh"
#include "zeroshard/runtime/half.h"

namespace zeroshard::cuda {
namespace {

constexpr int kThreads = 256;

template <typename Half>
__global__ void WidenKernel(const Half* __restrict__ in, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<float>(in[i]);
  }
}

template <typename Half>
__global__ void NarrowKernel(const float* __restrict__ in, Half* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = Half(in[i]);
  }
}

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

int LaunchWiden(ConvertType type, const void* in, float* out, int64_t n, void* stream) {
  if (n <= 0) return cudaSuccess;
  auto s = static_cast<cudaStream_t>(stream);
  if (type == ConvertType::kBF16) {
    Launch(WidenKernel<BFloat16>, Blocks(n), kThreads, 0, s, static_cast<const BFloat16*>(in), out,
           n);
  } else {
    Launch(WidenKernel<Float16>, Blocks(n), kThreads, 0, s, static_cast<const Float16*>(in), out,
           n);
  }
  return cudaGetLastError();
}

int LaunchNarrow(ConvertType type, const float* in, void* out, int64_t n, void* stream) {
  if (n <= 0) return cudaSuccess;
  auto s = static_cast<cudaStream_t>(stream);
  if (type == ConvertType::kBF16) {
    Launch(NarrowKernel<BFloat16>, Blocks(n), kThreads, 0, s, in, static_cast<BFloat16*>(out), n);
  } else {
    Launch(NarrowKernel<Float16>, Blocks(n), kThreads, 0, s, in, static_cast<Float16*>(out), n);
  }
  return cudaGetLastError();
}

}  // namespace zeroshard::cuda
