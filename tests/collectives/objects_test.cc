// BroadcastString / BroadcastValue / ReduceValue over in-process ranks: every
// rank ends with root's bytes (lengths around the 8-byte packing, binary
// bytes, empty), and reductions equal the same sum taken in rank order.
#include "zeroshard/collectives/objects.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

void ExpectEveryRankOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);  // includes '\0'
  return s;
}

TEST(Objects, BroadcastStringOfEveryLengthFromEveryRoot) {
  for (int world : {1, 2, 3, 4}) {
    for (int root = 0; root < world; ++root) {
      ExpectEveryRankOk(RunRanks(world, [&](Communicator& comm) -> absl::Status {
        for (size_t n : {0, 1, 7, 8, 9, 1000}) {
          std::string s = comm.rank() == root ? Pattern(n, root) : Pattern(3, comm.rank() + 10);
          ZS_RETURN_IF_ERROR(BroadcastString(comm, &s, root));
          EXPECT_EQ(s, Pattern(n, root)) << "world " << world << " root " << root << " n " << n;
        }
        return absl::OkStatus();
      }));
    }
  }
}

TEST(Objects, BroadcastValueCopiesAStruct) {
  struct Setting {
    int32_t seed;
    double lr;
    char tag[5];
  };
  ExpectEveryRankOk(RunRanks(3, [&](Communicator& comm) -> absl::Status {
    Setting s{comm.rank(), comm.rank() * 0.5, {'r', static_cast<char>('0' + comm.rank()), 0, 0, 0}};
    ZS_RETURN_IF_ERROR(BroadcastValue(comm, &s, /*root=*/2));
    EXPECT_EQ(s.seed, 2);
    EXPECT_EQ(s.lr, 1.0);
    EXPECT_STREQ(s.tag, "r2");
    return absl::OkStatus();
  }));
}

TEST(Objects, ReduceValueIsExactInDoubleAndTheSameOnEveryRank) {
  for (int world : {1, 2, 3, 4}) {
    // 0.1 + 1e-12 r: an fp32 all-reduce would lose the 1e-12 parts.
    double want_sum = 0, want_max = 0;
    for (int r = 0; r < world; ++r) {
      want_sum += 0.1 + 1e-12 * r;
      want_max = std::max(want_max, 0.1 + 1e-12 * r);
    }
    ExpectEveryRankOk(RunRanks(world, [&](Communicator& comm) -> absl::Status {
      const double mine = 0.1 + 1e-12 * comm.rank();
      ZS_ASSIGN_OR_RETURN(double sum, ReduceValue(comm, mine, ReduceOp::kSum));
      ZS_ASSIGN_OR_RETURN(double avg, ReduceValue(comm, mine, ReduceOp::kAvg));
      ZS_ASSIGN_OR_RETURN(double max, ReduceValue(comm, mine, ReduceOp::kMax));
      EXPECT_EQ(sum, want_sum);
      EXPECT_EQ(avg, want_sum / world);
      EXPECT_EQ(max, want_max);
      return absl::OkStatus();
    }));
  }
}

TEST(Objects, BadRootIsAnError) {
  ExpectEveryRankOk(RunRanks(2, [&](Communicator& comm) -> absl::Status {
    std::string s = "x";
    const absl::Status st = BroadcastString(comm, &s, 2);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("root 2"), std::string::npos) << st;
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace zeroshard
