#include "zeroshard/optim/cpu/optim_kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/optim/cpu/vector_half.h"

namespace zeroshard::optim::cpu {

namespace {

using ::zeroshard::cpu::RunWithIsa;

// Elements per parallel task: large enough that a task is mostly streaming
// (4 x 256 KiB of fp32 per Adam task), small enough to balance two to a few
// dozen threads over a shard.
constexpr int64_t kChunk = 1 << 16;

// Splits segments into tasks of at most kChunk elements.
std::vector<Segment> Chunks(absl::Span<const Segment> segments) {
  std::vector<Segment> tasks;
  for (const Segment& s : segments) {
    for (int64_t o = 0; o < s.numel; o += kChunk) {
      tasks.push_back({s.offset + o, std::min(kChunk, s.numel - o), s.scalars});
    }
  }
  return tasks;
}

int64_t TotalNumel(absl::Span<const Segment> segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.numel;
  return n;
}

// Runs fn(task) for every task, on `num_threads` OpenMP threads (0: the
// OpenMP default) when there is enough work.
template <typename Fn>
void ParallelOverChunks(absl::Span<const Segment> segments, int num_threads, const Fn& fn) {
  const std::vector<Segment> tasks = Chunks(segments);
  const int64_t count = static_cast<int64_t>(tasks.size());
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (threads > 1 && count > 1 && TotalNumel(segments) >= kChunk)
  for (int64_t t = 0; t < count; ++t) fn(tasks[t]);
}

// Marks "no low-precision copy of the parameters".
struct NoCopy {};

// Widens a stored gradient to float; f16 through the branch-free form (same
// bits as ConvertElement).
template <typename TG>
inline float LoadGrad(TG g) {
  if constexpr (std::is_same_v<TG, Float16>) {
    return Float16BitsToFloatVectorizable(g.bits);
  } else {
    return ConvertElement<float>(g);
  }
}

// Rounds the updated parameter into the copy's storage type; f16 through the
// branch-free form so the loop still vectorises (same bits as ConvertElement).
template <typename TC>
inline TC RoundForCopy(float v) {
  if constexpr (std::is_same_v<TC, Float16>) {
    return Float16::FromBits(FloatToFloat16BitsVectorizable(v));
  } else {
    return ConvertElement<TC>(v);
  }
}

// Calls fn.template operator()<TG, TC>() for the grad storage type TG and the
// copy storage type TC (NoCopy when there is none).
template <typename Fn>
void DispatchGradAndCopy(DType grad_dtype, std::optional<DType> copy_dtype, const Fn& fn) {
  DispatchFloatDType(grad_dtype, [&]<typename TG>() {
    if (!copy_dtype.has_value()) {
      fn.template operator()<TG, NoCopy>();
    } else {
      DispatchFloatDType(*copy_dtype, [&]<typename TC>() { fn.template operator()<TG, TC>(); });
    }
  });
}

// ---------------------------------------------------------------- Adam

template <bool kDecoupled, typename TG, typename TC>
void AdamRun(const AdamScalars& scalars, float* param, const TG* grad, float* exp_avg,
             float* exp_avg_sq, TC* copy, int64_t n) {
  RunWithIsa([&] {
    // Local, restrict-qualified copies: the vectoriser then needs no alias
    // checks and keeps the scalars in registers.
    const AdamScalars s = scalars;
    float* __restrict p = param;
    const TG* __restrict g = grad;
    float* __restrict m = exp_avg;
    float* __restrict v = exp_avg_sq;
    TC* __restrict c = copy;
    for (int64_t i = 0; i < n; ++i) {
      float pi = p[i], mi = m[i], vi = v[i];
      const float gi = LoadGrad(g[i]);
      if constexpr (kDecoupled) {
        AdamWUpdate(pi, gi, mi, vi, s);
      } else {
        AdamUpdate(pi, gi, mi, vi, s);
      }
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
      if constexpr (!std::is_same_v<TC, NoCopy>) c[i] = RoundForCopy<TC>(pi);
    }
  });
}

// ---------------------------------------------------------------- SGD

template <bool kMomentum, typename TG, typename TC>
void SgdRun(const SgdScalars& scalars, float* param, const TG* grad, float* momentum_buffer,
            TC* copy, int64_t n) {
  RunWithIsa([&] {
    const SgdScalars s = scalars;
    float* __restrict p = param;
    const TG* __restrict g = grad;
    float* __restrict b = momentum_buffer;
    TC* __restrict c = copy;
    for (int64_t i = 0; i < n; ++i) {
      float pi = p[i];
      const float gi = LoadGrad(g[i]);
      if constexpr (kMomentum) {
        float bi = b[i];
        SgdMomentumUpdate(pi, gi, bi, s);
        b[i] = bi;
      } else {
        SgdUpdate(pi, gi, s);
      }
      p[i] = pi;
      if constexpr (!std::is_same_v<TC, NoCopy>) c[i] = RoundForCopy<TC>(pi);
    }
  });
}

// ---------------------------------------------------------------- non-finite check

// Inf and NaN are the values whose exponent bits are all ones.
template <typename T>
struct ExponentMask;
template <>
struct ExponentMask<float> {
  using Bits = uint32_t;
  static constexpr Bits kMask = 0x7f800000u;
};
template <>
struct ExponentMask<BFloat16> {
  using Bits = uint16_t;
  static constexpr Bits kMask = 0x7f80u;
};
template <>
struct ExponentMask<Float16> {
  using Bits = uint16_t;
  static constexpr Bits kMask = 0x7c00u;
};

template <typename T>
bool HasNonFiniteRun(const T* data, int64_t n) {
  using Bits = typename ExponentMask<T>::Bits;
  constexpr Bits kMask = ExponentMask<T>::kMask;
  const Bits* bits = reinterpret_cast<const Bits*>(data);
  int found = 0;
  RunWithIsa([&] {
    const Bits* __restrict x = bits;
    found = ::zeroshard::cpu::LaneReduce<int>(
        n, 0, [&](int64_t i) { return (x[i] & kMask) == kMask ? 1 : 0; },
        [](int a, int b) { return a | b; });
  });
  return found != 0;
}

}  // namespace

void AdamStepCpu(bool decoupled, absl::Span<const AdamScalars> scalars,
                 absl::Span<const Segment> segments, const AdamBuffers& buffers, DType grad_dtype,
                 std::optional<DType> copy_dtype, int num_threads) {
  DispatchGradAndCopy(grad_dtype, copy_dtype, [&]<typename TG, typename TC>() {
    const TG* grad = static_cast<const TG*>(buffers.grad);
    TC* copy = static_cast<TC*>(buffers.param_copy);
    ParallelOverChunks(segments, num_threads, [&](const Segment& t) {
      TC* c = copy == nullptr ? nullptr : copy + t.offset;
      if (decoupled) {
        AdamRun<true>(scalars[t.scalars], buffers.param + t.offset, grad + t.offset,
                      buffers.exp_avg + t.offset, buffers.exp_avg_sq + t.offset, c, t.numel);
      } else {
        AdamRun<false>(scalars[t.scalars], buffers.param + t.offset, grad + t.offset,
                       buffers.exp_avg + t.offset, buffers.exp_avg_sq + t.offset, c, t.numel);
      }
    });
  });
}

void SgdStepCpu(absl::Span<const SgdScalars> scalars, absl::Span<const Segment> segments,
                const SgdBuffers& buffers, DType grad_dtype, std::optional<DType> copy_dtype,
                int num_threads) {
  DispatchGradAndCopy(grad_dtype, copy_dtype, [&]<typename TG, typename TC>() {
    const TG* grad = static_cast<const TG*>(buffers.grad);
    TC* copy = static_cast<TC*>(buffers.param_copy);
    ParallelOverChunks(segments, num_threads, [&](const Segment& t) {
      TC* c = copy == nullptr ? nullptr : copy + t.offset;
      if (buffers.momentum_buffer != nullptr) {
        SgdRun<true>(scalars[t.scalars], buffers.param + t.offset, grad + t.offset,
                     buffers.momentum_buffer + t.offset, c, t.numel);
      } else {
        SgdRun<false>(scalars[t.scalars], buffers.param + t.offset, grad + t.offset,
                      static_cast<float*>(nullptr), c, t.numel);
      }
    });
  });
}

bool HasNonFiniteCpu(const void* data, DType dtype, int64_t n) {
  return DispatchFloatDType(dtype, [&]<typename T>() {
    const T* x = static_cast<const T*>(data);
    std::atomic<bool> found{false};
    const Segment whole{0, n, 0};
    ParallelOverChunks(absl::MakeConstSpan(&whole, 1), /*num_threads=*/0, [&](const Segment& t) {
      if (found.load(std::memory_order_relaxed)) return;
      if (HasNonFiniteRun(x + t.offset, t.numel)) found.store(true, std::memory_order_relaxed);
    });
    return found.load();
  });
}

}  // namespace zeroshard::optim::cpu
