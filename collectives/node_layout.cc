#include "zeroshard/collectives/node_layout.h"

#include <unistd.h>

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/collectives/objects.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::vector<std::vector<int>> NodeLayout::RanksOfNodes() const {
  std::vector<std::vector<int>> ranks(names.size());
  for (size_t r = 0; r < node_of_rank.size(); ++r) ranks[node_of_rank[r]].push_back(static_cast<int>(r));
  return ranks;
}

int NodeLayout::ConsecutiveRanksPerNode() const {
  const int n = static_cast<int>(node_of_rank.size());
  if (n == 0 || names.empty() || n % num_nodes() != 0) return 0;
  const int k = n / num_nodes();
  // Nodes are numbered by their lowest rank, so consecutive blocks of k ranks
  // are exactly node_of_rank[r] == r / k.
  for (int r = 0; r < n; ++r) {
    if (node_of_rank[r] != r / k) return 0;
  }
  return k;
}

std::string RankRanges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j > i + 1 ? absl::StrCat(ranks[i], "-", ranks[j]) : absl::StrCat(ranks[i]));
    if (j == i + 1) parts.push_back(absl::StrCat(ranks[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ", ");
}

std::string NodeLayout::ToString() const {
  std::vector<std::string> parts;
  const std::vector<std::vector<int>> ranks = RanksOfNodes();
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(absl::StrCat("node ", names[i], ": rank", ranks[i].size() == 1 ? " " : "s ", RankRanges(ranks[i])));
  }
  return absl::StrJoin(parts, "; ");
}

std::string ThisNodeName() {
  if (const char* v = std::getenv("ZEROSHARD_NODE"); v != nullptr && v[0] != '\0') return v;
  char host[256] = {};
  std::string name = gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0' ? host : "localhost";
  // torchrun's node rank tells its agents apart even on one machine.
  if (const char* g = std::getenv("GROUP_RANK"); g != nullptr && g[0] != '\0') absl::StrAppend(&name, "/", g);
  return name;
}

NodeLayout NodeLayoutOf(const std::vector<std::string>& node_of_rank) {
  NodeLayout layout;
  std::map<std::string, int> index;
  for (const std::string& name : node_of_rank) {
    auto [it, added] = index.emplace(name, static_cast<int>(layout.names.size()));
    if (added) layout.names.push_back(name);
    layout.node_of_rank.push_back(it->second);
  }
  return layout;
}

absl::StatusOr<NodeLayout> GatherNodeLayout(Communicator& comm, Allocator* allocator, const std::string& my_node) {
  ZS_ASSIGN_OR_RETURN(const std::vector<std::string> names, AllGatherStrings(comm, my_node, allocator));
  return NodeLayoutOf(names);
}

}  // namespace zeroshard
