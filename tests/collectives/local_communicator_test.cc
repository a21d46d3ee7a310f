// The collectives suite on the in-process backend at world sizes 1, 2, 3, 4
// and 8, plus what only this backend can show (RunRanks itself).
#include "collectives/local_communicator.h"

#include <atomic>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"
#include "tests/collectives/collectives_suite.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

Backend LocalBackend(int world_size) {
  return Backend{
      .name = absl::StrCat("local", world_size),
      .world_size = world_size,
      .run = [world_size](const RankFn& fn, const CommunicatorOptions& options) {
        return RunRanks(world_size, fn, LocalOptions{.comm = options});
      },
  };
}

INSTANTIATE_TEST_SUITE_P(Local, CollectivesTest,
                         ::testing::Values(LocalBackend(1), LocalBackend(2), LocalBackend(3),
                                           LocalBackend(4), LocalBackend(8)),
                         BackendName);

TEST(RunRanksTest, ReturnsEveryRanksStatus) {
  std::atomic<int> ran{0};
  std::vector<absl::Status> statuses = RunRanks(3, [&](Communicator& comm) -> absl::Status {
    ++ran;
    if (comm.rank() == 2) return absl::NotFoundError("rank 2 says no");
    return absl::OkStatus();
  });
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_EQ(ran.load(), 3);
  ZS_EXPECT_OK(statuses[0]);
  ZS_EXPECT_OK(statuses[1]);
  EXPECT_THAT(statuses[2], StatusIs(absl::StatusCode::kNotFound, HasSubstr("rank 2 says no")));
}

TEST(RunRanksTest, RejectsAnEmptyWorld) {
  std::vector<absl::Status> statuses =
      RunRanks(0, [](Communicator&) { return absl::OkStatus(); });
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one")));
}

// A peer that times out says that the missing rank's function has returned.
TEST(RunRanksTest, TimeoutSaysTheMissingRankHasExited) {
  LocalOptions options;
  options.comm.timeout = absl::Milliseconds(200);
  std::vector<absl::Status> statuses = RunRanks(
      2,
      [](Communicator& comm) -> absl::Status {
        if (comm.rank() == 1) return absl::OkStatus();
        return comm.Barrier();
      },
      options);
  EXPECT_THAT(statuses[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("rank 1 (has not entered any collective of this group; its "
                                 "thread has returned OK)")));
}

TEST(LocalCommunicatorTest, BackendAndDevice) {
  ZS_ASSERT_OK_AND_ASSIGN(auto comms, LocalCommunicator::CreateGroup(2));
  EXPECT_EQ(comms[1]->backend(), "local");
  EXPECT_EQ(comms[1]->rank(), 1);
  EXPECT_EQ(comms[1]->size(), 2);
  EXPECT_EQ(comms[1]->device(), Device::Cpu());
  EXPECT_EQ(comms[1]->Who(), "rank 1 of 2 (local)");
}

}  // namespace
}  // namespace zeroshard::testing
