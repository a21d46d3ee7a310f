// The vision job: trains a torchvision-named ResNet on the generated 10-class
// ShapesData set (data/shapes_data.h) with sharded data parallelism over
// in-process ranks or MPI processes, printing loss, images/s and validation
// accuracy (chance is 10%).
//
//   bazel build -c opt //examples:train_resnet
//   bazel-bin/examples/train_resnet                                   # FULL_SHARD, 2 ranks, 300 steps
//   bazel-bin/examples/train_resnet --sharding_strategy=HYBRID_SHARD --world_size=4 --hybrid_shard_size=2
//   bazel-bin/examples/train_resnet --param_dtype=bf16                 # BatchNorm stays fp32
//   bazel-bin/examples/train_resnet --widths=64,128,256,512 --depths=2,2,2,2 --stem=imagenet   # ResNet-18
//   bazel-bin/examples/train_resnet --save=resnet.safetensors          # loads into torchvision code
//   mpirun -np 2 bazel-bin/examples/train_resnet --backend=mpi
//
// The same job from a JSON config (model.type "resnet", train/config.h),
// into a run folder: bazel-bin/examples/train_gpt --config=examples/configs/resnet.json
//
// BatchNorm under sharding: buffers are not sharded; each rank keeps its own
// running statistics (--sync_module_states broadcasts rank 0's at start) and,
// with --average_bn_stats (default on), the ranks average them before every
// evaluation and before saving. See docs/vision.md.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/local_communicator.h"
#include "collectives/mpi_communicator.h"
#include "train/resnet_trainer.h"
#include "runtime/status.h"

ABSL_FLAG(std::string, widths, "16,32,64,128", "channels of layer1, layer2, ... (ResNet-18: 64,128,256,512)");
ABSL_FLAG(std::string, depths, "1,1,1,1", "BasicBlocks per layer (ResNet-18: 2,2,2,2)");
ABSL_FLAG(std::string, stem, "cifar", "cifar (3x3 conv1, no max-pool) or imagenet (7x7/2 conv1 + max-pool)");
ABSL_FLAG(int64_t, image_size, 32, "generated images are image_size x image_size");
ABSL_FLAG(int64_t, train_size, 20000, "training images (generated)");
ABSL_FLAG(int64_t, val_size, 2000, "validation images (generated)");
ABSL_FLAG(int64_t, batch_size, 32, "images per rank per step");
ABSL_FLAG(int64_t, steps, 300, "optimizer steps");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd (Nesterov momentum 0.9), adamw or adam");
ABSL_FLAG(double, lr, 0.05, "peak learning rate (cosine schedule with warmup)");
ABSL_FLAG(double, min_lr, 5e-4, "learning rate at the end");
ABSL_FLAG(int64_t, warmup_steps, 20, "linear warmup steps");
ABSL_FLAG(double, weight_decay, 5e-4, "weight decay on conv and fc weights");
ABSL_FLAG(int64_t, seed, 1337, "initialisation seed");
ABSL_FLAG(int64_t, log_every, 25, "print the loss every n steps");
ABSL_FLAG(int64_t, eval_every, 100, "evaluate every n steps (0: only at the end)");
ABSL_FLAG(int, world_size, 2, "in-process ranks (--backend=local)");
ABSL_FLAG(std::string, backend, "local", "local (threads) or mpi (one rank per process under mpirun)");
ABSL_FLAG(std::string, sharding_strategy, "FULL_SHARD", "FULL_SHARD, SHARD_GRAD_OP, SHARD_OPTIMIZER, NO_SHARD or HYBRID_SHARD");
ABSL_FLAG(int, hybrid_shard_size, 0, "ranks per shard group (HYBRID_SHARD)");
ABSL_FLAG(std::string, auto_wrap, "block", "block (a unit per BasicBlock), size:<n> or none");
ABSL_FLAG(std::string, param_dtype, "f32", "gathered parameter dtype: f32, bf16 or f16 (BatchNorm stays f32)");
ABSL_FLAG(std::string, reduce_dtype, "f32", "gradient reduction dtype");
ABSL_FLAG(bool, sync_module_states, false, "broadcast rank 0's parameters and buffers at start");
ABSL_FLAG(bool, average_bn_stats, true, "average BatchNorm running statistics over ranks before eval and save");
ABSL_FLAG(std::string, save, "", "write the trained model (torchvision names, with BN buffers) here");
ABSL_FLAG(int, threads_per_rank, 0, "OpenMP threads per rank (0: hardware threads / in-process ranks)");

