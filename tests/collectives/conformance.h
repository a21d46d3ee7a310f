// The collectives conformance suite by backend name: the table of
// collectives_suite.h (all-gather, reduce-scatter, all-reduce, broadcast,
// barrier, split, argument errors, mismatches, timeouts, ...) against any
// backend registered in collectives/backend_registry.h.
//
//   conformance_test                         # local, world sizes 1 2 3 4 8
//   conformance_test --backend=NAME          # any registered backend
//   ZEROSHARD_TEST_BACKEND=NAME conformance_test
//   mpirun -np 2 conformance_test --backend=mpi   (tests/collectives/mpi_test.sh)
//
// Link :conformance_main (it has main) and, for a backend from outside, the
// file that registers it (out_of_tree_backend_test.cc shows one). An
// in-process backend runs at world sizes 1, 2, 3, 4 and 8, started afresh for
// each test; one under a launcher (BackendInfo::multi_process) is started once
// and runs at the launcher's size, every process running every test and
// rank 0 reporting for all. A backend whose Start fails with
// FailedPrecondition (nccl without GPUs or CUDA) skips, saying why.
#ifndef ZEROSHARD_TESTS_COLLECTIVES_CONFORMANCE_H_
#define ZEROSHARD_TESTS_COLLECTIVES_CONFORMANCE_H_

#include <string>

namespace zeroshard::testing {

// The backend the suite runs on (--backend or ZEROSHARD_TEST_BACKEND; "local").
const std::string& ConformanceBackendName();

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_COLLECTIVES_CONFORMANCE_H_
