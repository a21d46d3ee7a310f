// CPU kernels behind optim/adamw.h and optim/sgd.h: fused, vectorised
// (kernels/cpu/isa.h) and OpenMP-parallel steps over flat fp32 buffers.
//
//   std::vector<Segment> segs = {{/*offset=*/0, /*numel=*/n, /*scalars=*/0}};
//   AdamStepCpu(/*decoupled=*/true, {scalars}, segs, bufs, DType::kF32, std::nullopt);
//
// Each element is read and written once: one pass reads param, grad, exp_avg and
// exp_avg_sq and writes param, exp_avg, exp_avg_sq (and the optional low-precision
// copy of param). Arguments are checked by the callers (optim/adamw.cc, optim/sgd.cc).
#ifndef ZEROSHARD_OPTIM_CPU_OPTIM_KERNELS_H_
#define ZEROSHARD_OPTIM_CPU_OPTIM_KERNELS_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "zeroshard/optim/adamw_math.h"
#include "zeroshard/optim/sgd_math.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard::optim::cpu {

// A run of elements [offset, offset + numel) of the flat buffers, stepped with
// the `scalars`-th entry of the per-group scalars.
struct Segment {
  int64_t offset = 0;
  int64_t numel = 0;
  int scalars = 0;
};

// Base pointers of the flat buffers (element 0). `grad` holds `grad_dtype`
// elements; `param_copy`, when not null, receives the updated param rounded to
// `copy_dtype`.
struct AdamBuffers {
  float* param = nullptr;
  const void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* param_copy = nullptr;
};

struct SgdBuffers {
  float* param = nullptr;
  const void* grad = nullptr;
  float* momentum_buffer = nullptr;  // null when momentum == 0
  void* param_copy = nullptr;
};

// decoupled: AdamW (true) or Adam with L2 weight decay (false). num_threads:
// OpenMP threads for the step, 0 for the OpenMP default.
void AdamStepCpu(bool decoupled, absl::Span<const AdamScalars> scalars,
                 absl::Span<const Segment> segments, const AdamBuffers& buffers, DType grad_dtype,
                 std::optional<DType> copy_dtype, int num_threads = 0);

void SgdStepCpu(absl::Span<const SgdScalars> scalars, absl::Span<const Segment> segments,
                const SgdBuffers& buffers, DType grad_dtype, std::optional<DType> copy_dtype,
                int num_threads = 0);

// True when any of the `n` elements at `data` (a floating dtype) is Inf or NaN.
bool HasNonFiniteCpu(const void* data, DType dtype, int64_t n);

}  // namespace zeroshard::optim::cpu

#endif  // ZEROSHARD_OPTIM_CPU_OPTIM_KERNELS_H_
