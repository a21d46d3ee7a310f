// ZS_HOST_DEVICE: marks per-element math that both the CPU kernels and the CUDA
// kernels call, so CPU tests exercise the very code the GPU runs.
//
//   ZS_HOST_DEVICE inline float Gelu(float x) { ... }
//
// Under nvcc it expands to `__host__ __device__`; under a host compiler, to nothing.
#ifndef ZEROSHARD_RUNTIME_HOST_DEVICE_H_
#define ZEROSHARD_RUNTIME_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define ZS_HOST_DEVICE __host__ __device__
#else
#define ZS_HOST_DEVICE
#endif

#endif  // ZEROSHARD_RUNTIME_HOST_DEVICE_H_
