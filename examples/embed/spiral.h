// The embedding example: a user's own Module (a residual MLP classifying
// three interleaved spirals), wrapped in a ShardedModel and trained with
// TrainStep and RunLoop (train/train_step.h, train/loop.h), validated with
// ValStep, with the strategy helpers of collectives/objects.h: no config
// system, no GPT, a few dozen lines of training code (spiral.cc, RunSpiral). embed_example.cc is its command line.
#ifndef ZEROSHARD_EXAMPLES_EMBED_SPIRAL_H_
#define ZEROSHARD_EXAMPLES_EMBED_SPIRAL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/sharding/sharding_options.h"

namespace zeroshard::example {

struct SpiralOptions {
  int64_t width = 64;          // hidden width
  int64_t blocks = 3;          // residual blocks, one FSDP unit each
  int64_t points = 512;        // per class, train; validation has points / 4 per class
  int64_t batch_size = 32;     // per rank
  int64_t accumulation = 1;    // micro-batches per optimizer step
  int64_t steps = 300;         // optimizer steps
  double lr = 3e-3;
  ShardingOptions sharding;    // default FULL_SHARD with one unit per ResBlock
  int log_every = 0;           // 0: silent
};

struct SpiralResult {
  std::vector<double> losses;  // the global mean training loss of each step
  double val_loss = 0;
  double val_accuracy = 0;     // over the whole validation set, every rank's part counted
};

// Trains on this rank's part of every global batch; every rank returns the
// same result.
absl::StatusOr<SpiralResult> RunSpiral(const SpiralOptions& options, Communicator& comm);

}  // namespace zeroshard::example

#endif  // ZEROSHARD_EXAMPLES_EMBED_SPIRAL_H_
