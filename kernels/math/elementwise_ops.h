// The per-element functions of the elementwise kernels, shared by the CPU loops
// and the CUDA kernels. `C` is the compute type: float for f32/bf16/f16 data
// (16-bit values are widened on load and rounded once on store), the integer
// type itself for i32/i64.
//
//   float y = ApplyUnary<UnaryOp::kGelu>(x);
//   float d = ApplyBinary<BinaryOp::kGeluBackward>(x, dy);   // dy * gelu'(x)
#ifndef ZEROSHARD_KERNELS_MATH_ELEMENTWISE_OPS_H_
#define ZEROSHARD_KERNELS_MATH_ELEMENTWISE_OPS_H_

#include <cmath>
#include <type_traits>

#include "zeroshard/kernels/math/fast_math.h"
#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

enum class UnaryOp {
  kNeg,
  kExp,
  kLog,
  kTanh,
  kSqrt,
  kRsqrt,
  kRelu,
  kGelu,  // tanh approximation
  kSigmoid,
  kAbs,
  kSquare,
  kSilu,  // x sigmoid(x), Llama's activation
};

enum class BinaryOp {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,           // a ** b (float only)
  kMax,
  kMin,
  kGeluBackward,  // a = x, b = dy: dy * gelu'(x)
  kReluBackward,  // a = x, b = dy: dy * (x > 0)
  kSiluBackward,  // a = x, b = dy: dy * silu'(x)
};

// True for the ops that also accept integer tensors (computed in that type).
constexpr bool UnaryOpSupportsIntegers(UnaryOp op) {
  return op == UnaryOp::kNeg || op == UnaryOp::kRelu || op == UnaryOp::kAbs ||
         op == UnaryOp::kSquare;
}
constexpr bool BinaryOpSupportsIntegers(BinaryOp op) {
  return op == BinaryOp::kAdd || op == BinaryOp::kSub || op == BinaryOp::kMul ||
         op == BinaryOp::kMax || op == BinaryOp::kMin;
}

const char* UnaryOpName(UnaryOp op);
const char* BinaryOpName(BinaryOp op);

template <UnaryOp op, typename C>
ZS_HOST_DEVICE inline C ApplyUnary(C x) {
  if constexpr (op == UnaryOp::kNeg) return -x;
  if constexpr (op == UnaryOp::kRelu) return x > C(0) ? x : C(0);
  if constexpr (op == UnaryOp::kAbs) return x < C(0) ? -x : x;
  if constexpr (op == UnaryOp::kSquare) return x * x;
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (op == UnaryOp::kExp) return ExpF(x);
    if constexpr (op == UnaryOp::kLog) return LogF(x);
    if constexpr (op == UnaryOp::kTanh) return TanhF(x);
    if constexpr (op == UnaryOp::kSqrt) return sqrtf(x);
    if constexpr (op == UnaryOp::kRsqrt) return 1.0f / sqrtf(x);
    if constexpr (op == UnaryOp::kGelu) return GeluTanh(x);
    if constexpr (op == UnaryOp::kSigmoid) return SigmoidF(x);
    if constexpr (op == UnaryOp::kSilu) return SiluF(x);
  }
  return x;
}

template <BinaryOp op, typename C>
ZS_HOST_DEVICE inline C ApplyBinary(C a, C b) {
  if constexpr (op == BinaryOp::kAdd) return a + b;
  if constexpr (op == BinaryOp::kSub) return a - b;
  if constexpr (op == BinaryOp::kMul) return a * b;
  if constexpr (op == BinaryOp::kMax) return a > b ? a : b;
  if constexpr (op == BinaryOp::kMin) return a < b ? a : b;
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (op == BinaryOp::kDiv) return a / b;
    if constexpr (op == BinaryOp::kPow) return powf(a, b);
    if constexpr (op == BinaryOp::kGeluBackward) return b * GeluTanhGrad(a);
    if constexpr (op == BinaryOp::kReluBackward) return a > 0.0f ? b : 0.0f;
    if constexpr (op == BinaryOp::kSiluBackward) return b * SiluGradF(a);
  }
  return a;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_ELEMENTWISE_OPS_H_
