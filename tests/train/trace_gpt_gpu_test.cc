// The job's --trace on GPUs (backend nccl, one in-process rank per device):
// besides the host layout (tests/train/trace_checks.h), GPU rows from CUDA
// events (Note [GPU spans] in runtime/gpu_timeline.h) that follow their
// launches, in stream order, read by tools/trace_summary; a traced step adds
// one host synchronisation; NVTX ranges of the same names, while traced or
// when ZEROSHARD_NVTX=1 asks. Skips without a CUDA device; on the simulated
// device (`make sim-test`) the GPU spans must also lie inside their launches,
// and the simulator's NVTX stand-in shows the ranges.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/nvtx.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tests/testing.h"
#include "zeroshard/tests/train/trace_checks.h"
#include "zeroshard/tools/trace_summary.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard::testing {
namespace {

bool OnSimulator() {
  absl::StatusOr<std::string> name = cuda::CudaDeviceName(0);
  return name.ok() && absl::StrContains(*name, "cuda_sim");
}

std::vector<int> Worlds() {
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  std::vector<int> worlds = {1};
  if (n.ok() && *n >= 2) worlds.push_back(2);
  return worlds;
}

// Rank 0's summary of `o` on `world` GPUs; `shared` records every rank into one recorder.
TrainSummary TrainOnGpus(const TrainOptions& o, int world, TraceRecorder* shared = nullptr) {
  TrainOptions run = o;
  run.shared_trace = shared;
  TrainSummary s;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& local) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(local, Device::Cuda(local.rank())));
    return RunTraining(run, *nccl, &s, &local);
  });
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  return s;
}

TEST(TraceGptOnGpus, GpuRowsFollowTheirLaunchesAndTraceSummaryReadsThem) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (int world : Worlds()) {
    for (const bool shared : {true, false}) {
      if (world == 1 && !shared) continue;  // one rank: nothing to merge
      SCOPED_TRACE(::testing::Message() << world << " GPU(s), " << (shared ? "one recorder" : "merged recorders"));
      const std::string path = ::testing::TempDir() + "/gpu_trace.json";
      TraceRecorder trace;
      nvtx::ClearRecordedRanges();
      TrainOnGpus(TinyTracedJob(path), world, shared ? &trace : nullptr);
      // The host layout holds on NCCL too (its comm spans are the launches).
      ZS_EXPECT_OK(CheckMergedJobTrace(path, world, /*steps=*/2));
      ZS_EXPECT_OK(CheckGpuRows(path, world, /*inside_launch=*/OnSimulator()));
      ZS_ASSERT_OK_AND_ASSIGN(tools::TraceSummary summary, tools::SummarizeTraceFile(path));
      ASSERT_EQ(static_cast<int>(summary.ranks.size()), world);
      for (const tools::RankSummary& r : summary.ranks) {
        SCOPED_TRACE(r.pid);
        EXPECT_TRUE(r.gpu_rows);
        EXPECT_GT(r.total.compute_us, 0);
        if (world > 1) { EXPECT_GT(r.total.comm_us, 0); }
        EXPECT_GE(r.total.exposed_us, 0);
        EXPECT_LE(r.total.exposed_us, r.total.comm_us + 1e-9);
      }
      if (!OnSimulator()) continue;
      // NVTX: every range closed; the steps and every GPU span's name among them.
      std::set<std::string> names;
      for (const nvtx::RecordedRange& range : nvtx::RecordedRanges()) {
        EXPECT_TRUE(range.ended) << range.name;
        names.insert(range.name);
      }
      for (const char* want : {"step 1", "step 2", "forward <root>", "backward <root>", "all-gather transformer.h.0"}) {
        if (world == 1 && absl::StartsWith(want, "all-gather")) continue;  // one rank gathers nothing
        EXPECT_TRUE(names.count(want)) << want;
      }
      EXPECT_FALSE(names.count("step 0")) << "an untraced step opened a range";
    }
  }
}

TEST(TraceGptOnGpus, ATracedStepAddsOneHostSynchronisation) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TrainOptions o = TinyTracedJob("");
  // Without the limiter, whose waits depend on how far the device lags, the
  // synchronisations per step are the same in every run.
  o.sharding.limit_all_gathers = 0;
  const TrainSummary untraced = TrainOnGpus(o, 1);
  // Steps 2 and 3 are the ones counted (after two warm-up steps): both traced.
  o.trace = ::testing::TempDir() + "/counted.json";
  o.trace_from = 2;
  o.trace_steps = 2;
  const TrainSummary traced = TrainOnGpus(o, 1);
  ASSERT_GE(untraced.host_syncs_per_step, 0);
  // Note [GPU spans]: Resolve's one wait on the reference event, nothing else.
  EXPECT_EQ(traced.host_syncs_per_step, untraced.host_syncs_per_step + 1);
  EXPECT_EQ(traced.cuda_mallocs_per_step, 0.0);  // the events are not device memory either
  // ZEROSHARD_NVTX=1 without a trace: ranges in every step, no events, no wait.
  o.trace = "";
  ASSERT_EQ(setenv("ZEROSHARD_NVTX", "1", 1), 0);
  nvtx::ClearRecordedRanges();
  const TrainSummary ranges_only = TrainOnGpus(o, 1);
  unsetenv("ZEROSHARD_NVTX");
  EXPECT_EQ(ranges_only.host_syncs_per_step, untraced.host_syncs_per_step);
  EXPECT_EQ(ranges_only.losses, untraced.losses);
  if (!OnSimulator()) return;
  std::set<std::string> names;
  for (const nvtx::RecordedRange& range : nvtx::RecordedRanges()) {
    EXPECT_TRUE(range.ended) << range.name;
    names.insert(range.name);
  }
  for (const char* want : {"step 0", "step 3", "forward <root>", "backward <root>"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
}

}  // namespace
}  // namespace zeroshard::testing
