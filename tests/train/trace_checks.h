// Checks of a merged job trace (Note [Trace layout] in runtime/trace.h), shared
// by the in-process and the MPI tests: one process per rank, each named, with
// its steps, unit compute and waits; every communication span of a collective
// the sharding runtime issued lies inside that collective's issue-to-completion
// span, and every such span holds at least one; trace_summary reads it.
#ifndef ZEROSHARD_TESTS_TRAIN_TRACE_CHECKS_H_
#define ZEROSHARD_TESTS_TRAIN_TRACE_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard::testing {

// OK, or what the trace at `path` lacks. `world` ranks, `steps` traced steps.
absl::Status CheckMergedJobTrace(const std::string& path, int world, int steps);

// The GPU rows of a job traced on CUDA devices (Note [GPU spans] in
// runtime/gpu_timeline.h), per rank: a "gpu compute" row (tid 1000) of "gpu
// op", "gpu compute" and "gpu wait" spans and "gpu comm <communicator>" rows
// (1000 + a communicator's row) of "gpu comm" spans, each with its
// clock_error_us. Each GPU span follows its host twin (same name, same
// occurrence: the op, unit, wait, or the collective's issued span), starting
// no earlier than the twin minus the span's error; ops of the compute row
// and collectives of a comm row do not overlap (stream order); every span
// lies in a step window. `inside_launch` (the simulator, where work runs at
// launch): each also ends by its twin's end (a collective: its launch, the
// host "comm" span). Every GPU op has a host twin; with `all_ops` (no op ran
// inside another) every host op has a GPU one.
absl::Status CheckGpuRows(const std::string& path, int world, bool inside_launch, bool all_ops = true);

// The tiny GPT job both trace tests run: 4 steps, steps 1-2 traced into `trace`.
TrainOptions TinyTracedJob(const std::string& trace);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_TRAIN_TRACE_CHECKS_H_
