// Parameter groups over one flat parameter buffer: each group is a set of
// element ranges with its own learning rate and weight decay.
//
//   // nanoGPT's default grouping, computed by the model layer: weight decay on
//   // 2-D weights only. Ranges are (offset, numel) into the flat buffer.
//   std::vector<ParamGroup> groups = {
//       {.ranges = {{0, 4096}, {4352, 65536}}, .lr = 6e-4, .weight_decay = 0.1},
//       {.ranges = {{4096, 256}},              .lr = 6e-4, .weight_decay = 0.0},
//   };
//   ZS_RETURN_IF_ERROR(ValidateParamGroups(groups, flat_numel));
//   // Rank r of a sharded run steps only its shard, with the same groups re-based:
//   std::vector<ParamGroup> mine = ShardParamGroups(groups, r * shard_numel, shard_numel);
//
// Ranges of all groups must be disjoint and inside the buffer. Elements that no
// range covers (padding, frozen parameters) are never read or written by a
// step, and their optimizer state stays as it is. The learning rate of a group
// is the value used by the next step: a schedule sets it before each step
// (optim/lr_schedule.h), as torch's schedulers set `param_group['lr']`.
#ifndef ZEROSHARD_OPTIM_PARAM_GROUP_H_
#define ZEROSHARD_OPTIM_PARAM_GROUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace zeroshard::optim {

// Elements [offset, offset + numel) of a flat buffer.
struct FlatRange {
  int64_t offset = 0;
  int64_t numel = 0;

  friend bool operator==(const FlatRange&, const FlatRange&) = default;
};

struct ParamGroup {
  std::vector<FlatRange> ranges;
  double lr = 1e-3;
  double weight_decay = 0.0;

  // One group covering the whole buffer.
  static ParamGroup Whole(int64_t numel, double lr, double weight_decay) {
    return ParamGroup{{{0, numel}}, lr, weight_decay};
  }
  int64_t numel() const;
};

// OK when every range is non-negative and inside [0, buffer_numel), no two
// ranges (of any groups) overlap, and every lr and weight_decay is finite and
// >= 0. Zero-length ranges are allowed (and ignored).
absl::Status ValidateParamGroups(absl::Span<const ParamGroup> groups, int64_t buffer_numel);

// The groups restricted to the shard [shard_offset, shard_offset + shard_numel)
// of the flat buffer, with offsets relative to the shard. Every group is kept
// (possibly with no ranges), so group i means the same group on every rank.
std::vector<ParamGroup> ShardParamGroups(absl::Span<const ParamGroup> groups,
                                         int64_t shard_offset, int64_t shard_numel);

// "group 0: lr 0.0006 wd 0.1, 2 ranges, 69632 elements; ...".
std::string ParamGroupsToString(absl::Span<const ParamGroup> groups);

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_PARAM_GROUP_H_
