// Run-time choice of the CPU vector instruction set for hot loops.
//
//   RunWithIsa([&] {
//     for (int64_t i = 0; i < n; ++i) y[i] = GeluTanh(x[i]);   // plain, inlinable math
//   });
//
// The binary is built for plain x86-64. RunWithIsa calls `body` through one of
// three wrappers compiled with `target("arch=x86-64-v4")` (AVX-512),
// `target("arch=x86-64-v3")` (AVX2 + FMA) or none, each `flatten`ed so that the
// body and the per-element functions it calls are inlined and vectorised for
// that instruction set. The wrapper is picked once per process from CPUID;
// `ZEROSHARD_CPU_ISA=baseline|avx2|avx512` forces a lower level (tests use it to
// check that every path gives the same answer).
//
// Bodies must be self-contained loops over plain arithmetic (no calls that
// cannot be inlined, e.g. std::tanh; use kernels/math/fast_math.h). Eigen's
// GEMM, which picks its kernels with the preprocessor, is compiled once per
// instruction set instead (kernels/cpu/gemm.h).
#ifndef ZEROSHARD_KERNELS_CPU_ISA_H_
#define ZEROSHARD_KERNELS_CPU_ISA_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace zeroshard::cpu {

enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU supports, lowered by ZEROSHARD_CPU_ISA if set.
CpuIsa ActiveCpuIsa();
// The best level this CPU supports, ignoring the environment.
CpuIsa DetectedCpuIsa();
absl::string_view CpuIsaName(CpuIsa isa);
// The level the process started with: DetectedCpuIsa() lowered by
// ZEROSHARD_CPU_ISA, whatever SetActiveCpuIsa did since (tests restore it).
CpuIsa RequestedCpuIsa();
// Every level this CPU runs, lowest first (tests of "bitwise on every ISA").
std::vector<CpuIsa> SupportedCpuIsas();
// Overrides the active level for the rest of the process (tests); clamps to DetectedCpuIsa().
void SetActiveCpuIsa(CpuIsa isa);

namespace internal {

template <typename Body>
__attribute__((target("arch=x86-64-v4"), flatten)) void RunAvx512(const Body& body) {
  body();
}

template <typename Body>
__attribute__((target("arch=x86-64-v3"), flatten)) void RunAvx2(const Body& body) {
  body();
}

template <typename Body>
__attribute__((flatten)) void RunBaseline(const Body& body) {
  body();
}

}  // namespace internal

template <typename Body>
void RunWithIsa(const Body& body) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512: return internal::RunAvx512(body);
    case CpuIsa::kAvx2: return internal::RunAvx2(body);
    case CpuIsa::kBaseline: return internal::RunBaseline(body);
  }
}

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_ISA_H_
