// The launch without MPI (collectives/env_rendezvous.h, issue 20): the
// environment convention read, and the TCP rendezvous on this machine's
// loopback with ranks as threads: every rank gets rank 0's payload; a wrong
// token is refused while the real rank still joins; a rank that never comes
// is named on rank 0 and on the ranks that came; a missing rank 0 is named
// on the others. Timing: the timeouts here are 1-2 s; nothing waits for a
// timeout except the tests of one, and their bounds are loose (a 2-core
// machine under load may run late, never early).
#include "zeroshard/collectives/env_rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace zeroshard {
namespace {

// A port nothing listens on now (bound, read, closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

EnvLaunch Rank(int rank, int world, int port, const std::string& token = "s3cret-job-token") {
  EnvLaunch e;
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.token = token;
  return e;
}

struct Outcome {
  absl::StatusOr<std::string> got = absl::UnknownError("not run");
  double seconds = 0;
};

// Runs each launch on a thread (`delay_ms`: when each starts).
std::vector<Outcome> RunRendezvous(const std::vector<EnvLaunch>& launches, const std::vector<int>& delay_ms,
                         absl::Duration timeout) {
  std::vector<Outcome> out(launches.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < launches.size(); ++i) {
    threads.emplace_back([&, i] {
      absl::SleepFor(absl::Milliseconds(delay_ms[i]));
      const absl::Time start = absl::Now();
      out[i].got = TcpRendezvous(launches[i], launches[i].rank == 0 ? "the-nccl-unique-id" : "", timeout);
      out[i].seconds = absl::ToDoubleSeconds(absl::Now() - start);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(EnvRendezvous, EveryRankGetsRankZerosPayload) {
  const int port = FreePort();
  // Rank 0 comes last: the others retry until it listens.
  const std::vector<Outcome> out =
      RunRendezvous({Rank(0, 3, port), Rank(1, 3, port), Rank(2, 3, port)}, {300, 0, 0}, absl::Seconds(30));
  for (size_t r = 0; r < out.size(); ++r) {
    ASSERT_TRUE(out[r].got.ok()) << "rank " << r << ": " << out[r].got.status();
    EXPECT_EQ(*out[r].got, "the-nccl-unique-id") << "rank " << r;
  }
}

// A process with another token is refused with PermissionDenied; rank 0 keeps
// waiting, and the real rank 1 arriving after it forms the group.
TEST(EnvRendezvous, AWrongTokenIsRefused) {
  const int port = FreePort();
  const std::vector<Outcome> out = RunRendezvous({Rank(0, 2, port), Rank(1, 2, port, "guessed"), Rank(1, 2, port)},
                                       {0, 100, 600}, absl::Seconds(30));
  ASSERT_TRUE(out[0].got.ok()) << out[0].got.status();
  EXPECT_EQ(out[1].got.status().code(), absl::StatusCode::kPermissionDenied) << out[1].got.status();
  EXPECT_NE(out[1].got.status().message().find("ZEROSHARD_JOB_TOKEN is not this job's"), std::string::npos)
      << out[1].got.status();
  // The refusal says nothing of the real token.
  EXPECT_EQ(out[1].got.status().message().find("s3cret"), std::string::npos);
  ASSERT_TRUE(out[2].got.ok()) << out[2].got.status();
  EXPECT_EQ(*out[2].got, "the-nccl-unique-id");
}

// Rank 2 of 3 never comes: rank 0 and rank 1 both fail with DeadlineExceeded
// naming rank 2, after rank 0's 1 s (rank 1 hears it from rank 0, so at about
// the same moment; the bound is 30 s of slack on a loaded machine).
TEST(EnvRendezvous, AMissingRankIsNamedOnEveryWaitingRank) {
  const int port = FreePort();
  const std::vector<Outcome> out = RunRendezvous({Rank(0, 3, port), Rank(1, 3, port)}, {0, 50}, absl::Seconds(1));
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_EQ(out[r].got.status().code(), absl::StatusCode::kDeadlineExceeded) << "rank " << r << ": "
                                                                              << out[r].got.status();
    EXPECT_NE(out[r].got.status().message().find("rank 2 of 3 never arrived"), std::string::npos)
        << "rank " << r << ": " << out[r].got.status();
    EXPECT_GE(out[r].seconds, 0.9) << "rank " << r;
    EXPECT_LT(out[r].seconds, 31) << "rank " << r;
  }
}

TEST(EnvRendezvous, AMissingRankZeroIsNamed) {
  const int port = FreePort();
  const std::vector<Outcome> out = RunRendezvous({Rank(1, 2, port)}, {0}, absl::Seconds(1));
  EXPECT_EQ(out[0].got.status().code(), absl::StatusCode::kDeadlineExceeded) << out[0].got.status();
  EXPECT_NE(out[0].got.status().message().find("rank 0 never arrived"), std::string::npos) << out[0].got.status();
  EXPECT_NE(out[0].got.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << out[0].got.status();
}

// The port closes once the group has formed: a late process is not served.
TEST(EnvRendezvous, ThePortClosesOnceTheGroupFormed) {
  const int port = FreePort();
  std::vector<Outcome> out = RunRendezvous({Rank(0, 2, port), Rank(1, 2, port)}, {0, 0}, absl::Seconds(30));
  ASSERT_TRUE(out[0].got.ok() && out[1].got.ok());
  out = RunRendezvous({Rank(1, 2, port)}, {0}, absl::Seconds(1));
  EXPECT_EQ(out[0].got.status().code(), absl::StatusCode::kDeadlineExceeded) << out[0].got.status();
}

class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) : vars_(std::move(vars)) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "ZEROSHARD_JOB_TOKEN", "ZEROSHARD_RENDEZVOUS_FILE", "ZEROSHARD_JOB_ID", "SLURM_PROCID",
                             "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "TORCHELASTIC_RUN_ID",
                             "SLURM_JOB_ID", "SLURM_STEP_ID"}) {
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) ::unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

TEST(EnvRendezvous, TheEnvironmentConvention) {
  {
    ScopedEnv env({});
    absl::StatusOr<std::optional<EnvLaunch>> e = EnvLaunchFromEnvironment();
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_FALSE(e->has_value());  // not an env launch: the threads mode
  }
  {
    ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}, {"ZEROSHARD_JOB_TOKEN", "t"}});
    absl::StatusOr<std::optional<EnvLaunch>> e = EnvLaunchFromEnvironment();
    ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
    EXPECT_EQ((*e)->ToString(), "rank 1 of 4 (local rank 1 of 2), rendezvous node0:29500");
    EXPECT_EQ((*e)->token, "t");
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"},
                   {"ZEROSHARD_RENDEZVOUS_FILE", "/shared/id"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "2"}});
    absl::StatusOr<std::optional<EnvLaunch>> e = EnvLaunchFromEnvironment();
    ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
    EXPECT_EQ((*e)->ToString(), "rank 3 of 8 (local rank 3), rendezvous file /shared/id (job 77.2)");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
    absl::StatusOr<std::optional<EnvLaunch>> e = EnvLaunchFromEnvironment();
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("ZEROSHARD_JOB_TOKEN"), std::string::npos) << e.status();
  }
  {
    ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}});
    absl::StatusOr<std::optional<EnvLaunch>> e = EnvLaunchFromEnvironment();
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("RANK: expected an integer in [0, 1], found \"2\""), std::string::npos)
        << e.status();
  }
}

}  // namespace
}  // namespace zeroshard
