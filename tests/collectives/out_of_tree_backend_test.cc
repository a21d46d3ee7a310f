// An out-of-tree backend: this file registers "local_counting" (the
// in-process ranks, counting what it starts) by name, as code outside the
// project would, and the BUILD target runs the whole conformance suite on it
// by name (--backend=local_counting, conformance_main.cc). The registry's own
// rules (names, duplicates, unknown names) are checked here too.
#include <atomic>
#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/collectives/collectives_suite.h"
#include "zeroshard/tests/collectives/conformance.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {
namespace {

using ::testing::ElementsAre;

std::atomic<int> runs{0};
std::atomic<int> ranks_started{0};

class CountingProcess final : public BackendProcess {
 public:
  explicit CountingProcess(const BackendLaunch& launch) : BackendProcess(launch.comm), world_(launch.world_size) {}
  int world_size() const override { return world_; }
  std::vector<absl::Status> Run(const BackendRankFn& fn, const CommunicatorOptions& comm) override {
    ++runs;
    return RunRanks(world_, [&](Communicator& c) {
      ++ranks_started;
      return fn(c, nullptr);
    }, LocalOptions{.comm = comm});
  }

 private:
  const int world_;
};

absl::StatusOr<std::unique_ptr<BackendProcess>> StartCounting(const BackendLaunch& launch) {
  return std::make_unique<CountingProcess>(launch);
}

ZS_REGISTER_BACKEND(local_counting,
                    (BackendInfo{.name = "local_counting", .description = "in-process ranks, counted (a test)"}),
                    StartCounting);

TEST(OutOfTreeBackendTest, IsRegisteredBesideTheBuiltIns) {
  EXPECT_THAT(BackendRegistry::Global().Names(), ElementsAre("local", "local_counting", "mpi", "nccl"));
  ZS_ASSERT_OK_AND_ASSIGN(BackendInfo info, BackendRegistry::Global().Find("local_counting"));
  EXPECT_FALSE(info.multi_process);
  EXPECT_EQ(ConformanceBackendName(), "local_counting");  // the BUILD target's --backend
}

TEST(OutOfTreeBackendTest, RunsItsRanksByName) {
  const int runs_before = runs.load(), ranks_before = ranks_started.load();
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<BackendProcess> process,
                          BackendRegistry::Global().Start("local_counting", BackendLaunch{.world_size = 3}));
  EXPECT_EQ(process->world_size(), 3);
  EXPECT_EQ(process->process_rank(), -1);
  std::vector<absl::Status> statuses = process->Run([](Communicator& comm, Communicator* host) -> absl::Status {
    if (host != nullptr) return absl::InternalError("expected no host communicator");
    ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::Full({2}, comm.rank() + 1, DType::kF32));
    ZS_RETURN_IF_ERROR(comm.AllReduce(x));
    ZS_ASSIGN_OR_RETURN(std::vector<float> v, x.ToVector<float>());
    if (v[0] != 6 || v[1] != 6) return absl::InternalError("expected 1 + 2 + 3 = 6");
    return absl::OkStatus();
  });
  ASSERT_EQ(statuses.size(), 3u);
  ExpectAllOk(statuses);
  EXPECT_EQ(runs.load() - runs_before, 1);
  EXPECT_EQ(ranks_started.load() - ranks_before, 3);
}

TEST(BackendRegistryTest, RegisteringANameTwiceFails) {
  EXPECT_THAT(BackendRegistry::Global().Register(BackendInfo{.name = "local_counting"}, StartCounting),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("local_counting is already registered")));
  EXPECT_THAT(BackendRegistry::Global().Register(BackendInfo{.name = "local"}, StartCounting),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("local is already registered")));
}

TEST(BackendRegistryTest, NamesAreLowercaseIdentifiers) {
  for (const char* bad : {"", "Local", "9lives", "my-backend", "a b"}) {
    EXPECT_THAT(BackendRegistry::Global().Register(BackendInfo{.name = bad}, StartCounting),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a lowercase identifier")))
        << bad;
  }
  EXPECT_THAT(BackendRegistry::Global().Register(BackendInfo{.name = "no_factory"}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a factory")));
}

TEST(BackendRegistryTest, AnUnknownNameListsTheRegisteredOnes) {
  EXPECT_THAT(BackendRegistry::Global().Find("gloo").status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("backend \"gloo\": expected a registered backend (local, local_counting, mpi, nccl)")));
  EXPECT_THAT(BackendRegistry::Global().Start("gloo", BackendLaunch{}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("local, local_counting, mpi, nccl")));
}

TEST(BackendRegistryTest, StartChecksTheWorldSizeAndSettings) {
  EXPECT_THAT(BackendRegistry::Global().Start("local", BackendLaunch{.world_size = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected world_size >= 1, found 0")));
  BackendLaunch launch{.world_size = 2};
  launch.settings["threads_per_rank"] = "many";
  EXPECT_THAT(BackendRegistry::Global().Start("local", launch).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("threads_per_rank: expected an integer, found \"many\"")));
}

}  // namespace
}  // namespace zeroshard::testing
