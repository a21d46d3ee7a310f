// Under mpirun -np 2 (one rank per process) the default config gives the same
// losses as the same config on 2 in-process ranks; so does the vision job's
// (examples/configs/resnet.json, model.type "resnet"), as train_gpt runs it.
#include <mpi.h>

#include <gtest/gtest.h>

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/mpi_communicator.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/resnet_job.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {
namespace {

TEST(ConfigMpi, DefaultConfigMatchesInProcessRanks) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::vector<std::string> tiny = {"model.n_layer=2", "model.n_embd=32", "model.n_head=2",
                                         "model.block_size=32", "train.steps=6", "train.eval_iters=2",
                                         "sample.tokens=0", "work_dir=", "distributed.backend=mpi"};
  absl::StatusOr<RunConfig> config = LoadConfig("examples/configs/default.json", tiny);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(CheckWorldSize(*config, (*comm)->size()).ok());
  TrainSummary mpi;
  const absl::Status s = RunTraining(config->train, **comm, &mpi);
  ASSERT_TRUE(s.ok()) << s;
  if ((*comm)->rank() != 0) return;
  TrainSummary local;
  std::vector<absl::Status> st =
      RunRanks((*comm)->size(), [&](Communicator& c) { return RunTraining(config->train, c, &local); });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  ASSERT_EQ(mpi.losses.size(), 6u);
  EXPECT_EQ(mpi.losses, local.losses);
  EXPECT_EQ(mpi.final_val_loss, local.final_val_loss);
}

TEST(ConfigMpi, ResNetConfigMatchesInProcessRanks) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::vector<std::string> tiny = {"model.widths=[8, 16]", "model.depths=[1, 1]", "data.image_size=16",
                                         "data.train_size=500", "data.val_size=50", "train.batch_size=8",
                                         "train.steps=6", "train.threads_per_rank=1", "work_dir=",
                                         "distributed.backend=mpi"};
  absl::StatusOr<RunConfig> config = LoadConfig("examples/configs/resnet.json", tiny);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(CheckWorldSize(*config, (*comm)->size()).ok());
  config->resnet.quiet = true;
  absl::StatusOr<ResNetTrainResult> mpi = RunResNetTraining(config->resnet, **comm);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  if ((*comm)->rank() != 0) return;
  config->world_size = (*comm)->size();
  absl::StatusOr<ResNetTrainResult> local = RunResNetConfig(*config);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(mpi->losses.size(), 6u);
  EXPECT_EQ(mpi->losses, local->losses);
  EXPECT_EQ(mpi->val_accuracy, local->val_accuracy);
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
