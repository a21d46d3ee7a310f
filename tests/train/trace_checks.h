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

// The tiny GPT job both trace tests run: 4 steps, steps 1-2 traced into `trace`.
TrainOptions TinyTracedJob(const std::string& trace);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_TRAIN_TRACE_CHECKS_H_
