// NVMe offload (ZeRO-Infinity): bitwise parity with host offload and with no
// offload over several steps with gradient accumulation at world sizes 1 and
// 2; the faults (missing or read-only path, full disk, a file truncated or
// changed underneath, EIO on read, each also on one rank of 4); swap files
// removed at the end and stale ones cleaned.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::BlockOptions;
using testing::StatusIs;
using testing::TinyConfig;
using testing::TinyData;

std::string FreshDir(const std::string& name) {
  static int n = 0;
  const std::string d = absl::StrCat(::testing::TempDir(), "/nvme_offload_", ::getpid(), "_", n++, "_", name);
  EXPECT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
  return d;
}

// Names of the swap files in `dir`.
std::vector<std::string> SwapFiles(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (absl::EndsWith(e->d_name, ".swap")) out.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  return out;
}

enum class Where { kNone, kHost, kNvmeOptimizer, kNvmeAll };

struct Setup {
  int world = 2;
  Where where = Where::kNone;
  bool no_sync = false;
  optim::OptimizerKind kind = optim::OptimizerKind::kAdamW;
  DType param_dtype = DType::kF32;
  int buffers = 2;          // optimizer and parameter swap buffers
  bool overlap = true;      // read ahead and write behind
  int64_t max_in_cpu = 0;   // parameter elements kept in host memory
  int steps = 3;
  std::string dir;          // the NVMe path
  std::shared_ptr<IoFaults> faults;
  int fault_rank = -1;      // >= 0: only this rank's swap files get `faults`
  absl::Duration timeout = absl::Seconds(20);  // the collective timeout
  // Runs on rank 0 after step `at_step` (before the next), e.g. to damage a swap file.
  int at_step = -1;
  std::function<void(const std::string& dir)> between_steps;
};

struct Outcome {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;          // rank 0, gathered
  std::map<std::string, std::vector<float>> state;           // rank 0's optimizer state per unit and slot
  int64_t device_after_create = 0;                           // rank 0
  std::vector<std::string> swap_files_during;                // after the first step
  std::string summary;                                       // rank 0's NvmeSummary
  int64_t param_reads = 0, optimizer_reads = 0;              // rank 0's swap statistics
  absl::Status status;                                       // the first failing rank's
  std::vector<absl::Status> statuses;                        // every rank's
  double seconds = 0;                                        // the whole run
};

// A hang ends at the collective timeout (Setup::timeout, 20 s); a run of this
// tiny model takes well under a second, and half the timeout leaves a loaded
// 2-core box a wide margin.
constexpr double kNoHangSeconds = 10;

OffloadPolicy PolicyFor(const Setup& s) {
  OffloadPolicy p;
  switch (s.where) {
    case Where::kNone: break;
    case Where::kHost: p = {.params = true, .grads = true, .optimizer = true}; break;
    case Where::kNvmeAll:
      p.nvme_params = true;
      p.param_nvme = {.path = s.dir, .buffer_count = s.buffers, .max_in_cpu = s.max_in_cpu,
                      .read_ahead = s.overlap, .write_behind = s.overlap};
      [[fallthrough]];
    case Where::kNvmeOptimizer:
      p.nvme_optimizer = true;
      p.optimizer_nvme = {.path = s.dir, .buffer_count = s.buffers, .pin_memory = true,
                          .read_ahead = s.overlap, .write_behind = s.overlap};
      p.aio = {.block_size = 8192, .queue_depth = 4, .thread_count = 2};
      p.nvme_faults = s.faults;
      break;
  }
  return p;
}

