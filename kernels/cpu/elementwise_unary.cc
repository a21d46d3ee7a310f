#include <cmath>

#include "zeroshard/kernels/cpu/elementwise.h"
#include "zeroshard/kernels/cpu/loops.h"

namespace zeroshard::cpu {

namespace {

template <typename Fn>
void DispatchUnaryOp(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::kNeg: return fn.template operator()<UnaryOp::kNeg>();
    case UnaryOp::kExp: return fn.template operator()<UnaryOp::kExp>();
    case UnaryOp::kLog: return fn.template operator()<UnaryOp::kLog>();
    case UnaryOp::kTanh: return fn.template operator()<UnaryOp::kTanh>();
    case UnaryOp::kSqrt: return fn.template operator()<UnaryOp::kSqrt>();
    case UnaryOp::kRsqrt: return fn.template operator()<UnaryOp::kRsqrt>();
    case UnaryOp::kRelu: return fn.template operator()<UnaryOp::kRelu>();
    case UnaryOp::kGelu: return fn.template operator()<UnaryOp::kGelu>();
    case UnaryOp::kSigmoid: return fn.template operator()<UnaryOp::kSigmoid>();
    case UnaryOp::kAbs: return fn.template operator()<UnaryOp::kAbs>();
    case UnaryOp::kSquare: return fn.template operator()<UnaryOp::kSquare>();
    case UnaryOp::kSilu: return fn.template operator()<UnaryOp::kSilu>();
  }
}

}  // namespace

void Unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  DispatchUnaryOp(op, [&]<UnaryOp kOp>() {
    DispatchInOut(x.dtype(), out.dtype(), [&]<typename TIn, typename TOut>() {
      using C = ComputeType<TIn>;
      if constexpr (std::is_integral_v<C> && !UnaryOpSupportsIntegers(kOp)) {
        ZS_CHECK(false, UnaryOpName(kOp), " on integers");
      } else {
        MapUnary<TIn, TOut>(x, out, [](C v) { return ApplyUnary<kOp, C>(v); });
      }
    });
  });
}

void Affine(const Tensor& x, float alpha, float beta, const Tensor& out) {
  DispatchInOut(x.dtype(), out.dtype(), [&]<typename TIn, typename TOut>() {
    if constexpr (std::is_integral_v<TIn>) {
      ZS_CHECK(false, "Affine on integers");
    } else {
      MapUnary<TIn, TOut>(x, out, [alpha, beta](float v) { return alpha * v + beta; });
    }
  });
}

void PowScalar(const Tensor& x, float exponent, const Tensor& out) {
  DispatchInOut(x.dtype(), out.dtype(), [&]<typename TIn, typename TOut>() {
    if constexpr (std::is_integral_v<TIn>) {
      ZS_CHECK(false, "PowScalar on integers");
    } else if (exponent == 2.0f) {
      MapUnary<TIn, TOut>(x, out, [](float v) { return v * v; });
    } else if (exponent == 1.0f) {
      MapUnary<TIn, TOut>(x, out, [](float v) { return v; });
    } else if (exponent == 0.5f) {
      MapUnary<TIn, TOut>(x, out, [](float v) { return sqrtf(v); });
    } else if (exponent == -1.0f) {
      MapUnary<TIn, TOut>(x, out, [](float v) { return 1.0f / v; });
    } else {
      MapUnary<TIn, TOut>(x, out, [exponent](float v) { return powf(v, exponent); });
    }
  });
}

}  // namespace zeroshard::cpu
