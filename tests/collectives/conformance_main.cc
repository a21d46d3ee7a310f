// main() of the conformance suite by backend name (conformance.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/tests/collectives/collectives_suite.h"
#include "zeroshard/tests/collectives/conformance.h"

namespace zeroshard::testing {
namespace {

std::string& BackendNameStorage() {
  static std::string* name = new std::string("local");
  return *name;
}

// A backend under a launcher, started once for the whole binary.
std::unique_ptr<BackendProcess>& SharedProcess() {
  static auto* p = new std::unique_ptr<BackendProcess>();
  return *p;
}

// What a backend can promise beyond the common contract (collectives_suite.h).
void SetPromises(const BackendInfo& info, Backend* b) {
  if (info.gpus) {
    b->names_missing_rank = false;  // NCCL cannot tell who is missing
    b->max_propagates_nan = false;  // NCCL's max is fmaxf
  }
}

std::vector<Backend> ConformanceBackends() {
  const std::string& name = ConformanceBackendName();
  absl::StatusOr<BackendInfo> info = BackendRegistry::Global().Find(name);
  std::vector<Backend> out;
  if (!info.ok()) {
    // The suite's SetUp fails nothing on a skip, so fail loudly here instead.
    out.push_back(Backend{.name = "unknown_backend", .world_size = 1,
                          .run = [s = info.status()](const RankFn&, const CommunicatorOptions&) {
                            return std::vector<absl::Status>{s};
                          }});
    return out;
  }
  if (SharedProcess() != nullptr) {
    BackendProcess* process = SharedProcess().get();
    Backend b{.name = absl::StrCat(name, process->world_size()),
              .world_size = process->world_size(),
              .run = [process](const RankFn& fn, const CommunicatorOptions& options) {
                return process->ShareStatuses(
                    process->Run([&](Communicator& comm, Communicator*) { return fn(comm); }, options));
              }};
    SetPromises(*info, &b);
    out.push_back(std::move(b));
    return out;
  }
  for (int world : {1, 2, 3, 4, 8}) {
    auto start = [name, world](const CommunicatorOptions& options) {
      return BackendRegistry::Global().Start(name, BackendLaunch{.world_size = world, .comm = options});
    };
    Backend b{.name = absl::StrCat(name, world),
              .world_size = world,
              .run = [start](const RankFn& fn, const CommunicatorOptions& options) {
                absl::StatusOr<std::unique_ptr<BackendProcess>> process = start(options);
                if (!process.ok()) return std::vector<absl::Status>{process.status()};
                return (*process)->ShareStatuses(
                    (*process)->Run([&](Communicator& comm, Communicator*) { return fn(comm); }, options));
              },
              .skip = [start]() -> std::string {
                absl::StatusOr<std::unique_ptr<BackendProcess>> process = start(CommunicatorOptions{});
                if (process.status().code() == absl::StatusCode::kFailedPrecondition) {
                  return std::string(process.status().message());
                }
                return "";
              }};
    SetPromises(*info, &b);
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

const std::string& ConformanceBackendName() { return BackendNameStorage(); }

INSTANTIATE_TEST_SUITE_P(Conformance, CollectivesTest, ::testing::ValuesIn(ConformanceBackends()), BackendName);

}  // namespace zeroshard::testing

int main(int argc, char** argv) {
  using ::zeroshard::BackendInfo;
  using ::zeroshard::BackendLaunch;
  using ::zeroshard::BackendProcess;
  using ::zeroshard::BackendRegistry;
  namespace zt = ::zeroshard::testing;
  if (const char* env = std::getenv("ZEROSHARD_TEST_BACKEND"); env != nullptr && *env != '\0') {
    zt::BackendNameStorage() = env;
  }
  // --backend=NAME (taken out of argv before gtest reads it).
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--backend=")) {
      zt::BackendNameStorage() = argv[i] + std::strlen("--backend=");
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  const std::string& name = zt::ConformanceBackendName();
  absl::StatusOr<BackendInfo> info = BackendRegistry::Global().Find(name);
  if (!info.ok()) {
    std::fprintf(stderr, "conformance: %s\n", info.status().ToString().c_str());
    return 1;
  }
  if (info->multi_process) {
    absl::StatusOr<std::unique_ptr<BackendProcess>> process =
        BackendRegistry::Global().Start(name, BackendLaunch{.argc = &argc, .argv = &argv});
    if (!process.ok()) {
      std::fprintf(stderr, "conformance: %s\n", process.status().ToString().c_str());
      return 1;
    }
    zt::SharedProcess() = std::move(*process);
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (zt::SharedProcess() != nullptr && zt::SharedProcess()->process_rank() > 0) {
    // One report: rank 0 sees every rank's status, so it reports for all.
    ::testing::GTEST_FLAG(output) = "";
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  if (zt::SharedProcess() == nullptr || zt::SharedProcess()->lead()) {
    std::printf("conformance suite on backend %s (registered: %s)\n", name.c_str(),
                BackendRegistry::Global().NamesText().c_str());
  }
  const int result = RUN_ALL_TESTS();
  zt::SharedProcess().reset();  // mpi: MPI_Finalize
  return result;
}
