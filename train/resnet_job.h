// The vision job of a model.type "resnet" config (train/config.h), as the
// main program (train_gpt --config=examples/configs/resnet.json) runs it on
// in-process ranks:
//
//   ZS_ASSIGN_OR_RETURN(RunConfig c, LoadConfig("examples/configs/resnet.json", {}));
//   ZS_ASSIGN_OR_RETURN(RunDir dir, StartRun(&c, header));   // optional: config.json, log, metrics.csv
//   ZS_ASSIGN_OR_RETURN(ResNetTrainResult r, RunResNetConfig(c));
//
// Under MPI the program calls RunResNetTraining(c.resnet, comm) on each
// process; on GPUs (backend nccl, from threads or one process per GPU)
// RunResNetTraining(c.resnet, nccl, host) with the host communicator that
// bootstrapped NCCL (train/resnet_trainer.h).
#ifndef ZEROSHARD_TRAIN_RESNET_JOB_H_
#define ZEROSHARD_TRAIN_RESNET_JOB_H_

#include "absl/status/statusor.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/resnet_trainer.h"

namespace zeroshard {

// OpenMP threads per rank for `world_size` in-process ranks: `configured`, or
// when it is 0 the hardware threads shared among the ranks (at least 1).
int ThreadsPerRank(int configured, int world_size);

// RunResNetTraining(config.resnet) on config.world_size in-process ranks
// (threads_per_rank 0: the hardware threads shared among them). Returns rank 0's result, or the first rank's error.
absl::StatusOr<ResNetTrainResult> RunResNetConfig(const RunConfig& config);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_RESNET_JOB_H_
