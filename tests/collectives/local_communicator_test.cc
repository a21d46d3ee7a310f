// The collectives suite on the in-process backend at world sizes 1, 2, 3, 4
// and 8, plus what only this backend can show (RunRanks itself).
#include "zeroshard/collectives/local_communicator.h"

#include <atomic>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/collectives/collectives_suite.h"
#include "zeroshard/tests/testing.h"

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

// A rank that returns an error aborts the group (issue 26): its peers, waiting
// in a barrier it never joins or at their next collective, fail at once naming
// it and its error, instead of waiting out the 10-minute default timeout.
TEST(RunRanksTest, AnErrorReachesThePeersAtOnce) {
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = RunRanks(4, [](Communicator& comm) -> absl::Status {
    for (int i = 0; i < 20; ++i) {
      if (comm.rank() == 2 && i == 5) return absl::InternalError("rank 2 broke at step 5");
      ZS_RETURN_IF_ERROR(comm.Barrier());
    }
    return absl::OkStatus();
  });
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(5)) << "the peers waited for the timeout";
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_THAT(statuses[2], StatusIs(absl::StatusCode::kInternal, HasSubstr("broke")));
  for (int r : {0, 1, 3}) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kAborted,
                                      HasSubstr("rank 2 returned INTERNAL: rank 2 broke at step 5")))
        << "rank " << r;
  }
}

// The error reaches groups split from the failing rank's group too (issue 26):
// ranks waiting in a shard group's or a replica group's collective, as under
// HYBRID_SHARD, fail at once naming it instead of waiting for the timeout.
TEST(RunRanksTest, AnErrorReachesSplitGroupsAtOnce) {
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = RunRanks(4, [](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> shard, comm.Split(comm.rank() / 2, comm.rank()));
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> replica, comm.Split(comm.rank() % 2, comm.rank()));
    for (int i = 0; i < 20; ++i) {
      if (comm.rank() == 2 && i == 5) return absl::InternalError("rank 2 broke at step 5");
      ZS_RETURN_IF_ERROR(shard->Barrier());
      ZS_RETURN_IF_ERROR(replica->Barrier());
    }
    return absl::OkStatus();
  });
  const absl::Duration took = absl::Now() - start;
  // The default timeout is 10 minutes; 5 s bounds a loaded 2-core machine.
  EXPECT_LT(took, absl::Seconds(5)) << "the peers waited for the timeout";
  for (int r : {0, 1, 3}) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kAborted,
                                      HasSubstr("rank 2 returned INTERNAL: rank 2 broke at step 5")))
        << "rank " << r;
  }
}

// A rank that returns an error after its last collective does not fail its
// peers' completed collectives.
TEST(RunRanksTest, AnErrorAfterTheLastCollectiveLeavesThePeersOk) {
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<absl::Status> statuses = RunRanks(3, [](Communicator& comm) -> absl::Status {
      ZS_RETURN_IF_ERROR(comm.Barrier());
      if (comm.rank() == 1) return absl::NotFoundError("rank 1 says no");
      return absl::OkStatus();
    });
    ZS_EXPECT_OK(statuses[0]);
    ZS_EXPECT_OK(statuses[2]);
    EXPECT_EQ(statuses[1].code(), absl::StatusCode::kNotFound) << statuses[1];
  }
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
