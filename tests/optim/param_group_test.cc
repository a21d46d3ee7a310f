// Parameter groups: validation messages and re-basing onto shards.
#include "zeroshard/optim/param_group.h"

#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TEST(ParamGroupTest, Validation) {
  ZS_EXPECT_OK(ValidateParamGroups({ParamGroup{{{0, 4}, {6, 4}}, 1e-3, 0.1},
                                    ParamGroup{{{4, 2}, {10, 0}}, 1e-3, 0.0}},
                                   10));
  ZS_EXPECT_OK(ValidateParamGroups({}, 0));
  EXPECT_THAT(ValidateParamGroups({ParamGroup{{{8, 4}}, 1e-3, 0}}, 10),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("param group 0: range [8, 12) is outside the flat buffer of 10")));
  EXPECT_THAT(ValidateParamGroups({ParamGroup{{{-1, 2}}, 1e-3, 0}}, 10),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("range [-1, 1)")));
  EXPECT_THAT(ValidateParamGroups({ParamGroup{{{0, 5}}, 1e-3, 0}, ParamGroup{{{2, 1}}, 1e-3, 0}}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("range [0, 5) of group 0 and range [2, 3) of group 1")));
  EXPECT_THAT(ValidateParamGroups({ParamGroup{{{0, 5}, {4, 2}}, 1e-3, 0}}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("param groups overlap")));
  EXPECT_THAT(ValidateParamGroups({ParamGroup{{}, NAN, 0}}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr must be finite")));
  EXPECT_THAT(ValidateParamGroups({ParamGroup{{}, 1, -0.1}}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight_decay must be finite")));
}

TEST(ParamGroupTest, ShardParamGroupsIntersectsAndRebases) {
  const std::vector<ParamGroup> groups = {ParamGroup{{{0, 4}, {6, 4}}, 1e-3, 0.1},
                                          ParamGroup{{{4, 2}}, 2e-3, 0.0}};
  // Shard [3, 7): element 3 of group 0, 4..5 of group 1, 6 of group 0.
  const std::vector<ParamGroup> s = ShardParamGroups(groups, 3, 4);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].ranges, (std::vector<FlatRange>{{0, 1}, {3, 1}}));
  EXPECT_EQ(s[0].lr, 1e-3);
  EXPECT_EQ(s[0].weight_decay, 0.1);
  EXPECT_EQ(s[1].ranges, (std::vector<FlatRange>{{1, 2}}));
  // A shard past the end (padding) keeps every group, with no ranges.
  const std::vector<ParamGroup> pad = ShardParamGroups(groups, 10, 3);
  ASSERT_EQ(pad.size(), 2u);
  EXPECT_TRUE(pad[0].ranges.empty());
  EXPECT_TRUE(pad[1].ranges.empty());
  ZS_EXPECT_OK(ValidateParamGroups(s, 4));
  EXPECT_EQ(ParamGroupsToString(s),
            "group 0: lr 0.001 wd 0.1, 2 ranges, 2 elements; group 1: lr 0.002 wd 0, 1 ranges, 2 elements");
}

}  // namespace
}  // namespace zeroshard::optim