Outcome Train(const Setup& s) {
  Outcome out;
  std::mutex mu;
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> st = RunRanks(s.world, [&](Communicator& comm) -> absl::Status {
    const bool lead = comm.rank() == 0;
    nn::GptConfig c = TinyConfig();
    c.n_layer = 3;
    auto gpt = std::make_shared<nn::Gpt>(c);
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("device", comm.rank())});
    CpuAllocator host(CpuAllocator::Options{.name = absl::StrCat("host", comm.rank())});
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
    o.init_seed = 3;
    o.offload = PolicyFor(s);
    if (s.fault_rank >= 0 && comm.rank() != s.fault_rank) o.offload.nvme_faults = nullptr;
    o.mixed_precision.param_dtype = s.param_dtype;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o, &device, &host));
    optim::OptimizerOptions oo{.kind = s.kind, .lr = 1e-2, .weight_decay = 0.1};
    oo.sgd.momentum = 0.9;
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, oo));
    if (lead) {
      out.device_after_create = device.stats().bytes_in_use;
      out.summary = opt.NvmeSummary();
    }
    const TokenData data = TinyData();
    const int per_rank = 6 / s.world;
    for (int step = 0; step < s.steps; ++step) {
      double loss = 0;
      for (int m = 0; m < 2; ++m) {  // two micro-steps
        ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .micro_step = m, .accum_steps = 2,
                                                    .rank = comm.rank(), .world_size = comm.size(),
                                                    .batch_size = per_rank, .block_size = 8}, &device));
        ZS_ASSIGN_OR_RETURN(nn::GptOutput y, gpt->Forward(b.inputs, b.targets));
        ZS_ASSIGN_OR_RETURN(autograd::Variable scaled, ops::Scale(y.loss, 0.5));
        ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, y.loss.value().Item().value() / 2, DType::kF32));
        ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
        loss += l.Item().value();
        if (s.no_sync && m == 0) {
          auto scope = sharded->NoSync();
          ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
        } else {
          ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
        }
      }
      ZS_RETURN_IF_ERROR(sharded->ClipGradNorm(0.5).status());
      ZS_RETURN_IF_ERROR(opt.Step(1e-2));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      if (lead) out.losses.push_back(loss);
      if (step == 0 && lead && !s.dir.empty()) out.swap_files_during = SwapFiles(s.dir);
      if (step == s.at_step && s.between_steps) {
        // Writes behind still in flight would race with the damage.
        if (sharded->param_swap() != nullptr) ZS_RETURN_IF_ERROR(sharded->param_swap()->Flush());
        if (opt.swap() != nullptr) ZS_RETURN_IF_ERROR(opt.swap()->Flush());
        ZS_RETURN_IF_ERROR(comm.Barrier());
        if (lead) s.between_steps(s.dir);
        ZS_RETURN_IF_ERROR(comm.Barrier());
      }
    }
    if (lead) {
      if (sharded->param_swap() != nullptr) out.param_reads = sharded->param_swap()->stats().reads;
      if (opt.swap() != nullptr) out.optimizer_reads = opt.swap()->stats().reads;
      std::vector<std::string> slots = opt.state_slots();
      std::vector<ShardedUnit*> units = sharded->units();
      for (size_t i = 0; i < units.size(); ++i) {
        ZS_RETURN_IF_ERROR(opt.WithUnitState(i, false, [&](const std::vector<Tensor>& t) -> absl::Status {
          for (size_t k = 0; k < t.size(); ++k) {
            ZS_ASSIGN_OR_RETURN(out.state[absl::StrCat(units[i]->name, ".", slots[k])], t[k].ToVector<float>());
          }
          return absl::OkStatus();
        }));
      }
    }
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (!lead) return absl::OkStatus();
      for (auto& [n, v] : gpt->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(out.params[n], v.value().ToVector<float>());
      }
      return absl::OkStatus();
    });
  }, LocalOptions{.comm = {.timeout = s.timeout}});
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.statuses = st;
  for (const absl::Status& x : st) {
    if (!x.ok()) {
      out.status = x;
      break;
    }
  }
  return out;
}

void ExpectBitwiseEqual(const Outcome& got, const Outcome& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.params, want.params);
  EXPECT_EQ(got.state, want.state);
}

// ================================================================ parity

TEST(NvmeOffload, BitwiseEqualToHostOffloadAndNoOffload) {
  for (int world : {1, 2}) {
    for (bool no_sync : {false, true}) {
      const std::string what = absl::StrCat("world ", world, no_sync ? ", no_sync" : ", sharded accumulation");
      const Outcome none = Train({.world = world, .where = Where::kNone, .no_sync = no_sync});
      ASSERT_TRUE(none.status.ok()) << none.status;
      ASSERT_EQ(none.losses.size(), 3u);
      EXPECT_GT(none.device_after_create, 0);
      const Outcome host = Train({.world = world, .where = Where::kHost, .no_sync = no_sync});
      ExpectBitwiseEqual(host, none, what + ": host offload");
      // Optimizer state on NVMe; then parameters too, with 1, 2 and 3 buffers.
      for (Where where : {Where::kNvmeOptimizer, Where::kNvmeAll}) {
        for (int buffers : {1, 2, 3}) {
          const std::string dir = FreshDir("parity");
          const Outcome nvme = Train({.world = world, .where = where, .no_sync = no_sync, .buffers = buffers,
                                      .dir = dir});
          ExpectBitwiseEqual(nvme, none, absl::StrCat(what, where == Where::kNvmeAll ? ": nvme params+optimizer"
                                                                                    : ": nvme optimizer",
                                                      ", ", buffers, " buffers"));
          EXPECT_EQ(nvme.device_after_create, 0);  // nothing persistent on the "device"
          // One optimizer file per rank, one parameter file per rank, while training ...
          EXPECT_EQ(nvme.swap_files_during.size(), static_cast<size_t>(world * (where == Where::kNvmeAll ? 2 : 1)));
          EXPECT_GT(nvme.optimizer_reads, 0);
          if (where == Where::kNvmeAll) { EXPECT_GT(nvme.param_reads, 0); }
          // ... and none after a clean exit.
          EXPECT_TRUE(SwapFiles(dir).empty());
        }
      }
    }
  }
}

