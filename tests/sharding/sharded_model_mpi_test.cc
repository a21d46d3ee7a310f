// Sharded training over MPI (one rank per process, under mpirun -np 2 and 4)
// equals the unsharded single-rank run, as the in-process test checks for
// in-process ranks.
#include <mpi.h>

#include <gtest/gtest.h>

#include "zeroshard/collectives/mpi_communicator.h"
#include "zeroshard/tests/sharding/parity.h"

namespace zeroshard::testing {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void RunAndCompare(const ShardedRun& run, const std::string& what) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Result got;
  const absl::Status s = TrainShardedRank(**comm, run, 4, 12, &got);
  ASSERT_TRUE(s.ok()) << s;
  if (Rank() == 0) ExpectMatches(got, TrainUnsharded(4, 12), what);
}

TEST(ShardedModelMpi, FullShardMatchesUnsharded) {
  RunAndCompare({.options = BlockOptions(ShardingStrategy::kFullShard, BackwardPrefetch::kBackwardPre, true)},
                "FULL_SHARD over MPI");
}

TEST(ShardedModelMpi, ShardGradOpWithNoSyncAccumulationMatchesUnsharded) {
  RunAndCompare({.options = BlockOptions(ShardingStrategy::kShardGradOp), .accum = 3, .no_sync = true},
                "SHARD_GRAD_OP no_sync over MPI");
}

TEST(ShardedModelMpi, ShardOptimizerWithShardedAccumulationMatchesUnsharded) {
  RunAndCompare({.options = BlockOptions(ShardingStrategy::kShardOptimizer), .accum = 3},
                "SHARD_OPTIMIZER sharded accumulation over MPI");
}

}  // namespace
}  // namespace zeroshard::testing

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
