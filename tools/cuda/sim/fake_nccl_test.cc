// The simulator's ncclCommInitAll (fake_nccl.cc): one thread creates every
// rank's communicator; with one rank a grouped call from that thread runs (what
// bench/cuda_bench's raw-NCCL baseline does on the simulator); with more, each
// rank's thread drives its own communicator. And its ncclSend / ncclRecv with
// NCCL's group semantics (what NcclCommunicator::AllToAll issues).
//
// Across processes (issue 20): ranks forked from this test join one unique id
// with ncclCommInitRank and run every call the communicator makes, bitwise
// as threads of one process do; ncclCommAbort, a killed peer, a peer that
// never comes and one that never joins end the others' waits with an error
// naming the rank instead of hanging.
#include <nccl.h>
#include <gtest/gtest.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "zeroshard/runtime/half.h"

namespace {

TEST(FakeNccl, CommInitAllOneRankRunsGroupedCallsFromOneThread) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  int count = 0, rank = -1;
  ASSERT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(comm, &rank), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(rank, 0);
  std::vector<float> in = {1.5f, -2.0f, 3.25f}, out(3, 0.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllGather(in.data(), out.data(), 3, ncclFloat32, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(out, in);
  std::vector<float> rs(1, 0.0f);
  ASSERT_EQ(ncclReduceScatter(in.data(), rs.data(), 1, ncclFloat32, ncclSum, comm, nullptr),
            ncclSuccess);
  EXPECT_EQ(rs[0], 1.5f);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(FakeNccl, CommInitAllRanksAreDevlistPositions) {
  const int devs[] = {2, 0, 1};
  ncclComm_t comms[3] = {};
  ASSERT_EQ(ncclCommInitAll(comms, 3, devs), ncclSuccess);
  std::vector<float> sums(3, 0.0f);
  std::vector<std::vector<float>> gathered(3, std::vector<float>(3, 0.0f));
  std::vector<int> ranks(3, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ncclCommUserRank(comms[r], &ranks[r]);
      const float mine = static_cast<float>(r + 1);
      ncclAllReduce(&mine, &sums[r], 1, ncclFloat32, ncclSum, comms[r], nullptr);
      ncclAllGather(&mine, gathered[r].data(), 1, ncclFloat32, comms[r], nullptr);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks[r], r);
    EXPECT_EQ(sums[r], 6.0f) << "rank " << r;  // 1 + 2 + 3
    EXPECT_EQ(gathered[r], (std::vector<float>{1.0f, 2.0f, 3.0f})) << "rank " << r;
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

TEST(FakeNccl, CommInitAllRefusesMalformedArguments) {
  ncclComm_t comms[2] = {};
  const int duplicate[] = {1, 1}, negative[] = {0, -1};
  EXPECT_EQ(ncclCommInitAll(comms, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(comms, 2, duplicate), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(comms, 2, negative), ncclInvalidArgument);
}

// ncclSend / ncclRecv in a group: every rank sends to every rank (itself
// included) before it receives, as an all-to-all does; block j of rank r's
// input is r * 10 + j, so rank r's output is {j * 10 + r}.
TEST(FakeNccl, GroupedSendRecvIsAnAllToAll) {
  constexpr int kRanks = 3;
  ncclComm_t comms[kRanks] = {};
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess);
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(2 * kRanks, -1.0f));
  std::vector<ncclResult_t> results(kRanks, ncclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> in(2 * kRanks);
      for (int j = 0; j < kRanks; ++j) in[2 * j] = in[2 * j + 1] = static_cast<float>(r * 10 + j);
      ncclGroupStart();
      for (int p = 0; p < kRanks; ++p) {
        ncclSend(in.data() + 2 * p, 2, ncclFloat32, p, comms[r], nullptr);
        ncclRecv(out[r].data() + 2 * p, 2, ncclFloat32, p, comms[r], nullptr);
      }
      results[r] = ncclGroupEnd();  // `in` may go once it returns
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    for (int j = 0; j < kRanks; ++j) {
      EXPECT_EQ(out[r][2 * j], j * 10 + r) << "rank " << r << " block " << j;
      EXPECT_EQ(out[r][2 * j + 1], j * 10 + r) << "rank " << r << " block " << j;
    }
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

// Two sends to the same peer arrive in the order posted; a receive of another
// count than its send's is an invalid argument; a group end without a start
// is invalid usage.
TEST(FakeNccl, SendRecvMatchInOrderAndCheckTheCount) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  const int32_t a[2] = {1, 2}, b[2] = {3, 4};
  int32_t x[2] = {}, y[2] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(b, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(x, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(y, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(x[0], 1);
  EXPECT_EQ(x[1], 2);
  EXPECT_EQ(y[0], 3);
  EXPECT_EQ(y[1], 4);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a, 2, ncclInt32, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(x, 1, ncclInt32, 0, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(a, 2, ncclInt32, 1, comm, nullptr), ncclInvalidArgument);  // no rank 1
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---------------------------------------------------------------- across processes

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What each rank reports: "" when it passed, else what went wrong.
using RankBody = std::function<std::string(int rank)>;

// Runs `body` on ranks 0 .. n-1, each in a child process forked from this one
// (`threads`: each on a thread of this process instead). Returns each rank's
// report, or how its process ended. A rank still running after `limit_s` is
// killed and reported as hung.
std::vector<std::string> RunRanks(int n, const RankBody& body, bool threads = false, double limit_s = 120) {
  std::vector<std::string> out(n);
  if (threads) {
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { out[r] = body(r); });
    for (std::thread& t : ts) t.join();
    return out;
  }
  std::vector<pid_t> pids(n);
  std::vector<int> fds(n);
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe(p) != 0) std::abort();
    pids[r] = fork();
    if (pids[r] == 0) {
      close(p[0]);
      const std::string m = body(r);
      (void)!write(p[1], m.data(), m.size());
      _exit(0);
    }
    close(p[1]);
    fds[r] = p[0];
  }
  const auto start = Clock::now();
  for (int r = 0; r < n; ++r) {
    std::string text;
    char buf[512];
    while (true) {
      pollfd pfd{fds[r], POLLIN, 0};
      const double left = limit_s - SecondsSince(start);
      if (left <= 0 || poll(&pfd, 1, static_cast<int>(left * 1000)) == 0) {
        kill(pids[r], SIGKILL);
        text = "hung: killed after " + std::to_string(limit_s) + " s";
        break;
      }
      const ssize_t got = read(fds[r], buf, sizeof(buf));
      if (got <= 0) break;
      text.append(buf, static_cast<size_t>(got));
    }
    close(fds[r]);
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (text.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      text = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                 : "exited " + std::to_string(WEXITSTATUS(status));
    }
    out[r] = text;
  }
  return out;
}

std::string Check(bool ok, const std::string& what) { return ok ? "" : what + "; "; }
std::string Nccl(ncclResult_t r, const char* call) {
  return r == ncclSuccess ? "" : std::string(call) + ": " + ncclGetErrorString(r) + "; ";
}

// Rank r's input values: fractions whose sums round, so the order of the
// additions shows in the bits.
float Value(int rank, size_t i) { return 1.0f / static_cast<float>(3 + 7 * rank + static_cast<int>(i % 13)) + 1e-3f * i; }

// The reductions as NCCL's stand-in defines them: fp32, rank order.
float SumInRankOrder(int n, size_t i) {
  float acc = Value(0, i);
  for (int r = 1; r < n; ++r) acc += Value(r, i);
  return acc;
}

// Every call NcclCommunicator makes, on ranks of a fresh id: all-reduce (f32
// larger than a staging slot, so in several rounds; bf16 sum accumulated in
// fp32; int64 max; f32 avg), all-gather and reduce-scatter in place, a
// broadcast, an all-to-all of grouped sends and receives larger than a
// channel's chunk, a split into two groups and an all-reduce on each.
std::string EveryCollective(const ncclUniqueId& id, int n, int rank) {
  std::string e;
  ncclComm_t comm = nullptr;
  e += Nccl(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank");
  if (!e.empty()) return e;
  // 1.5 M floats: 6 MiB, past the largest slot (4 MiB).
  const size_t big = 3 << 19;
  std::vector<float> x(big), y(big);
  for (size_t i = 0; i < big; ++i) x[i] = Value(rank, i);
  e += Nccl(ncclAllReduce(x.data(), y.data(), big, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce");
  for (size_t i = 0; i < big; i += 997) {
    if (y[i] != SumInRankOrder(n, i)) {
      e += "all-reduce element " + std::to_string(i) + " is not the rank-order fp32 sum; ";
      break;
    }
  }
  std::vector<zeroshard::BFloat16> hb(64);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = zeroshard::BFloat16(Value(rank, i));
  e += Nccl(ncclAllReduce(hb.data(), hb.data(), hb.size(), ncclBfloat16, ncclSum, comm, nullptr), "bf16 sum");
  for (size_t i = 0; i < hb.size(); ++i) {
    float acc = static_cast<float>(zeroshard::BFloat16(Value(0, i)));
    for (int r = 1; r < n; ++r) acc += static_cast<float>(zeroshard::BFloat16(Value(r, i)));
    e += Check(static_cast<float>(hb[i]) == static_cast<float>(zeroshard::BFloat16(acc)),
               "bf16 sum " + std::to_string(i) + " not rounded once from fp32");
  }
  int64_t mx = 100 - rank;
  e += Nccl(ncclAllReduce(&mx, &mx, 1, ncclInt64, ncclMax, comm, nullptr), "int64 max");
  e += Check(mx == 100, "int64 max " + std::to_string(mx));
  float avg = static_cast<float>(rank);
  e += Nccl(ncclAllReduce(&avg, &avg, 1, ncclFloat32, ncclAvg, comm, nullptr), "avg");
  e += Check(avg == static_cast<float>(n - 1) / 2.0f, "avg " + std::to_string(avg));
  // All-gather in place: rank r's 3 values at [3r, 3r + 3).
  std::vector<int32_t> g(3 * n, -1);
  for (int j = 0; j < 3; ++j) g[3 * rank + j] = 10 * rank + j;
  e += Nccl(ncclAllGather(g.data() + 3 * rank, g.data(), 3, ncclInt32, comm, nullptr), "ncclAllGather");
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < 3; ++j) e += Check(g[3 * r + j] == 10 * r + j, "all-gather");
  }
  // Reduce-scatter in place: block b of every rank's input is b + rank.
  std::vector<float> rs(2 * n);
  for (int b = 0; b < n; ++b) rs[2 * b] = rs[2 * b + 1] = static_cast<float>(b + rank);
  e += Nccl(ncclReduceScatter(rs.data(), rs.data() + 2 * rank, 2, ncclFloat32, ncclSum, comm, nullptr),
            "ncclReduceScatter");
  const float want_rs = static_cast<float>(n * rank + n * (n - 1) / 2);
  e += Check(rs[2 * rank] == want_rs && rs[2 * rank + 1] == want_rs, "reduce-scatter");
  // Broadcast from the last rank, in place.
  std::vector<double> bc(5, rank == n - 1 ? 2.5 : -1.0);
  e += Nccl(ncclBroadcast(bc.data(), bc.data(), 5, ncclFloat64, n - 1, comm, nullptr), "ncclBroadcast");
  for (double v : bc) e += Check(v == 2.5, "broadcast");
  // All-to-all of 300 K floats per block (1.2 MB, past a channel's 1 MiB):
  // block j of rank r holds r * 1000 + j + i * 1e-3 at element i.
  const size_t m = 300000;
  std::vector<float> in(m * n), got(m * n, -1.0f);
  for (int j = 0; j < n; ++j) {
    for (size_t i = 0; i < m; ++i) in[j * m + i] = static_cast<float>(rank * 1000 + j) + 1e-3f * (i % 1000);
  }
  ncclGroupStart();
  for (int p = 0; p < n; ++p) {
    ncclSend(in.data() + p * m, m, ncclFloat32, p, comm, nullptr);
    ncclRecv(got.data() + p * m, m, ncclFloat32, p, comm, nullptr);
  }
  e += Nccl(ncclGroupEnd(), "all-to-all ncclGroupEnd");
  for (int j = 0; j < n; ++j) {
    for (size_t i = 0; i < m; i += 1009) {
      if (got[j * m + i] != static_cast<float>(j * 1000 + rank) + 1e-3f * (i % 1000)) {
        e += "all-to-all block " + std::to_string(j) + " element " + std::to_string(i) + "; ";
        break;
      }
    }
  }
  // Split by parity, reversed order inside each group (key = -rank).
  ncclComm_t sub = nullptr;
  e += Nccl(ncclCommSplit(comm, rank % 2, -rank, &sub, nullptr), "ncclCommSplit");
  if (sub != nullptr) {
    int sub_rank = -1, sub_size = -1;
    ncclCommUserRank(sub, &sub_rank);
    ncclCommCount(sub, &sub_size);
    const int members = (n - rank % 2 + 1) / 2;  // ranks of my parity
    e += Check(sub_size == members, "split size " + std::to_string(sub_size));
    e += Check(sub_rank == members - 1 - rank / 2, "split rank " + std::to_string(sub_rank));
    float v = static_cast<float>(rank);
    e += Nccl(ncclAllReduce(&v, &v, 1, ncclFloat32, ncclSum, sub, nullptr), "split all-reduce");
    float want = 0;
    for (int r = rank % 2; r < n; r += 2) want += static_cast<float>(r);
    e += Check(v == want, "split all-reduce " + std::to_string(v));
    ncclCommDestroy(sub);
  } else {
    e += "no split communicator; ";
  }
  ncclCommDestroy(comm);
  return e;
}

// The id's segments of this test process (its pid is in their names).
int SegmentsLeft() {
  int n = 0;
  const std::string prefix = "zs-nccl-" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* ent = readdir(d)) n += std::string(ent->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}

TEST(FakeNcclAcrossProcesses, EveryCollectiveMatchesTheThreadedRun) {
  for (bool threads : {false, true}) {
    SCOPED_TRACE(threads ? "threads of one process" : "one process per rank");
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    const std::vector<std::string> reports =
        RunRanks(3, [&](int rank) { return EveryCollective(id, 3, rank); }, threads);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
  }
  // Every segment was unlinked once its group had formed.
  EXPECT_EQ(SegmentsLeft(), 0);
}

// Ranks that disagree about a collective all fail with ncclInvalidArgument
// instead of reading each other's buffers wrongly.
TEST(FakeNcclAcrossProcesses, MismatchedCallsFailOnEveryRank) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::vector<std::string> reports = RunRanks(2, [&](int rank) -> std::string {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return "init";
    std::vector<float> x(8, 1.0f);
    const ncclResult_t r = ncclAllReduce(x.data(), x.data(), rank == 0 ? 8 : 4, ncclFloat32, ncclSum, comm, nullptr);
    std::string e = Check(r == ncclInvalidArgument, std::string("got ") + ncclGetErrorString(r));
    e += Check(std::string(ncclGetLastError(comm)).find("rank 1 called ncclAllReduce(count 4") != std::string::npos,
               std::string("last error: ") + ncclGetLastError(comm));
    // The group still works afterwards.
    e += Nccl(ncclAllReduce(x.data(), x.data(), 8, ncclFloat32, ncclSum, comm, nullptr), "next all-reduce");
    e += Check(x[7] == 2.0f, "next all-reduce value");
    ncclCommDestroy(comm);
    return e;
  });
  EXPECT_EQ(reports[0], "");
  EXPECT_EQ(reports[1], "");
}

// Rank 0 aborts while rank 1 waits in an all-reduce: rank 1 gets
// ncclRemoteError, and its last error names rank 0's ncclCommAbort. The
// bound is generous (the abort wakes the waiter at once; 30 s leaves a
// loaded 2-core machine room) and far below the 600 s deadline.
TEST(FakeNcclAcrossProcesses, AbortEndsThePeersWait) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::vector<std::string> reports = RunRanks(2, [&](int rank) -> std::string {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return "init";
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ncclCommAbort(comm);
      return "";
    }
    float v = 1.0f;
    const auto start = Clock::now();
    const ncclResult_t r = ncclAllReduce(&v, &v, 1, ncclFloat32, ncclSum, comm, nullptr);
    const std::string last = ncclGetLastError(comm);
    std::string e = Check(r == ncclRemoteError, std::string("got ") + ncclGetErrorString(r));
    e += Check(last.find("rank 0 of 2") != std::string::npos && last.find("ncclCommAbort") != std::string::npos,
               "last error: " + last);
    e += Check(SecondsSince(start) < 30, "took " + std::to_string(SecondsSince(start)) + " s");
    ncclCommDestroy(comm);
    return e;
  });
  EXPECT_EQ(reports[0], "");
  EXPECT_EQ(reports[1], "");
}

// Rank 1's process is killed (SIGKILL: no chance to abort) while rank 0
// waits for it: rank 0 fails with ncclRemoteError naming rank 1 and its pid,
// within the liveness check's period (50 ms) plus scheduling; 30 s is the
// same generous bound as above.
TEST(FakeNcclAcrossProcesses, AKilledPeerIsNamed) {
  for (const char* where : {"all-reduce", "all-to-all"}) {
    SCOPED_TRACE(where);
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    const bool p2p = std::string(where) == "all-to-all";
    const std::vector<std::string> reports = RunRanks(2, [&](int rank) -> std::string {
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return "init";
      if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        raise(SIGKILL);
      }
      std::vector<float> v(4, 1.0f), w(4);
      const auto start = Clock::now();
      ncclResult_t r;
      if (p2p) {
        ncclGroupStart();
        for (int p = 0; p < 2; ++p) {
          ncclSend(v.data() + 2 * p, 2, ncclFloat32, p, comm, nullptr);
          ncclRecv(w.data() + 2 * p, 2, ncclFloat32, p, comm, nullptr);
        }
        r = ncclGroupEnd();
      } else {
        r = ncclAllReduce(v.data(), v.data(), 4, ncclFloat32, ncclSum, comm, nullptr);
      }
      const std::string last = ncclGetLastError(comm);
      std::string e = Check(r == ncclRemoteError, std::string("got ") + ncclGetErrorString(r));
      e += Check(last.find("rank 1 of 2") != std::string::npos && last.find("pid ") != std::string::npos &&
                     last.find("is gone") != std::string::npos,
                 "last error: " + last);
      e += Check(SecondsSince(start) < 30, "took " + std::to_string(SecondsSince(start)) + " s");
      ncclCommDestroy(comm);
      return e;
    });
    EXPECT_EQ(reports[0], "");
    EXPECT_EQ(reports[1], "killed by signal 9");
  }
}

// A rank that is alive but never calls the collective, and one that never
// joins: the others fail at the deadline (ZEROSHARD_SIM_NCCL_TIMEOUT_S = 1 s
// here) with ncclSystemError naming the rank they waited for.
TEST(FakeNcclAcrossProcesses, WaitsHaveDeadlines) {
  setenv("ZEROSHARD_SIM_NCCL_TIMEOUT_S", "1", 1);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::string> reports = RunRanks(2, [&](int rank) -> std::string {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return "init";
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, not calling
      return "";
    }
    float v = 1.0f;
    const ncclResult_t r = ncclAllReduce(&v, &v, 1, ncclFloat32, ncclSum, comm, nullptr);
    const std::string last = ncclGetLastError(comm);
    std::string e = Check(r == ncclSystemError, std::string("got ") + ncclGetErrorString(r));
    e += Check(last.find("waited 1 s") != std::string::npos && last.find("for rank 1 of 2") != std::string::npos,
               "last error: " + last);
    ncclCommDestroy(comm);
    return e;
  });
  EXPECT_EQ(reports[0], "");
  EXPECT_EQ(reports[1], "");
  // Rank 1 never calls ncclCommInitRank: rank 0's init fails naming it, and
  // the segment is gone.
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  reports = RunRanks(1, [&](int) -> std::string {
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, 2, id, 0);
    const std::string last = ncclGetLastError(nullptr);
    return Check(r == ncclSystemError, std::string("got ") + ncclGetErrorString(r)) +
           Check(last.find("ncclCommInitRank") != std::string::npos && last.find("rank 1 of 2") != std::string::npos,
                 "last error: " + last);
  });
  EXPECT_EQ(reports[0], "");
  EXPECT_EQ(SegmentsLeft(), 0);
  unsetenv("ZEROSHARD_SIM_NCCL_TIMEOUT_S");
}

}  // namespace
