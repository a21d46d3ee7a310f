// The collectives suite on NCCL: ranks are threads of this process, one GPU
// each, bootstrapped through the in-process backend. Skips without enough
// GPUs (and in CPU-only builds), so it passes on machines without a GPU.
#include "zeroshard/collectives/nccl_communicator.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/staged_communicator.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/collectives/collectives_suite.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {
namespace {

std::string MissingGpus(int needed) {
  if (!cuda::BuiltWithCuda()) return "built without CUDA";
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  const int have = n.ok() ? *n : 0;
  if (have < needed) return absl::StrCat("needs ", needed, " GPU(s), found ", have);
  return "";
}

Backend NcclBackend(int world_size) {
  return Backend{
      .name = absl::StrCat("nccl", world_size),
      .world_size = world_size,
      .run = [world_size](const RankFn& fn, const CommunicatorOptions& options) {
        return RunRanks(world_size, [&](Communicator& local) -> absl::Status {
          ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                              NcclCommunicator::Create(local, Device::Cuda(local.rank()),
                                                       NcclOptions{.comm = options}));
          return fn(*nccl);
        });
      },
      .skip = [world_size] { return MissingGpus(world_size); },
      .names_missing_rank = false,  // NCCL cannot tell who is missing
      .max_propagates_nan = false,  // NCCL's max is fmaxf
  };
}

INSTANTIATE_TEST_SUITE_P(Nccl, CollectivesTest,
                         ::testing::Values(NcclBackend(1), NcclBackend(2), NcclBackend(4)),
                         BackendName);

// Host tensors through NCCL (StagedCommunicator: the env launch's host
// communicator), the same suite: it must keep every promise of a host
// backend except those NCCL cannot (naming a missing rank, NaN in MAX).
Backend StagedBackend(int world_size) {
  return Backend{
      .name = absl::StrCat("staged_nccl", world_size),
      .world_size = world_size,
      .run = [world_size](const RankFn& fn, const CommunicatorOptions& options) {
        return RunRanks(world_size, [&](Communicator& local) -> absl::Status {
          ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                              NcclCommunicator::Create(local, Device::Cuda(local.rank()),
                                                       NcclOptions{.comm = options}));
          CudaAllocator staging(local.rank());
          ZS_ASSIGN_OR_RETURN(std::unique_ptr<StagedCommunicator> host,
                              StagedCommunicator::Create(*nccl, &staging));
          return fn(*host);
        });
      },
      .skip = [world_size] { return MissingGpus(world_size); },
      .names_missing_rank = false,
      .max_propagates_nan = false,
  };
}

INSTANTIATE_TEST_SUITE_P(StagedOverNccl, CollectivesTest,
                         ::testing::Values(StagedBackend(1), StagedBackend(2)), BackendName);

// The shared-file rendezvous (issue 26): rank 0's id file is readable by its
// owner only, no temporary file is left, and the group works.
TEST(NcclCommunicatorTest, FileRendezvousWritesAPrivateFileAndFormsTheGroup) {
  if (std::string missing = MissingGpus(2); !missing.empty()) GTEST_SKIP() << missing;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/nccl_rendezvous");
  std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str());
  const std::string path = dir + "/id";
  std::vector<absl::Status> statuses = RunRanks(2, [&](Communicator& local) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::CreateFromFile(path, local.rank(), 2, Device::Cuda(local.rank())));
    ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Full({4}, local.rank() + 1.0, DType::kF32, TensorAllocator(*nccl)));
    ZS_RETURN_IF_ERROR(nccl->AllReduce(x));
    ZS_ASSIGN_OR_RETURN(Tensor host, x.To(DefaultCpuAllocator()));
    EXPECT_EQ(host.data<float>()[3], 3.0f);  // 1 + 2, exact
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ZS_EXPECT_OK(s);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Only the id itself is in the folder.
  EXPECT_EQ(std::system(absl::StrCat("test $(ls -A ", dir, " | wc -l) -eq 1").c_str()), 0);
}

// A file an earlier run left at the path is not read (issue 20): neither
// another job's nor this job's from longer ago than the timeout. Rank 1
// starts first and finds the stale file; it must wait for rank 0's own
// (written 300 ms later) and the group must form. The stale id's bytes are
// zeros, which no NCCL accepts: reading it would fail the run at once.
TEST(NcclCommunicatorTest, FileRendezvousIgnoresAStaleFile) {
  if (std::string missing = MissingGpus(2); !missing.empty()) GTEST_SKIP() << missing;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/nccl_stale_rendezvous");
  std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str());
  const std::string path = dir + "/id";
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  const int64_t hour_ns = int64_t{3600} * 1000000000;
  for (const auto& [what, header] : std::vector<std::pair<std::string, std::string>>{
           {"another job's", absl::StrCat("zeroshard-nccl-id 2 job=job-6 created_ns=", now_ns)},
           {"this job's, an hour old", absl::StrCat("zeroshard-nccl-id 2 job=job-7 created_ns=", now_ns - hour_ns)}}) {
    SCOPED_TRACE(what);
    {
      std::ofstream stale(path, std::ios::binary | std::ios::trunc);
      stale << header << "\n" << std::string(128, '\0');  // NCCL_UNIQUE_ID_BYTES
    }
    const NcclOptions options{.comm = {.timeout = absl::Seconds(60)}};
    std::vector<absl::Status> statuses = RunRanks(2, [&](Communicator& local) -> absl::Status {
      if (local.rank() == 0) absl::SleepFor(absl::Milliseconds(300));
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                          NcclCommunicator::CreateFromFile(path, local.rank(), 2, Device::Cuda(local.rank()),
                                                           options, "job-7"));
      ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Full({2}, local.rank() + 1.0, DType::kF32, TensorAllocator(*nccl)));
      ZS_RETURN_IF_ERROR(nccl->AllReduce(x));
      ZS_ASSIGN_OR_RETURN(Tensor host, x.To(DefaultCpuAllocator()));
      EXPECT_EQ(host.data<float>()[1], 3.0f);
      return absl::OkStatus();
    });
    for (const absl::Status& st : statuses) ZS_EXPECT_OK(st);
  }
  // No rank 0 at all: rank 1 names the file it ignored in its DeadlineExceeded.
  {
    std::ofstream stale(path, std::ios::binary | std::ios::trunc);
    stale << "zeroshard-nccl-id 2 job=job-6 created_ns=" << now_ns << "\n" << std::string(128, '\0');
  }
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> alone = NcclCommunicator::CreateFromFile(
      path, 1, 2, Device::Cuda(1), NcclOptions{.comm = {.timeout = absl::Milliseconds(300)}}, "job-7");
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kDeadlineExceeded) << alone.status();
  EXPECT_NE(alone.status().message().find("ignored the file there: another job's"), std::string::npos)
      << alone.status();
}

TEST(NcclCommunicatorTest, CreateFailsCleanlyWithoutAGpu) {
  if (MissingGpus(1).empty()) GTEST_SKIP() << "a GPU is present";
  std::vector<absl::Status> statuses = RunRanks(1, [](Communicator& local) {
    return NcclCommunicator::Create(local, Device::Cuda(0)).status();
  });
  EXPECT_FALSE(statuses[0].ok());
}

TEST(NcclCommunicatorTest, RejectsACpuDevice) {
  if (!cuda::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  std::vector<absl::Status> statuses = RunRanks(1, [](Communicator& local) {
    return NcclCommunicator::Create(local, Device::Cpu()).status();
  });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GPU")));
}

}  // namespace
}  // namespace zeroshard::testing
