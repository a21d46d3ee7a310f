// The simulator's ncclCommInitAll (fake_nccl.cc): one thread creates every
// rank's communicator; with one rank a grouped call from that thread runs (what
// bench/cuda_bench's raw-NCCL baseline does on the simulator); with more, each
// rank's thread drives its own communicator.
#include <nccl.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace {

TEST(FakeNccl, CommInitAllOneRankRunsGroupedCallsFromOneThread) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  int count = 0, rank = -1;
  ASSERT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(comm, &rank), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(rank, 0);
  std::vector<float> in = {1.5f, -2.0f, 3.25f}, out(3, 0.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllGather(in.data(), out.data(), 3, ncclFloat32, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(out, in);
  std::vector<float> rs(1, 0.0f);
  ASSERT_EQ(ncclReduceScatter(in.data(), rs.data(), 1, ncclFloat32, ncclSum, comm, nullptr),
            ncclSuccess);
  EXPECT_EQ(rs[0], 1.5f);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(FakeNccl, CommInitAllRanksAreDevlistPositions) {
  const int devs[] = {2, 0, 1};
  ncclComm_t comms[3] = {};
  ASSERT_EQ(ncclCommInitAll(comms, 3, devs), ncclSuccess);
  std::vector<float> sums(3, 0.0f);
  std::vector<std::vector<float>> gathered(3, std::vector<float>(3, 0.0f));
  std::vector<int> ranks(3, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ncclCommUserRank(comms[r], &ranks[r]);
      const float mine = static_cast<float>(r + 1);
      ncclAllReduce(&mine, &sums[r], 1, ncclFloat32, ncclSum, comms[r], nullptr);
      ncclAllGather(&mine, gathered[r].data(), 1, ncclFloat32, comms[r], nullptr);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks[r], r);
    EXPECT_EQ(sums[r], 6.0f) << "rank " << r;  // 1 + 2 + 3
    EXPECT_EQ(gathered[r], (std::vector<float>{1.0f, 2.0f, 3.0f})) << "rank " << r;
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

TEST(FakeNccl, CommInitAllRefusesMalformedArguments) {
  ncclComm_t comms[2] = {};
  const int duplicate[] = {1, 1}, negative[] = {0, -1};
  EXPECT_EQ(ncclCommInitAll(comms, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(comms, 2, duplicate), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(comms, 2, negative), ncclInvalidArgument);
}

}  // namespace
