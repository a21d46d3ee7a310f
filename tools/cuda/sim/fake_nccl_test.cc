// The simulator's ncclCommInitAll (fake_nccl.cc): one thread creates every
// rank's communicator; with one rank a grouped call from that thread runs (what
// bench/cuda_bench's raw-NCCL baseline does on the simulator); with more, each
// rank's thread drives its own communicator. And its ncclSend / ncclRecv with
// NCCL's group semantics (what NcclCommunicator::AllToAll issues).
#include <nccl.h>
#include <gtest/gtest.h>

#include <cstdint>
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

// ncclSend / ncclRecv in a group: every rank sends to every rank (itself
// included) before it receives, as an all-to-all does; block j of rank r's
// input is r * 10 + j, so rank r's output is {j * 10 + r}.
TEST(FakeNccl, GroupedSendRecvIsAnAllToAll) {
  constexpr int kRanks = 3;
  ncclComm_t comms[kRanks] = {};
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess);
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(2 * kRanks, -1.0f));
  std::vector<ncclResult_t> results(kRanks, ncclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> in(2 * kRanks);
      for (int j = 0; j < kRanks; ++j) in[2 * j] = in[2 * j + 1] = static_cast<float>(r * 10 + j);
      ncclGroupStart();
      for (int p = 0; p < kRanks; ++p) {
        ncclSend(in.data() + 2 * p, 2, ncclFloat32, p, comms[r], nullptr);
        ncclRecv(out[r].data() + 2 * p, 2, ncclFloat32, p, comms[r], nullptr);
      }
      results[r] = ncclGroupEnd();  // `in` may go once it returns
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    for (int j = 0; j < kRanks; ++j) {
      EXPECT_EQ(out[r][2 * j], j * 10 + r) << "rank " << r << " block " << j;
      EXPECT_EQ(out[r][2 * j + 1], j * 10 + r) << "rank " << r << " block " << j;
    }
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

// Two sends to the same peer arrive in the order posted; a receive of another
// count than its send's is an invalid argument; a group end without a start
// is invalid usage.
TEST(FakeNccl, SendRecvMatchInOrderAndCheckTheCount) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  const int32_t a[2] = {1, 2}, b[2] = {3, 4};
  int32_t x[2] = {}, y[2] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(b, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(x, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(y, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(x[0], 1);
  EXPECT_EQ(x[1], 2);
  EXPECT_EQ(y[0], 3);
  EXPECT_EQ(y[1], 4);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(x, 1, ncclInt32, 0, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(a, 2, ncclInt32, 1, comm, nullptr), ncclInvalidArgument);  // no rank 1
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

}  // namespace
