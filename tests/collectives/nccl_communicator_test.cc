// The collectives suite on NCCL: ranks are threads of this process, one GPU
// each, bootstrapped through the in-process backend. Skips without enough
// GPUs (and in CPU-only builds), so it passes on machines without a GPU.
#include "collectives/nccl_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "collectives/local_communicator.h"
#include "runtime/cuda/device_api.h"
#include "runtime/status.h"
#include "tests/collectives/collectives_suite.h"
#include "tests/testing.h"

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