TEST(NvmeOffload, WithoutReadAheadAndWriteBehindStaysBitwise) {
  const Outcome none = Train({.world = 2});
  ASSERT_TRUE(none.status.ok()) << none.status;
  const Outcome nvme = Train({.world = 2, .where = Where::kNvmeAll, .buffers = 3, .overlap = false,
                              .dir = FreshDir("no_overlap")});
  ExpectBitwiseEqual(nvme, none, "no overlap");
}

TEST(NvmeOffload, MaxInCpuKeepsTheFirstUnitsInMemoryAndStaysBitwise) {
  const Outcome none = Train({.world = 2});
  ASSERT_TRUE(none.status.ok()) << none.status;
  // A per-rank budget that holds some units but not all: per rank the tiny
  // GPT's blocks hold ~1.6k elements each and the root fewer, so 2000 keeps
  // block 0 and the root in memory and puts blocks 1 and 2 on NVMe.
  for (int64_t max_in_cpu : {int64_t{2000}, int64_t{1} << 40}) {
    const std::string dir = FreshDir("max_in_cpu");
    const Outcome nvme = Train({.world = 2, .where = Where::kNvmeAll, .buffers = 1, .max_in_cpu = max_in_cpu,
                                .dir = dir});
    ExpectBitwiseEqual(nvme, none, absl::StrCat("max_in_cpu ", max_in_cpu));
    if (max_in_cpu == 2000) {
      EXPECT_THAT(nvme.summary, HasSubstr("NVMe parameter shards: 2 regions"));
      EXPECT_GT(nvme.param_reads, 0);
    } else {
      EXPECT_THAT(nvme.summary, ::testing::Not(HasSubstr("parameter shards")));  // all in memory
      EXPECT_EQ(nvme.param_reads, 0);
    }
  }
}

TEST(NvmeOffload, SgdMomentumMixedPrecisionAndTheThreadsBackendStayBitwise) {
  auto no_uring = std::make_shared<IoFaults>();
  no_uring->refuse_io_uring = true;
  no_uring->refuse_o_direct = true;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Outcome none = Train({.kind = optim::OptimizerKind::kSgd, .param_dtype = dt});
    ASSERT_TRUE(none.status.ok()) << none.status;
    const Outcome nvme = Train({.where = Where::kNvmeAll, .kind = optim::OptimizerKind::kSgd, .param_dtype = dt,
                                .buffers = 3, .dir = FreshDir("sgd"), .faults = no_uring});
    ExpectBitwiseEqual(nvme, none, absl::StrCat("sgd, ", DTypeName(dt)));
    EXPECT_THAT(nvme.summary, AllOf(HasSubstr("pread/pwrite threads"), HasSubstr("buffered"),
                                    HasSubstr("refuses O_DIRECT"), HasSubstr("io_uring unavailable")));
  }
}

// ================================================================ faults

TEST(NvmeOffload, MissingOrReadOnlyPathFailsAtCreation) {
  const Outcome missing = Train({.where = Where::kNvmeOptimizer, .dir = FreshDir("m") + "/not_there"});
  EXPECT_THAT(missing.status, StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("not_there"),
                                                                         HasSubstr("existing directory"))));
  auto ro = std::make_shared<IoFaults>();
  ro->create_errno = EROFS;
  const Outcome read_only = Train({.where = Where::kNvmeAll, .dir = FreshDir("ro"), .faults = ro});
  EXPECT_FALSE(read_only.status.ok());
  EXPECT_THAT(std::string(read_only.status.message()), HasSubstr("Read-only file system"));
  ShardingOptions no_path;
  no_path.offload.nvme_optimizer = true;
  EXPECT_THAT(no_path.Validate(1), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs an nvme_path")));
}

TEST(NvmeOffload, FullDiskDuringTrainingIsResourceExhausted) {
  auto faults = std::make_shared<IoFaults>();
  const Outcome out = Train({.world = 1, .where = Where::kNvmeAll, .buffers = 1, .steps = 4, .dir = FreshDir("full"),
                             .faults = faults, .at_step = 0,
                             .between_steps = [&](const std::string&) { faults->write_budget = 40000; }});
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("NVMe swap of"), HasSubstr(".swap' region"),
                                         HasSubstr("No space left on device"))));
  EXPECT_LT(out.losses.size(), 4u);
}

