// Under mpirun -np 2 (one rank per process) the job's --trace is one file
// written by rank 0 with a process per rank, each rank's clock aligned to
// rank 0's (Note [Merged traces], collectives/trace_merge.h), checked as the
// in-process one is (tests/train/trace_checks.h).
#include <mpi.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "zeroshard/collectives/mpi_communicator.h"
#include "zeroshard/tests/train/trace_checks.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard::testing {
namespace {

TEST(TraceMpi, RankZeroWritesOneMergedTrace) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  // TEST_TMPDIR: the same folder for every process of the test.
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/trace_mpi.json";
  TrainOptions o = TinyTracedJob(path);
  TrainSummary s;
  const absl::Status st = RunTraining(o, **comm, &s);
  ASSERT_TRUE(st.ok()) << st;
  if ((*comm)->rank() != 0) return;
  const absl::Status check = CheckMergedJobTrace(path, (*comm)->size(), /*steps=*/2);
  EXPECT_TRUE(check.ok()) << check;
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
