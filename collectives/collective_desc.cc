#include "zeroshard/collectives/collective_desc.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard {

absl::string_view CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllGather: return "AllGather";
    case CollectiveOp::kReduceScatter: return "ReduceScatter";
    case CollectiveOp::kAllReduce: return "AllReduce";
    case CollectiveOp::kBroadcast: return "Broadcast";
    case CollectiveOp::kBarrier: return "Barrier";
    case CollectiveOp::kSplit: return "Split";
    case CollectiveOp::kAllToAll: return "AllToAll";
  }
  return "InvalidCollective";
}

std::string CollectiveDesc::ToString() const {
  std::string s = absl::StrCat(CollectiveOpName(op), " #", seq);
  switch (op) {
    case CollectiveOp::kAllGather:
      absl::StrAppend(&s, " (", DTypeName(dtype), ", ", count, " elements per rank");
      break;
    case CollectiveOp::kAllToAll:  // count: the whole input, size blocks of it
      absl::StrAppend(&s, " (", DTypeName(dtype), ", ", count, " elements");
      break;
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllReduce:
      absl::StrAppend(&s, " (", DTypeName(dtype), ", ", count, " elements, ",
                      ReduceOpName(reduce_op));
      break;
    case CollectiveOp::kBroadcast:
      absl::StrAppend(&s, " (", DTypeName(dtype), ", ", count, " elements, root ", root);
      break;
    case CollectiveOp::kBarrier:
      return s;
    case CollectiveOp::kSplit:
      return absl::StrCat(s, " (color ", color, ", key ", key, ")");
  }
  if (in_place) absl::StrAppend(&s, ", in place");
  absl::StrAppend(&s, ")");
  return s;
}

bool CollectiveDesc::SameCollective(const CollectiveDesc& o) const {
  if (seq != o.seq || op != o.op || invalid_args != o.invalid_args) return false;
  switch (op) {
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      return true;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kAllToAll:
      return dtype == o.dtype && count == o.count;
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllReduce:
      return dtype == o.dtype && count == o.count && reduce_op == o.reduce_op;
    case CollectiveOp::kBroadcast:
      return dtype == o.dtype && count == o.count && root == o.root;
  }
  return false;
}

std::string ErrorPrefix(const CollectiveDesc& desc, int rank, int size) {
  return absl::StrCat(CollectiveOpName(desc.op), " #", desc.seq, " on rank ", rank, " of ", size,
                      ": ");
}

namespace {

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

absl::Status CheckSameCollective(absl::Span<const CollectiveDesc> per_rank) {
  const int n = static_cast<int>(per_rank.size());
  std::vector<int> invalid;
  for (int r = 0; r < n; ++r) {
    if (per_rank[r].invalid_args) invalid.push_back(r);
  }
  if (!invalid.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        RankList(invalid), invalid.size() == 1 ? " has" : " have",
        " failed the argument check (see that rank's error); every rank fails this collective"));
  }
  // Group ranks by descriptor; the largest group is taken as what was meant
  // (the group holding rank 0 wins ties).
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < n; ++r) {
    bool placed = false;
    for (auto& g : groups) {
      if (per_rank[g[0]].SameCollective(per_rank[r])) {
        g.push_back(r);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({r});
  }
  if (groups.size() <= 1) return absl::OkStatus();
  size_t majority = 0;
  for (size_t g = 1; g < groups.size(); ++g) {
    if (groups[g].size() > groups[majority].size()) majority = g;
  }
  std::string msg = absl::StrCat("collective mismatch at #", per_rank[groups[majority][0]].seq,
                                 ": ");
  bool first = true;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g == majority) continue;
    absl::StrAppend(&msg, first ? "" : "; ", RankList(groups[g]), " issued ",
                    per_rank[groups[g][0]].ToString());
    first = false;
  }
  absl::StrAppend(&msg, ", while ", RankList(groups[majority]), " issued ",
                  per_rank[groups[majority][0]].ToString());
  return absl::InvalidArgumentError(msg);
}

}  // namespace zeroshard
