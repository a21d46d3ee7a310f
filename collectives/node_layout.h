// Which node (machine) each rank of a communicator runs on, found by asking
// the ranks: every rank names its node and the names are all-gathered.
//
//   ZS_ASSIGN_OR_RETURN(NodeLayout nodes, GatherNodeLayout(world, allocator));
//   nodes.ConsecutiveRanksPerNode();  // 8 on 8-GPU nodes launched in rank order
//   nodes.ToString();                 // "node a: ranks 0-7; node b: ranks 8-15"
//
// A node's name is, in order: the ZEROSHARD_NODE environment variable (set it
// where host names do not tell nodes apart, or to lay out "nodes" on one
// machine in a test), else the host name, followed by torchrun's GROUP_RANK
// (its node rank) where that is set. In-process ranks (threads) share their
// process's node.
//
// Used by HYBRID_SHARD's default shard groups (a shard group per node) and by
// the communication hooks' group_size 0 (the ranks on a node).
#ifndef ZEROSHARD_COLLECTIVES_NODE_LAYOUT_H_
#define ZEROSHARD_COLLECTIVES_NODE_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"

namespace zeroshard {

struct NodeLayout {
  // Per rank: its node's index. Nodes are numbered in order of their lowest rank.
  std::vector<int> node_of_rank;
  // Per node index: its name.
  std::vector<std::string> names;

  int num_nodes() const { return static_cast<int>(names.size()); }
  // The ranks of each node, in rank order.
  std::vector<std::vector<int>> RanksOfNodes() const;
  // k when every node holds exactly k consecutive ranks (ranks 0..k-1 on the
  // first node, k..2k-1 on the second, ...); 0 otherwise.
  int ConsecutiveRanksPerNode() const;
  // "node a: ranks 0-3; node b: ranks 4-7" (runs of consecutive ranks joined
  // by '-', others listed: "node a: ranks 0, 2").
  std::string ToString() const;
};

// This process's node name (see the comment at the top).
std::string ThisNodeName();

// Every rank's node, from `my_node` of every rank (all-gathered through
// `allocator`; nullptr: host memory). A collective: every rank calls it.
absl::StatusOr<NodeLayout> GatherNodeLayout(Communicator& comm, Allocator* allocator = nullptr,
                                            const std::string& my_node = ThisNodeName());

// A layout from the names of every rank's node (what GatherNodeLayout builds
// after its all-gather).
NodeLayout NodeLayoutOf(const std::vector<std::string>& node_of_rank);

// "0-3", "0, 2, 5", "4": a sorted list of ranks, runs joined.
std::string RankRanges(const std::vector<int>& ranks);

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_NODE_LAYOUT_H_
