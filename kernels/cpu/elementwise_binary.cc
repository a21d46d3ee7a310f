#include "zeroshard/kernels/cpu/elementwise.h"
#include "zeroshard/kernels/cpu/loops.h"

namespace zeroshard::cpu {

namespace {

template <typename Fn>
void DispatchBinaryOp(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::kAdd: return fn.template operator()<BinaryOp::kAdd>();
    case BinaryOp::kSub: return fn.template operator()<BinaryOp::kSub>();
    case BinaryOp::kMul: return fn.template operator()<BinaryOp::kMul>();
    case BinaryOp::kDiv: return fn.template operator()<BinaryOp::kDiv>();
    case BinaryOp::kPow: return fn.template operator()<BinaryOp::kPow>();
    case BinaryOp::kMax: return fn.template operator()<BinaryOp::kMax>();
    case BinaryOp::kMin: return fn.template operator()<BinaryOp::kMin>();
    case BinaryOp::kGeluBackward: return fn.template operator()<BinaryOp::kGeluBackward>();
    case BinaryOp::kReluBackward: return fn.template operator()<BinaryOp::kReluBackward>();
    case BinaryOp::kSiluBackward: return fn.template operator()<BinaryOp::kSiluBackward>();
  }
}

}  // namespace

void Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  DispatchBinaryOp(op, [&]<BinaryOp kOp>() {
    DispatchInOut(a.dtype(), out.dtype(), [&]<typename TIn, typename TOut>() {
      using C = ComputeType<TIn>;
      if constexpr (std::is_integral_v<C> && !BinaryOpSupportsIntegers(kOp)) {
        ZS_CHECK(false, BinaryOpName(kOp), " on integers");
      } else {
        MapBinary<TIn, TOut>(a, b, out, [](C u, C v) { return ApplyBinary<kOp, C>(u, v); });
      }
    });
  });
}

}  // namespace zeroshard::cpu
