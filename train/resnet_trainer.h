// The vision training loop: a torchvision-named ResNet trained on the
// generated ShapesData set (data/shapes_data.h) with a ShardedModel over
// any Communicator, printing loss, images/s and validation accuracy. Each
// step is one TrainStep (train/train_step.h: plain optimizer steps, no
// accumulation, clipping or loss scaling). A model.type "resnet" config
// (train/config.h) fills the options; the main program runs it
// (examples/train_gpt.cc, train/resnet_job.h).
//
//   ResNetTrainOptions o;                           // a small ResNet, 300 steps of SGD
//   o.sharding.strategy = ShardingStrategy::kFullShard;
//   std::vector<absl::Status> s = RunRanks(2, [&](Communicator& comm) {
//     return RunResNetTraining(o, comm).status();
//   });
//
// Each step, rank r of R trains on rows r B .. r B + B - 1 of the step's global
// batch of R B images (ShapesData::TrainBatch). BatchNorm normalises each
// rank's B images with their own statistics and each rank keeps its own
// running statistics (FSDP's behaviour); with average_bn_stats the ranks
// average them (ShardedModel::AverageBuffers) before every evaluation and
// before saving, so that evaluation and the saved file use statistics of all
// ranks' data. Validation: every rank evaluates a slice of the validation set
// in eval mode; the correct counts are summed over the world.
//
// On GPUs (backend nccl: `comm` an NcclCommunicator, one rank per device) the
// job runs as the GPT's does (train/trainer.h RunTraining): parameters,
// BatchNorm buffers, activations and gradients live in a caching allocator
// of comm.device() (runtime/cuda/caching_allocator.h, on the legacy default
// stream the op entries use), each step's images and labels are copied there,
// and `host` (the host-memory communicator that bootstrapped NCCL: in-process
// threads, MPI or the torchrun-style rendezvous) carries the run's host-side
// numbers: mean losses and the validation counts. Convolutions and BatchNorm
// run through cuDNN, pooling and the loss through our CUDA kernels.
//
//   std::vector<absl::Status> s = RunRanks(2, [&](Communicator& local) -> absl::Status {
//     ZS_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::Create(local, Device::Cuda(local.rank())));
//     return RunResNetTraining(o, *nccl, &local).status();
//   });
#ifndef ZEROSHARD_TRAIN_RESNET_TRAINER_H_
#define ZEROSHARD_TRAIN_RESNET_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/autograd/nn/resnet.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/data/shapes_data.h"
#include "zeroshard/optim/lr_schedule.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharding_options.h"

namespace zeroshard {

struct ResNetTrainOptions {
  nn::ResNetConfig model{.widths = {16, 32, 64, 128}, .depths = {1, 1, 1, 1}, .num_classes = 10,
                         .stem = nn::ResNetStem::kCifar};
  ShapesOptions data;
  int64_t batch_size = 32;  // images per rank per step
  int64_t steps = 300;
  optim::OptimizerOptions optimizer{.kind = optim::OptimizerKind::kSgd, .lr = 0.05, .weight_decay = 5e-4,
                                    .sgd = {.momentum = 0.9, .nesterov = true}};
  optim::LrSchedule lr{.kind = optim::LrScheduleKind::kCosine, .lr = 0.05, .min_lr = 5e-4,
                       .warmup_steps = 20, .decay_steps = 300};
  uint64_t seed = 1337;
  int64_t log_every = 25;
  int64_t eval_every = 100;     // 0: only at the end
  int64_t eval_batch = 100;     // validation images per rank per forward
  bool average_bn_stats = true;  // AverageBuffers() before evaluating and saving
  std::string save;             // a .safetensors with torchvision names (parameters and buffers)
  int threads_per_rank = 0;     // OpenMP threads of each rank's kernels; 0: leave as is
  bool quiet = false;           // no printing to stdout (tests)
  std::string log_file;         // rank 0 appends what it prints here too ("": nowhere; written even when quiet)
  // Set: rank 0's printed lines go here instead of stdout (quiet is then
  // ignored); log_file still gets them (LogSink::Options::writer). Not a config key.
  std::function<void(absl::string_view text)> output;
  std::string metrics_csv;      // rank 0 writes one row per step here ("": none): step,loss,lr,images_per_s,
                                // ms_per_step,val_loss,val_accuracy (the last two on evaluated steps)
  bool tensorboard = true;      // config key train.tensorboard: a run folder gets tensorboard/
  std::string tensorboard_dir;  // rank 0 writes the same as TensorBoard scalars here ("": none;
                                // train/tensorboard.h): train/{loss,lr,images_per_s,ms_per_step},
                                // val/{loss,accuracy}
  ShardingOptions sharding;     // wrap: BasicBlock units unless set
  std::string ToString() const;
};

struct ResNetTrainResult {
  std::vector<double> losses;  // global mean training loss per step
  double val_loss = 0;
  double val_accuracy = 0;     // in [0, 1], at the end
  double images_per_s = 0;     // global images per second, steps after the first
  // On GPUs, this rank's calls per training step after the first two
  // (runtime/cuda/device_api.h ThreadCudaCallCounts, evaluations left out):
  // cudaMalloc (0 once the caching allocator is warm) and host
  // synchronisations; -1 where not measured (CPU ranks, or fewer than 3 steps).
  double cuda_mallocs_per_step = -1;
  double host_syncs_per_step = -1;
};

// Runs on every rank; every rank returns the same result (the call counts
// are each rank's own). `host`: a host-memory communicator over the same
// ranks for the run's numbers, required when `comm` is on GPUs; null: `comm`.
absl::StatusOr<ResNetTrainResult> RunResNetTraining(const ResNetTrainOptions& options, Communicator& comm,
                                                    Communicator* host = nullptr);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_RESNET_TRAINER_H_
