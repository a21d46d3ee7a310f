#include "zeroshard/optim/param_group.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace zeroshard::optim {

int64_t ParamGroup::numel() const {
  int64_t n = 0;
  for (const FlatRange& r : ranges) n += r.numel;
  return n;
}

absl::Status ValidateParamGroups(absl::Span<const ParamGroup> groups, int64_t buffer_numel) {
  struct Owned {
    FlatRange range;
    size_t group;
  };
  std::vector<Owned> all;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const ParamGroup& g = groups[gi];
    if (!std::isfinite(g.lr) || g.lr < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("param group ", gi, ": lr must be finite and >= 0, got ", g.lr));
    }
    if (!std::isfinite(g.weight_decay) || g.weight_decay < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "param group ", gi, ": weight_decay must be finite and >= 0, got ", g.weight_decay));
    }
    for (const FlatRange& r : g.ranges) {
      if (r.offset < 0 || r.numel < 0 || r.offset > buffer_numel ||
          r.numel > buffer_numel - r.offset) {
        return absl::OutOfRangeError(absl::StrCat(
            "param group ", gi, ": range [", r.offset, ", ", r.offset + r.numel,
            ") is outside the flat buffer of ", buffer_numel, " elements"));
      }
      if (r.numel > 0) all.push_back({r, gi});
    }
  }
  std::sort(all.begin(), all.end(),
            [](const Owned& a, const Owned& b) { return a.range.offset < b.range.offset; });
  for (size_t i = 1; i < all.size(); ++i) {
    const FlatRange& prev = all[i - 1].range;
    const FlatRange& cur = all[i].range;
    if (cur.offset < prev.offset + prev.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "param groups overlap: range [", prev.offset, ", ", prev.offset + prev.numel,
          ") of group ", all[i - 1].group, " and range [", cur.offset, ", ",
          cur.offset + cur.numel, ") of group ", all[i].group,
          " (each element may belong to one group only)"));
    }
  }
  return absl::OkStatus();
}

std::vector<ParamGroup> ShardParamGroups(absl::Span<const ParamGroup> groups,
                                         int64_t shard_offset, int64_t shard_numel) {
  std::vector<ParamGroup> out;
  out.reserve(groups.size());
  const int64_t shard_end = shard_offset + shard_numel;
  for (const ParamGroup& g : groups) {
    ParamGroup s{{}, g.lr, g.weight_decay};
    for (const FlatRange& r : g.ranges) {
      const int64_t begin = std::max(r.offset, shard_offset);
      const int64_t end = std::min(r.offset + r.numel, shard_end);
      if (end > begin) s.ranges.push_back({begin - shard_offset, end - begin});
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string ParamGroupsToString(absl::Span<const ParamGroup> groups) {
  std::string s;
  for (size_t i = 0; i < groups.size(); ++i) {
    absl::StrAppend(&s, i == 0 ? "" : "; ", "group ", i, ": lr ", groups[i].lr, " wd ",
                    groups[i].weight_decay, ", ", groups[i].ranges.size(), " ranges, ",
                    groups[i].numel(), " elements");
  }
  return s;
}

}  // namespace zeroshard::optim
