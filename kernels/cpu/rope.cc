#include "zeroshard/kernels/cpu/rope.h"

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/math/rope_ops.h"
#include "zeroshard/kernels/rows.h"

namespace zeroshard::cpu {

namespace {

// One head vector per iteration, (b, t, h) in row-major order; position t
// reads table row t. Reads both halves of pair i before writing it: out may be x.
template <typename T, typename TOut>
void Rotate(const Tensor& x, const float* cos, const float* sin, const Tensor& out, bool inverse) {
  const int64_t nb = x.size(0), nt = x.size(1), nh = x.size(2), half = x.size(3) / 2;
  const T* const xp = static_cast<const T*>(x.raw_data());
  TOut* const op = static_cast<TOut*>(out.raw_data());
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), xs2 = x.stride(2), xs3 = x.stride(3);
  const int64_t os0 = out.stride(0), os1 = out.stride(1), os2 = out.stride(2), os3 = out.stride(3);
  const float sign = inverse ? -1.0f : 1.0f;
  const int64_t vectors = nb * nt * nh;
#pragma omp parallel for schedule(static) if (vectors * half >= kRowParallelWork && vectors > 1)
  for (int64_t v = 0; v < vectors; ++v) {
    const int64_t h = v % nh, t = (v / nh) % nt, b = v / (nh * nt);
    const T* xv = xp + b * xs0 + t * xs1 + h * xs2;
    TOut* ov = op + b * os0 + t * os1 + h * os2;
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    auto body = [&](int64_t sx, int64_t so) {
      for (int64_t i = 0; i < half; ++i) {
        const float lo = ConvertElement<float>(xv[i * sx]);
        const float hi = ConvertElement<float>(xv[(i + half) * sx]);
        const float si = sign * s[i];
        ov[i * so] = ConvertElement<TOut>(RopeRotateLo(lo, hi, c[i], si));
        ov[(i + half) * so] = ConvertElement<TOut>(RopeRotateHi(lo, hi, c[i], si));
      }
    };
    if (xs3 == 1 && os3 == 1) {
      RunWithIsa([&] { body(1, 1); });
    } else {
      body(xs3, os3);
    }
  }
}

}  // namespace

void RopeApply(const Tensor& x, const float* cos, const float* sin, const Tensor& out, bool inverse) {
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    DispatchFloatDType(out.dtype(), [&]<typename TOut>() { Rotate<T, TOut>(x, cos, sin, out, inverse); });
  });
}

}  // namespace zeroshard::cpu
