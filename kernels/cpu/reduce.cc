#include "zeroshard/kernels/cpu/reduce.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"

namespace zeroshard::cpu {

namespace {

template <typename A>
A MaxNan(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return b > a ? b : a;
  } else {
    return (b > a || b != b) ? b : a;  // NaN wins and stays
  }
}

// Sum accumulates in float (float data) or int64 (integer data); max in the compute type.
template <typename T>
using SumAcc = std::conditional_t<std::is_integral_v<T>, int64_t, float>;

template <typename T, typename TOut>
void ReduceTyped(ReduceKind kind, const T* x, TOut* out, int64_t outer, int64_t r, int64_t inner) {
  using C = ComputeType<T>;
  using S = SumAcc<T>;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * r >= (1 << 15) && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = x + o * r;
      if (kind == ReduceKind::kMax) {
        C m{};
        RunWithIsa([&] {
          m = LaneReduce<C>(r, ConvertElement<C>(row[0]),
                            [&](int64_t i) { return ConvertElement<C>(row[i]); },
                            [](C a, C b) { return MaxNan(a, b); });
        });
        out[o] = ConvertElement<TOut>(m);
      } else {
        S s{};
        RunWithIsa([&] {
          s = LaneReduce<S>(r, S(0), [&](int64_t i) { return static_cast<S>(ConvertElement<C>(row[i])); },
                            [](S a, S b) { return a + b; });
        });
        if (kind == ReduceKind::kMean) {
          out[o] = ConvertElement<TOut>(static_cast<float>(s) / static_cast<float>(r));
        } else {
          out[o] = ConvertElement<TOut>(s);
        }
      }
    }
    return;
  }
  // inner > 1: accumulate rows of `inner` elements, vectorised over inner;
  // tasks are (outer, chunk of inner) pairs so that outer == 1 still spreads.
  constexpr int64_t kChunk = 512;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = outer * chunks;
#pragma omp parallel for schedule(static) if (outer * r * inner >= (1 << 15) && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / chunks;
    const int64_t j0 = (t % chunks) * kChunk;
    const int64_t len = std::min(kChunk, inner - j0);
    const T* base = x + o * r * inner + j0;
    TOut* dst = out + o * inner + j0;
    if (kind == ReduceKind::kMax) {
      C acc[kChunk];
      RunWithIsa([&] {
        for (int64_t j = 0; j < len; ++j) acc[j] = ConvertElement<C>(base[j]);
        for (int64_t i = 1; i < r; ++i) {
          const T* row = base + i * inner;
          for (int64_t j = 0; j < len; ++j) acc[j] = MaxNan(acc[j], ConvertElement<C>(row[j]));
        }
      });
      for (int64_t j = 0; j < len; ++j) dst[j] = ConvertElement<TOut>(acc[j]);
    } else {
      S acc[kChunk];
      RunWithIsa([&] {
        for (int64_t j = 0; j < len; ++j) acc[j] = S(0);
        for (int64_t i = 0; i < r; ++i) {
          const T* row = base + i * inner;
          for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<S>(ConvertElement<C>(row[j]));
        }
      });
      for (int64_t j = 0; j < len; ++j) {
        if (kind == ReduceKind::kMean) {
          dst[j] = ConvertElement<TOut>(static_cast<float>(acc[j]) / static_cast<float>(r));
        } else {
          dst[j] = ConvertElement<TOut>(acc[j]);
        }
      }
    }
  }
}

}  // namespace

void ReduceAxis(ReduceKind kind, const Tensor& x, int64_t outer, int64_t r, int64_t inner,
                const Tensor& out) {
  DispatchDType(x.dtype(), [&]<typename T>() {
    DispatchDType(out.dtype(), [&]<typename TOut>() {
      ReduceTyped<T, TOut>(kind, static_cast<const T*>(x.raw_data()),
                           static_cast<TOut*>(out.raw_data()), outer, r, inner);
    });
  });
}

void ArgMaxAxis(const Tensor& x, int64_t outer, int64_t r, int64_t inner, const Tensor& out) {
  DispatchDType(x.dtype(), [&]<typename T>() {
    DispatchDType(out.dtype(), [&]<typename TIdx>() {
      using C = ComputeType<T>;
      const T* xp = static_cast<const T*>(x.raw_data());
      TIdx* op = static_cast<TIdx*>(out.raw_data());
      const int64_t tasks = outer * inner;
#pragma omp parallel for schedule(static) if (tasks * r >= (1 << 15) && tasks > 1)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t o = t / inner;
        const int64_t j = t % inner;
        const T* p = xp + o * r * inner + j;
        int64_t best = 0;
        C best_v = ConvertElement<C>(p[0]);
        for (int64_t i = 1; i < r; ++i) {
          if constexpr (!std::is_integral_v<C>) {
            if (best_v != best_v) break;  // the first NaN is the answer
          }
          const C v = ConvertElement<C>(p[i * inner]);
          if (v > best_v || v != v) {
            best_v = v;
            best = i;
          }
        }
        op[o * inner + j] = static_cast<TIdx>(best);
      }
    });
  });
}

double SumAll(const Tensor& x, bool square) {
  constexpr int64_t kBlock = 4096;  // fixed: the summation order never depends on threads
  const int64_t n = x.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  DispatchDType(x.dtype(), [&]<typename T>() {
    using C = ComputeType<T>;
    const T* p = static_cast<const T*>(x.raw_data());
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t b = 0; b < blocks; ++b) {
      const T* q = p + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      if constexpr (std::is_integral_v<C>) {
        double s = 0;
        for (int64_t i = 0; i < len; ++i) {
          const double v = static_cast<double>(q[i]);
          s += square ? v * v : v;
        }
        partial[b] = s;
      } else {
        float s = 0;
        RunWithIsa([&] {
          if (square) {
            s = LaneReduce<float>(len, 0.0f,
                                  [&](int64_t i) {
                                    const float v = ConvertElement<float>(q[i]);
                                    return v * v;
                                  },
                                  [](float a, float c) { return a + c; });
          } else {
            s = LaneReduce<float>(len, 0.0f, [&](int64_t i) { return ConvertElement<float>(q[i]); },
                                  [](float a, float c) { return a + c; });
          }
        });
        partial[b] = s;
      }
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

}  // namespace zeroshard::cpu
