// ReduceBuffers: the CPU loop behind every reduction of the in-process and
// MPI backends. It combines n input buffers element by element in rank order,
// accumulating in fp32 for 16-bit floats (Note [Reduction numerics] in
// collectives/reduction.h), and writes the result to one or more outputs.
//
//   // out[i] = in0[i] + in1[i] + in2[i] (fp32 accumulation, one rounding)
//   const void* ins[] = {in0, in1, in2};
//   void* outs[] = {out};
//   ReduceBuffers(DType::kBF16, ReduceOp::kSum, ins, outs, count);
//
// Layout: every buffer holds `count` contiguous elements of `dtype`. An output
// may be the very same pointer as an input (in place); any other overlap is
// not allowed. Work goes in chunks of a few KiB held in an L1-resident fp32
// accumulator, so n inputs cost one pass over memory. AVG divides by
// inputs.size(). The hot loops are compiled for AVX-512, AVX2 and baseline
// x86-64 and the best is picked at load time (GCC target_clones).
#ifndef ZEROSHARD_COLLECTIVES_CPU_REDUCE_H_
#define ZEROSHARD_COLLECTIVES_CPU_REDUCE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "zeroshard/collectives/reduction.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard {

// Requires at least one input; with one input it is a copy (AVG and MAX of
// one value are the value).
void ReduceBuffers(DType dtype, ReduceOp op, absl::Span<const void* const> inputs,
                   absl::Span<void* const> outputs, int64_t count);

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_CPU_REDUCE_H_
