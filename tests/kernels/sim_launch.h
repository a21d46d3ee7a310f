// The simulated CUDA launchers (the `<name>_sim` libraries of
// tools/cuda/cuda.bzl): the same launch headers, seen with `zeroshard` renamed
// `zeroshard_sim` as those libraries were compiled, so a test links them beside
// the real kernels and calls them as `sim::LaunchSoftmax(...)`.
//
// Include this header before anything that includes the launch headers
// themselves (their include guards would hide them here). optim/adamw_math.h
// is included a second time on purpose: its guard is lifted so that
// zeroshard_sim::optim::AdamScalars exists for the AdamW launcher (and
// optim/sgd_math.h's and kernels/math/conv_geometry.h's, for SgdScalars and
// Conv2dGeometry).
#ifndef ZEROSHARD_TESTS_KERNELS_SIM_LAUNCH_H_
#define ZEROSHARD_TESTS_KERNELS_SIM_LAUNCH_H_

#include <cstdint>

#include "zeroshard/optim/adamw_math.h"

#define zeroshard zeroshard_sim
#undef ZEROSHARD_OPTIM_ADAMW_MATH_H_
#undef ZEROSHARD_OPTIM_SGD_MATH_H_
#undef ZEROSHARD_KERNELS_MATH_CONV_GEOMETRY_H_  // zeroshard_sim::Conv2dGeometry, as for AdamScalars
#include "zeroshard/collectives/cuda/convert_kernels.h"
#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/batchnorm_launch.h"
#include "zeroshard/kernels/cuda/cast_launch.h"
#include "zeroshard/kernels/cuda/conv2d_launch.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/kernels/cuda/cross_entropy_launch.h"
#include "zeroshard/kernels/cuda/device_scalar_launch.h"
#include "zeroshard/kernels/cuda/dropout_launch.h"
#include "zeroshard/kernels/cuda/elementwise_launch.h"
#include "zeroshard/kernels/cuda/embedding_launch.h"
#include "zeroshard/kernels/cuda/flat_buffer_launch.h"
#include "zeroshard/kernels/cuda/layernorm_launch.h"
#include "zeroshard/kernels/cuda/pool2d_launch.h"
#include "zeroshard/kernels/cuda/reduce_launch.h"
#include "zeroshard/kernels/cuda/softmax_launch.h"
#include "zeroshard/optim/adamw_math.h"
#include "zeroshard/optim/cuda/adamw_launch.h"
#include "zeroshard/optim/cuda/sgd_launch.h"
#include "zeroshard/runtime/cuda/strided_copy.h"
#undef zeroshard

namespace zeroshard::testing {
namespace sim = ::zeroshard_sim::cuda;
namespace sim_optim = ::zeroshard_sim::optim;
}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_SIM_LAUNCH_H_