// Truncates or scribbles on every swap file in `dir` whose name holds `only`
// ("-rank2-": one rank's).
void DamageEverySwapFile(const std::string& dir, bool truncate, const std::string& only = "") {
  for (const std::string& f : SwapFiles(dir)) {
    if (!absl::StrContains(f, only)) continue;
    if (truncate) {
      ASSERT_EQ(::truncate(f.c_str(), 4096), 0);
    } else {
      struct stat st;
      ASSERT_EQ(::stat(f.c_str(), &st), 0);
      const int fd = ::open(f.c_str(), O_WRONLY);
      for (off_t at = 100; at < st.st_size; at += 4096) ASSERT_EQ(::pwrite(fd, "\x7f", 1, at), 1);
      ::close(fd);
    }
  }
}

TEST(NvmeOffload, ChangedOrTruncatedUnderneathIsDataLoss) {
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "changed");
    const Outcome out = Train({.world = 1, .where = Where::kNvmeAll, .buffers = 1, .steps = 3,
                               .dir = FreshDir("damaged"), .at_step = 0,
                               .between_steps = [&](const std::string& d) { DamageEverySwapFile(d, truncate); }});
    EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kDataLoss,
                                     AllOf(HasSubstr("NVMe swap of"),
                                           HasSubstr(truncate ? "truncated" : "changed underneath"))));
    EXPECT_EQ(out.losses.size(), 1u);
  }
}

// One rank of 4 meets a swap fault (Note [Swap faults]): its swap files
// changed or truncated underneath, its disk full, or its device failing reads
// (EIO). That rank's error names its swap file and the region; the other three
// return at once (the failing rank's error aborts the in-process group and the
// groups split from it, where every ShardedModel collective runs) with Aborted
// naming rank 2 and its error, never a timeout.
TEST(NvmeOffload, OneRanksSwapFaultNamesTheRegionThereAndTheRankEverywhere) {
  constexpr int kFaulty = 2;
  struct Case {
    std::string name;
    absl::StatusCode code;  // rank 2's
    std::string says;       // in rank 2's message
    std::function<void(const std::string& dir, IoFaults& faults)> inject;
    size_t max_steps;       // steps completed: a read fails in the next step; a write
                            // behind may surface a step later
  };
  const std::vector<Case> cases = {
      {"a byte changed in every 4 KiB", absl::StatusCode::kDataLoss, "changed underneath",
       [](const std::string& d, IoFaults&) { DamageEverySwapFile(d, /*truncate=*/false, "-rank2-"); }, 1},
      {"truncated", absl::StatusCode::kDataLoss, "truncated",
       [](const std::string& d, IoFaults&) { DamageEverySwapFile(d, /*truncate=*/true, "-rank2-"); }, 1},
      {"full disk", absl::StatusCode::kResourceExhausted, "No space left on device",
       [](const std::string&, IoFaults& f) { f.write_budget = 0; }, 2},
      {"EIO on read", absl::StatusCode::kDataLoss, "Input/output error",
       [](const std::string&, IoFaults& f) { f.read_errno = EIO; }, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto faults = std::make_shared<IoFaults>();
    const Outcome out = Train({.world = 4, .where = Where::kNvmeAll, .buffers = 1, .steps = 3,
                               .dir = FreshDir("one_rank"), .faults = faults, .fault_rank = kFaulty, .at_step = 0,
                               .between_steps = [&](const std::string& d) { c.inject(d, *faults); }});
    ASSERT_EQ(out.statuses.size(), 4u);
    EXPECT_THAT(out.statuses[kFaulty],
                StatusIs(c.code, AllOf(HasSubstr("NVMe swap of"), ::testing::ContainsRegex("-rank2-[a-z]+\\.swap' region [0-9]+ \\("),
                                       HasSubstr(c.says))));
    EXPECT_GE(out.losses.size(), 1u);
    EXPECT_LE(out.losses.size(), c.max_steps);
    for (int r = 0; r < 4; ++r) {
      if (r == kFaulty) continue;
      EXPECT_THAT(out.statuses[r], StatusIs(absl::StatusCode::kAborted,
                                            AllOf(HasSubstr("rank 2 "), HasSubstr("returned"), HasSubstr(c.says))))
          << "rank " << r;
    }
    EXPECT_LT(out.seconds, kNoHangSeconds);
  }
}

TEST(NvmeOffload, StaleSwapFilesOfACrashedRunAreCleanedOnRestart) {
  const std::string dir = FreshDir("restart");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string stale = absl::StrCat(dir, "/zeroshard-", child, "-0-rank0-optimizer.swap");
  ::close(::open(stale.c_str(), O_CREAT | O_WRONLY, 0600));
  const Outcome out = Train({.world = 1, .where = Where::kNvmeOptimizer, .steps = 1, .dir = dir});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(out.summary, HasSubstr("removed 1 stale swap file"));
  EXPECT_TRUE(SwapFiles(dir).empty());
}

}  // namespace
}  // namespace zeroshard
