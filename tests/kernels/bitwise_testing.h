// The check that a kernel's results are bitwise the same whatever the OpenMP
// thread count and the instruction set (kernels/cpu/isa.h): the promise of
// every CPU kernel with sums (fixed blocks combined in a fixed order, no FMA
// contraction).
//
//   auto run = [&]() { ...run the op...; return ToDoubles(out); };
//   ExpectSameBitsOnEveryThreadCountAndIsa(run);
#ifndef ZEROSHARD_TESTS_KERNELS_BITWISE_TESTING_H_
#define ZEROSHARD_TESTS_KERNELS_BITWISE_TESTING_H_

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "zeroshard/kernels/cpu/isa.h"

namespace zeroshard::testing {

// `run()` returns the results as doubles (exact for every dtype); each run
// with 1 and 3 threads, then on each instruction set this processor supports,
// must equal the first run. Restores the thread count and the requested ISA.
template <typename Run>
void ExpectSameBitsOnEveryThreadCountAndIsa(const Run& run) {
  const std::vector<double> reference = run();
  const int threads = omp_get_max_threads();
  for (int n : {1, 3}) {
    omp_set_num_threads(n);
    EXPECT_EQ(run(), reference) << n << " threads";
  }
  omp_set_num_threads(threads);
  for (cpu::CpuIsa isa : cpu::SupportedCpuIsas()) {
    cpu::SetActiveCpuIsa(isa);
    EXPECT_EQ(run(), reference) << cpu::CpuIsaName(cpu::ActiveCpuIsa());
  }
  cpu::SetActiveCpuIsa(cpu::RequestedCpuIsa());
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_BITWISE_TESTING_H_
