// One test suite for every Communicator backend.
//
//   // local_communicator_test.cc
//   INSTANTIATE_TEST_SUITE_P(Local, CollectivesTest,
//                            ::testing::Values(LocalBackend(1), LocalBackend(2), ...),
//                            BackendName);
//
// A backend is a way to run a function on every rank of a fresh communicator
// and learn every rank's Status (index = rank) on every rank: the in-process
// backend runs threads; the MPI backend runs one rank per process (under
// mpirun) and exchanges the statuses, so every process sees the same vector
// and passes or fails each test together.
//
// Inputs are rank-valued with closed-form answers: rank r's element i is
// Value(r, i), small integers exact in every dtype (sums of up to 8 ranks
// stay exact in bf16), and the expected reduction is computed here in plain
// loops, independently of the library's reduction code.
#ifndef ZEROSHARD_TESTS_COLLECTIVES_COLLECTIVES_SUITE_H_
#define ZEROSHARD_TESTS_COLLECTIVES_COLLECTIVES_SUITE_H_

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/allocator.h"

namespace zeroshard::testing {

using RankFn = std::function<absl::Status(Communicator&)>;

struct Backend {
  std::string name;  // a gtest-safe name, e.g. "local4", "mpi"
  int world_size = 1;
  std::function<std::vector<absl::Status>(const RankFn&, const CommunicatorOptions&)> run;
  // Why the backend cannot run here (e.g. "needs 2 GPUs"), or "" / unset.
  std::function<std::string()> skip;
  // What the backend promises beyond the common contract.
  bool names_missing_rank = true;  // on a timeout
  bool max_propagates_nan = true;
};

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param.name;
}

class CollectivesTest : public ::testing::TestWithParam<Backend> {
 public:
  static CommunicatorOptions DefaultOptions();
  void SetUp() override;

 protected:
  int world_size() const { return GetParam().world_size; }
  // Runs on every rank with the suite's default options (a generous timeout,
  // so a bug fails instead of hanging).
  std::vector<absl::Status> Run(const RankFn& fn) const { return Run(fn, DefaultOptions()); }
  std::vector<absl::Status> Run(const RankFn& fn, const CommunicatorOptions& options) const {
    return GetParam().run(fn, options);
  }
};

// Where a test's tensors live: nullptr (the default CPU allocator) for host
// backends, a CudaAllocator for the communicator's GPU otherwise.
Allocator* TensorAllocator(const Communicator& comm);

// Expects every rank's status to be OK, naming the ranks that failed.
void ExpectAllOk(const std::vector<absl::Status>& statuses);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_COLLECTIVES_COLLECTIVES_SUITE_H_
