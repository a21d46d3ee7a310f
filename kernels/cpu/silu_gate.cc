#include "zeroshard/kernels/cpu/silu_gate.h"

#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/math/silu_gate_ops.h"
#include "zeroshard/runtime/strided_loop.h"

namespace zeroshard::cpu {

namespace {

// Both gradients in one pass over dy, gate and up; an undefined output gets
// zero strides and is never written.
template <typename T, typename TOut>
void BackwardLoop(const Tensor& dy, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                  const Tensor& dup) {
  const Shape zeros(dy.dim(), 0);
  const T* const dp = static_cast<const T*>(dy.raw_data());
  const T* const gp = static_cast<const T*>(gate.raw_data());
  const T* const upp = static_cast<const T*>(up.raw_data());
  TOut* const dgp = dgate.defined() ? static_cast<TOut*>(dgate.raw_data()) : nullptr;
  TOut* const dup_p = dup.defined() ? static_cast<TOut*>(dup.raw_data()) : nullptr;
  ForEachStridedRun<5>(
      dy.shape(),
      {dgate.defined() ? dgate.strides() : absl::Span<const int64_t>(zeros),
       dup.defined() ? dup.strides() : absl::Span<const int64_t>(zeros), dy.strides(), gate.strides(),
       up.strides()},
      [&](int64_t n, const int64_t* off, const int64_t* step) {
        TOut* dg = dgp != nullptr ? dgp + off[0] : nullptr;
        TOut* du = dup_p != nullptr ? dup_p + off[1] : nullptr;
        const T* d = dp + off[2];
        const T* g = gp + off[3];
        const T* u = upp + off[4];
        // Reads dy, gate and up at i before writing i: an output may be an input.
        auto body = [&](int64_t sg, int64_t su, int64_t sd, int64_t sx, int64_t sy) {
          for (int64_t i = 0; i < n; ++i) {
            const float dv = ConvertElement<float>(d[i * sd]);
            const float gv = ConvertElement<float>(g[i * sx]);
            const float uv = ConvertElement<float>(u[i * sy]);
            if (dg != nullptr) dg[i * sg] = ConvertElement<TOut>(SiluGateGradGate(dv, gv, uv));
            if (du != nullptr) du[i * su] = ConvertElement<TOut>(SiluGateGradUp(dv, gv));
          }
        };
        const bool unit = (dg == nullptr || step[0] == 1) && (du == nullptr || step[1] == 1) &&
                          step[2] == 1 && step[3] == 1 && step[4] == 1;
        if (unit) {
          RunWithIsa([&] { body(1, 1, 1, 1, 1); });
        } else {
          body(step[0], step[1], step[2], step[3], step[4]);
        }
      });
}

}  // namespace

void SiluGateForward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  DispatchFloatDType(gate.dtype(), [&]<typename T>() {
    DispatchFloatDType(out.dtype(), [&]<typename TOut>() {
      MapBinary<T, TOut>(gate, up, out, [](float g, float u) { return SiluGateElement(g, u); });
    });
  });
}

void SiluGateBackward(const Tensor& dy, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                      const Tensor& dup) {
  const DType out = dgate.defined() ? dgate.dtype() : dup.dtype();
  DispatchFloatDType(gate.dtype(), [&]<typename T>() {
    DispatchFloatDType(out, [&]<typename TOut>() { BackwardLoop<T, TOut>(dy, gate, up, dgate, dup); });
  });
}

}  // namespace zeroshard::cpu
