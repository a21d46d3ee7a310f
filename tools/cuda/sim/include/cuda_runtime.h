// <cuda_runtime.h> for kernels compiled by the host compiler into a simulated
// library (`<name>_sim`, tools/cuda/cuda.bzl): the spellings and launch
// machinery of tools/cuda/sim/cuda_sim.h instead of the CUDA runtime's.
#include "zeroshard/tools/cuda/sim/cuda_sim.h"
