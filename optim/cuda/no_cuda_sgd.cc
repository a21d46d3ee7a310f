// CPU-only build: the launcher of optim/cuda/sgd_launch.h exists so that
// optim/sgd.cc links, and reports "not built".
#include "zeroshard/optim/cuda/sgd_launch.h"

namespace zeroshard::optim::cuda {

int LaunchSgdStep(const SgdScalars&, float*, const void*, int, float*, void*, int, int64_t, void*) {
  return 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}

}  // namespace zeroshard::optim::cuda
