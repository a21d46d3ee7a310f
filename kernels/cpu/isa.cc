#include "zeroshard/kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace zeroshard::cpu {

namespace {

CpuIsa Detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
  return CpuIsa::kBaseline;
}

CpuIsa FromEnvironment(CpuIsa detected) {
  const char* env = std::getenv("ZEROSHARD_CPU_ISA");
  if (env == nullptr) return detected;
  const std::string v(env);
  CpuIsa wanted = detected;
  if (v == "baseline") wanted = CpuIsa::kBaseline;
  if (v == "avx2") wanted = CpuIsa::kAvx2;
  if (v == "avx512") wanted = CpuIsa::kAvx512;
  return wanted < detected ? wanted : detected;
}

std::atomic<int>& Active() {
  static std::atomic<int> active{static_cast<int>(RequestedCpuIsa())};
  return active;
}

}  // namespace

CpuIsa RequestedCpuIsa() {
  static const CpuIsa requested = FromEnvironment(DetectedCpuIsa());
  return requested;
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa <= DetectedCpuIsa()) out.push_back(isa);
  }
  return out;
}

CpuIsa DetectedCpuIsa() {
  static const CpuIsa detected = Detect();
  return detected;
}

CpuIsa ActiveCpuIsa() { return static_cast<CpuIsa>(Active().load(std::memory_order_relaxed)); }

void SetActiveCpuIsa(CpuIsa isa) {
  const CpuIsa clamped = isa < DetectedCpuIsa() ? isa : DetectedCpuIsa();
  Active().store(static_cast<int>(clamped), std::memory_order_relaxed);
}

absl::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kBaseline: return "baseline";
  }
  return "unknown";
}

}  // namespace zeroshard::cpu