namespace zeroshard {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& s) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", s, ": expected comma-separated integers"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<ResNetTrainOptions> FromFlags() {
  ResNetTrainOptions o;
  ZS_ASSIGN_OR_RETURN(o.model.widths, ParseList("widths", absl::GetFlag(FLAGS_widths)));
  ZS_ASSIGN_OR_RETURN(o.model.depths, ParseList("depths", absl::GetFlag(FLAGS_depths)));
  const std::string stem = absl::GetFlag(FLAGS_stem);
  if (stem != "cifar" && stem != "imagenet") {
    return absl::InvalidArgumentError(absl::StrCat("--stem=", stem, ": expected cifar or imagenet"));
  }
  o.model.stem = stem == "cifar" ? nn::ResNetStem::kCifar : nn::ResNetStem::kImageNet;
  o.model.num_classes = ShapesData::kNumClasses;
  ZS_RETURN_IF_ERROR(o.model.Validate());
  o.data.image_size = absl::GetFlag(FLAGS_image_size);
  o.data.train_size = absl::GetFlag(FLAGS_train_size);
  o.data.val_size = absl::GetFlag(FLAGS_val_size);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.steps = absl::GetFlag(FLAGS_steps);
  ZS_ASSIGN_OR_RETURN(o.optimizer.kind, optim::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer)));
  o.optimizer.lr = absl::GetFlag(FLAGS_lr);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.lr.lr = o.optimizer.lr;
  o.lr.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.lr.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.lr.decay_steps = std::max(o.steps, o.lr.warmup_steps);
  o.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  o.log_every = std::max<int64_t>(1, absl::GetFlag(FLAGS_log_every));
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.average_bn_stats = absl::GetFlag(FLAGS_average_bn_stats);
  o.save = absl::GetFlag(FLAGS_save);
  o.threads_per_rank = absl::GetFlag(FLAGS_threads_per_rank);
  ShardingOptions& s = o.sharding;
  ZS_ASSIGN_OR_RETURN(s.strategy, ParseShardingStrategy(absl::GetFlag(FLAGS_sharding_strategy)));
  s.hybrid_shard_size = absl::GetFlag(FLAGS_hybrid_shard_size);
  const std::string wrap = absl::GetFlag(FLAGS_auto_wrap);
  if (wrap == "block") {
    s.wrap = WrapPolicy::ByType({"BasicBlock"});
  } else if (wrap == "none") {
    s.wrap = WrapPolicy::None();
  } else if (int64_t n = 0; absl::StartsWith(wrap, "size:") && absl::SimpleAtoi(wrap.substr(5), &n)) {
    s.wrap = WrapPolicy::BySize(n);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--auto_wrap=", wrap, ": expected block, none or size:<n>"));
  }
  ZS_ASSIGN_OR_RETURN(s.mixed_precision.param_dtype, ParseDType(absl::GetFlag(FLAGS_param_dtype)));
  ZS_ASSIGN_OR_RETURN(s.mixed_precision.reduce_dtype, ParseDType(absl::GetFlag(FLAGS_reduce_dtype)));
  s.sync_module_states = absl::GetFlag(FLAGS_sync_module_states);
  return o;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "train_resnet: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  using namespace zeroshard;  // NOLINT
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ResNetTrainOptions> options = FromFlags();
  if (!options.ok()) return Fail(options.status());
  if (absl::GetFlag(FLAGS_backend) == "mpi") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    absl::Status status;
    {
      absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
      status = comm.ok() ? options->sharding.Validate((*comm)->size()) : comm.status();
      if (status.ok()) status = RunResNetTraining(*options, **comm).status();
    }
    MPI_Finalize();
    return status.ok() ? 0 : Fail(status);
  }
  if (absl::GetFlag(FLAGS_backend) != "local") {
    return Fail(absl::InvalidArgumentError("--backend: expected local or mpi"));
  }
  const int world = absl::GetFlag(FLAGS_world_size);
  if (absl::Status s = options->sharding.Validate(world); !s.ok()) return Fail(s);
  if (options->threads_per_rank == 0) {
    options->threads_per_rank = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world);
  }
  std::vector<absl::Status> statuses =
      RunRanks(world, [&](Communicator& comm) { return RunResNetTraining(*options, comm).status(); });
  int rc = 0;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      std::fprintf(stderr, "rank %zu: %s\n", r, statuses[r].ToString().c_str());
      rc = 1;
    }
  }
  return rc;
}
