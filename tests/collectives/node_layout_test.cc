// Node layouts (collectives/node_layout.h): which node each rank runs on,
// from the names the ranks give, and AllGatherStrings underneath.
#include "zeroshard/collectives/node_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/objects.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::ElementsAre;

void ExpectEveryRankOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
}

TEST(NodeLayout, ConsecutiveBlocksOfEqualSize) {
  const NodeLayout two = NodeLayoutOf({"a", "a", "b", "b"});
  EXPECT_EQ(two.num_nodes(), 2);
  EXPECT_THAT(two.node_of_rank, ElementsAre(0, 0, 1, 1));
  EXPECT_EQ(two.ConsecutiveRanksPerNode(), 2);
  EXPECT_EQ(two.ToString(), "node a: ranks 0, 1; node b: ranks 2, 3");
  EXPECT_EQ(NodeLayoutOf({"x", "x", "x"}).ConsecutiveRanksPerNode(), 3);
  EXPECT_EQ(NodeLayoutOf({"x", "y", "z"}).ConsecutiveRanksPerNode(), 1);
  EXPECT_EQ(NodeLayoutOf({"x"}).ToString(), "node x: rank 0");
  // Nodes are numbered by their lowest rank, whatever their names sort as.
  EXPECT_THAT(NodeLayoutOf({"z", "a"}).names, ElementsAre("z", "a"));
}

TEST(NodeLayout, NoConsecutiveSizeWhenNodesInterleaveOrDiffer) {
  const NodeLayout interleaved = NodeLayoutOf({"a", "b", "a", "b"});
  EXPECT_EQ(interleaved.ConsecutiveRanksPerNode(), 0);
  EXPECT_EQ(interleaved.ToString(), "node a: ranks 0, 2; node b: ranks 1, 3");
  EXPECT_EQ(NodeLayoutOf({"a", "a", "a", "b"}).ConsecutiveRanksPerNode(), 0);  // 3 + 1
  EXPECT_EQ(NodeLayoutOf({"a", "b", "b", "a"}).ConsecutiveRanksPerNode(), 0);  // equal counts, not consecutive
  EXPECT_EQ(NodeLayoutOf({}).ConsecutiveRanksPerNode(), 0);
}

TEST(NodeLayout, RankRanges) {
  EXPECT_EQ(RankRanges({}), "");
  EXPECT_EQ(RankRanges({4}), "4");
  EXPECT_EQ(RankRanges({0, 1}), "0, 1");
  EXPECT_EQ(RankRanges({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(RankRanges({0, 2, 3, 4, 7, 8}), "0, 2-4, 7, 8");
}

TEST(NodeLayout, ThisNodeNameFromTheEnvironment) {
  ASSERT_EQ(setenv("ZEROSHARD_NODE", "rack3-node7", 1), 0);
  EXPECT_EQ(ThisNodeName(), "rack3-node7");
  ASSERT_EQ(unsetenv("ZEROSHARD_NODE"), 0);
  const std::string host = ThisNodeName();
  EXPECT_FALSE(host.empty());
  // torchrun's GROUP_RANK tells its agents on one host apart.
  ASSERT_EQ(setenv("GROUP_RANK", "1", 1), 0);
  EXPECT_EQ(ThisNodeName(), host + "/1");
  ASSERT_EQ(unsetenv("GROUP_RANK"), 0);
}

TEST(NodeLayout, GatheredFromEveryRank) {
  for (int world : {1, 2, 4, 6}) {
    ExpectEveryRankOk(RunRanks(world, [&](Communicator& comm) -> absl::Status {
      // Two ranks per node, names of other lengths (the packing pads them).
      const std::string mine = std::string(static_cast<size_t>(1 + comm.rank() / 2 * 5), 'n') + "." +
                               std::to_string(comm.rank() / 2);
      ZS_ASSIGN_OR_RETURN(const NodeLayout nodes, GatherNodeLayout(comm, nullptr, mine));
      EXPECT_EQ(nodes.num_nodes(), (world + 1) / 2) << "world " << world;
      EXPECT_EQ(nodes.ConsecutiveRanksPerNode(), world == 1 ? 1 : 2) << "world " << world;
      for (int r = 0; r < world; ++r) EXPECT_EQ(nodes.node_of_rank[r], r / 2);
      EXPECT_EQ(nodes.names[0], "n.0");
      return absl::OkStatus();
    }));
  }
}

TEST(Objects, AllGatherStringsOfMixedLengthsAndBytes) {
  ExpectEveryRankOk(RunRanks(3, [&](Communicator& comm) -> absl::Status {
    const std::vector<std::string> want = {"", std::string("a\0b", 3), std::string(17, 'z')};
    ZS_ASSIGN_OR_RETURN(const std::vector<std::string> all, AllGatherStrings(comm, want[comm.rank()]));
    EXPECT_EQ(all, want);
    return absl::OkStatus();
  }));
  ExpectEveryRankOk(RunRanks(2, [&](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(const std::vector<std::string> all, AllGatherStrings(comm, ""));
    EXPECT_THAT(all, ElementsAre("", ""));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace zeroshard
