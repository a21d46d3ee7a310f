// The process watchdog (runtime/watchdog.h) and what it does to communicators
// and in-process ranks (issue 26): a wait or a collective past its deadline is
// named, the flight records are written per rank, the group is aborted, and
// the process ends with kWatchdogExitCode.
#include "zeroshard/runtime/watchdog.h"

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/watchdog_", name);
  std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str());
  return dir;
}

TEST(Watchdog, RejectsBadOptions) {
  Watchdog w;
  EXPECT_THAT(w.Start({.poll = absl::ZeroDuration()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("poll interval must be positive")));
  EXPECT_THAT(w.Start({.grace = absl::Seconds(-1)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grace must be >= 0")));
  ZS_ASSERT_OK(w.Start({}));
  EXPECT_THAT(w.Start({}), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already running")));
  w.Stop();
  w.Stop();  // idempotent
  EXPECT_FALSE(w.running());
}

// A wait past its deadline expires once, names the wait, and writes the
// flight record; a wait within its deadline does not.
TEST(Watchdog, AWaitPastItsDeadlineExpiresOnceNamingIt) {
  const std::string dir = FreshDir("wait");
  Watchdog w;
  std::vector<int> codes;
  ZS_ASSERT_OK(w.Start({.poll = absl::Hours(1),  // only CheckNow below
                        .dump_dir = dir,
                        .process_rank = 3,
                        .terminate = [&](int code) { codes.push_back(code); }}));
  const absl::Time start = absl::Now();
  const int64_t id = w.BeginWait("cudaEventSynchronize (test)", absl::Seconds(10));
  EXPECT_FALSE(w.CheckNow(start + absl::Seconds(5)));
  EXPECT_THAT(w.DescribeWaits(start + absl::Seconds(5)), HasSubstr("cudaEventSynchronize (test), 5"));
  EXPECT_TRUE(w.CheckNow(start + absl::Seconds(11)));
  EXPECT_FALSE(w.CheckNow(start + absl::Seconds(12)));  // once
  w.EndWait(id);
  ASSERT_EQ(codes, std::vector<int>{kWatchdogExitCode});
  EXPECT_EQ(w.expirations(), 1);
  const std::string record = ReadFile(dir + "/flight_recorder.rank3.txt");
  EXPECT_THAT(record, HasSubstr("zeroshard watchdog expired: cudaEventSynchronize (test) has waited"));
  EXPECT_THAT(record, HasSubstr("past its deadline of 10.0 s"));
  EXPECT_THAT(record, HasSubstr("waits in progress:\n  cudaEventSynchronize (test)"));
  w.Stop();
}

// The thread itself notices (poll 10 ms) a wait with a short deadline.
TEST(Watchdog, TheThreadNoticesWithinAPoll) {
  Watchdog w;
  std::atomic<int> expired{0};
  ZS_ASSERT_OK(w.Start({.poll = absl::Milliseconds(10), .terminate = [&](int) { ++expired; }}));
  const int64_t id = w.BeginWait("a device wait", absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  while (expired.load() == 0 && absl::Now() - start < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  w.EndWait(id);
  w.Stop();
  EXPECT_EQ(expired.load(), 1);
  // 50 ms deadline + 10 ms poll; 30 s is only the give-up bound of a loaded CI box.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// A communicator registers at its first collective. A barrier that waits past
// its timeout plus the grace (the backend's own timeout is set far out, as a
// backend that cannot time out would behave) expires the watchdog: the flight
// record names the collective and where each rank of the group is, and the
// group is aborted, so the waiting rank returns with the watchdog's reason.
TEST(Watchdog, AStuckCollectiveIsRecordedAndItsGroupAborted) {
  const std::string dir = FreshDir("collective");
  Watchdog& w = Watchdog::Process();
  std::atomic<int> expired{0};
  ZS_ASSERT_OK(w.Start({.grace = absl::Seconds(30),
                        .poll = absl::Hours(1),
                        .dump_dir = dir,
                        .terminate = [&](int) { ++expired; }}));
  LocalOptions options;
  options.comm.timeout = absl::Seconds(100);
  options.comm.print_trace_on_error = false;
  ZS_ASSERT_OK_AND_ASSIGN(auto comms, LocalCommunicator::CreateGroup(2, options));
  absl::Status barrier;
  std::thread rank0([&] { barrier = comms[0]->Barrier(); });  // rank 1 never comes
  const absl::Time start = absl::Now();
  while (comms[0]->RecentCollectives().find("running") == std::string::npos) {
    ASSERT_LT(absl::Now() - start, absl::Seconds(60)) << comms[0]->RecentCollectives();
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(w.CheckNow(absl::Now() + absl::Seconds(120)));  // timeout + grace = 130 s
  EXPECT_TRUE(w.CheckNow(absl::Now() + absl::Seconds(131)));
  rank0.join();
  EXPECT_EQ(expired.load(), 1);
  EXPECT_THAT(barrier, StatusIs(absl::StatusCode::kAborted,
                                HasSubstr("watchdog: rank 0 of 2 (local): Barrier #1 running has been in "
                                          "progress for")));
  EXPECT_EQ(comms[0]->health().code(), absl::StatusCode::kAborted);
  const std::string record = ReadFile(dir + "/flight_recorder.rank0.txt");
  EXPECT_THAT(record, HasSubstr("past its timeout of 100.0 s and the watchdog's grace of 30.0 s"));
  EXPECT_THAT(record, HasSubstr("last 1 collectives of rank 0 of 2 (local)"));
  EXPECT_THAT(record, HasSubstr("Barrier #1"));
  EXPECT_THAT(record, HasSubstr("where the group's ranks are: rank 0 arrived at #1, rank 1 has entered no "
                                "collective"));
  w.Stop();
  comms.clear();
}

// The flight record and the abort name an all-to-all as the other collectives.
TEST(Watchdog, AStuckAllToAllIsNamed) {
  const std::string dir = FreshDir("all_to_all");
  Watchdog& w = Watchdog::Process();
  std::atomic<int> expired{0};
  ZS_ASSERT_OK(w.Start({.grace = absl::Seconds(30),
                        .poll = absl::Hours(1),
                        .dump_dir = dir,
                        .terminate = [&](int) { ++expired; }}));
  LocalOptions options;
  options.comm.timeout = absl::Seconds(100);
  options.comm.print_trace_on_error = false;
  ZS_ASSERT_OK_AND_ASSIGN(auto comms, LocalCommunicator::CreateGroup(2, options));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor in, Tensor::Zeros({6}, DType::kI8));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({6}, DType::kI8));
  absl::Status a2a;
  std::thread rank0([&] { a2a = comms[0]->AllToAll(in, out); });  // rank 1 never comes
  const absl::Time start = absl::Now();
  while (comms[0]->RecentCollectives().find("running") == std::string::npos) {
    ASSERT_LT(absl::Now() - start, absl::Seconds(60)) << comms[0]->RecentCollectives();
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(w.CheckNow(absl::Now() + absl::Seconds(131)));  // past timeout + grace
  rank0.join();
  EXPECT_EQ(expired.load(), 1);
  EXPECT_THAT(a2a, StatusIs(absl::StatusCode::kAborted,
                            HasSubstr("watchdog: rank 0 of 2 (local): AllToAll #1 (i8, 6 elements) "
                                      "running has been in progress for")));
  const std::string record = ReadFile(dir + "/flight_recorder.rank0.txt");
  EXPECT_THAT(record, HasSubstr("AllToAll #1 (i8, 6 elements)"));
  w.Stop();
  comms.clear();
}

// Collectives that completed, failed or timed out are not in progress: the
// watchdog leaves a healthy group alone however long after them it looks.
TEST(Watchdog, FinishedCollectivesAreNotInProgress) {
  Watchdog& w = Watchdog::Process();
  std::atomic<int> expired{0};
  ZS_ASSERT_OK(w.Start({.grace = absl::ZeroDuration(), .poll = absl::Hours(1),
                        .terminate = [&](int) { ++expired; }}));
  LocalOptions options;
  options.comm.timeout = absl::Milliseconds(100);
  options.comm.print_trace_on_error = false;
  std::vector<absl::Status> st = RunRanks(
      2,
      [](Communicator& comm) -> absl::Status {
        ZS_RETURN_IF_ERROR(comm.Barrier());
        ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({4}, 1.0, DType::kF32));
        EXPECT_FALSE(comm.AllReduce(t, Tensor::Full({3}, 1.0, DType::kF32).value()).ok());  // bad args
        return comm.AllReduce(t);
      },
      options);
  ZS_EXPECT_OK(st[0]);
  ZS_EXPECT_OK(st[1]);
  // The backend's own timeout fired: its entry is "timed out", not in progress.
  ZS_ASSERT_OK_AND_ASSIGN(auto comms, LocalCommunicator::CreateGroup(2, options));
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(w.CheckNow(absl::Now() + absl::Hours(24)));
  EXPECT_EQ(expired.load(), 0);
  w.Stop();
}

// Note [A hung rank]: after a first barrier, rank 0 fails, ranks 2 and 3 are
// aborted out of their second barrier at once, rank 1 is stuck outside any
// collective. After the grace the watchdog names rank 1 and files its record
// (its ring, where the group's ranks are); under a test hook RunRanks then
// waits for it.
TEST(Watchdog, AHungRankIsNamedAfterTheGrace) {
  const std::string dir = FreshDir("hung");
  Watchdog& w = Watchdog::Process();
  std::atomic<bool> released{false};
  std::atomic<int> expired{0};
  ZS_ASSERT_OK(w.Start({.dump_dir = dir, .terminate = [&](int) {
                          ++expired;
                          released = true;
                        }}));
  LocalOptions options;
  options.comm.print_trace_on_error = false;
  options.hung_rank_grace = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> st = RunRanks(
      4,
      [&](Communicator& comm) -> absl::Status {
        ZS_RETURN_IF_ERROR(comm.Barrier());
        if (comm.rank() == 0) return absl::InternalError("rank 0 broke");
        if (comm.rank() == 1) {
          while (!released) absl::SleepFor(absl::Milliseconds(1));
          return absl::OkStatus();
        }
        return comm.Barrier();
      },
      options);
  w.Stop();
  EXPECT_EQ(expired.load(), 1);
  // 200 ms grace; 30 s only bounds a loaded machine (the 10-minute timeout was not waited).
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(st[2], StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 0 returned INTERNAL")));
  EXPECT_THAT(st[3], StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 0 returned INTERNAL")));
  // The hung rank's communicator is still alive: its record is rank 1's file.
  const std::string record = ReadFile(dir + "/flight_recorder.rank1.txt");
  EXPECT_THAT(record, HasSubstr("rank 1 of 4 has not returned 200ms after rank 0 failed (INTERNAL: "
                                "rank 0 broke): hung outside the group's collectives"));
  EXPECT_THAT(record, HasSubstr("last 1 collectives of rank 1 of 4 (local)"));
  // (Ranks 2 and 3 may or may not have arrived at #2 before the abort.)
  EXPECT_THAT(record, HasSubstr("where the group's ranks are: rank 0 finished #1 (its thread returned "
                                "INTERNAL: rank 0 broke), rank 1 finished #1, rank 2 "));
}

// Without a hook the process really ends, with the watchdog's status, naming
// the hung rank.
TEST(WatchdogDeathTest, AHungRankEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        (void)Watchdog::Process().Start({});
        LocalOptions options;
        options.hung_rank_grace = absl::Milliseconds(100);
        RunRanks(
            2,
            [](Communicator& comm) -> absl::Status {
              if (comm.rank() == 0) return absl::InternalError("rank 0 broke");
              while (true) absl::SleepFor(absl::Seconds(1));
            },
            options);
      },
      ::testing::ExitedWithCode(kWatchdogExitCode), "rank 1 of 2 has not returned 100ms after rank 0 failed");
}

}  // namespace
}  // namespace zeroshard::testing
