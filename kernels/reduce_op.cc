// The reductions in the op registry (kernels/op_registry.h): Sum, Mean, Max
// and ArgMax along an axis.
#include <string>

#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

// Along dimension 1 of [kOuter, kLen, kInner]: strided reads on every backend.
constexpr int64_t kOuter = 5, kLen = 33, kInner = 3;

// out[o, i] = fold over r of x[o, r, i]; ArgMax keeps the first largest, as torch.
Values Reference(const Values& in, const std::string& kind) {
  const std::vector<double>& x = in[0];
  std::vector<double> y(kOuter * kInner);
  for (int64_t o = 0; o < kOuter; ++o) {
    for (int64_t i = 0; i < kInner; ++i) {
      double acc = kind == "max" || kind == "argmax" ? x[o * kLen * kInner + i] : 0;
      int64_t arg = 0;
      for (int64_t r = 0; r < kLen; ++r) {
        const double v = x[(o * kLen + r) * kInner + i];
        if (kind == "sum" || kind == "mean") {
          acc += v;
        } else if (v > acc) {
          acc = v;
          arg = r;
        }
      }
      y[o * kInner + i] = kind == "mean" ? acc / kLen : kind == "argmax" ? arg : acc;
    }
  }
  return {y};
}

OpDescriptor Describe(const std::string& kind) {
  const bool sum = kind == "sum" || kind == "mean";
  return OpDescriptor{
      .name = kind,
      .family = "reduce",
      .backends = {.cuda = true},
      .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
      // Integer sums and maxima run on the CPU; the CUDA kernel reduces floats.
      .cpu_only_dtypes = kind == "mean" ? std::vector<DType>{} : std::vector<DType>{DType::kI32, DType::kI64},
      .inputs = {{.name = "x", .shape = {kOuter, kLen, kInner}, .lo = -1, .hi = 1}},
      .forward = [kind](const Tensors& in) -> absl::StatusOr<Tensors> {
        if (kind == "argmax") {
          ZS_ASSIGN_OR_RETURN(Tensor y, ArgMax(in[0], 1));
          return Tensors{y};
        }
        const ReduceKind k = kind == "sum" ? ReduceKind::kSum : kind == "mean" ? ReduceKind::kMean : ReduceKind::kMax;
        ZS_ASSIGN_OR_RETURN(Tensor y, Reduce(k, in[0], 1));
        return Tensors{y};
      },
      .reference = [kind](const Values& in) { return Reference(in, kind); },
      .forward_bound = [sum](DType, int) {
        // tests/kernels/reduce_test.cc: an fp32 sum of 33 values in [-1, 1)
        // is within 33 * 2^-24 * 33 < 1e-4 of the exact sum, far less in
        // practice (pairwise order); 1e-5 as that test.
        return sum ? Bound{1e-5, 1e-5, "an fp32 sum of 33 values in [-1, 1)"}
                   : Bound{0, 0, "a maximum (or its index) is exact"};
      },
      .no_backward = kind == "argmax" ? "an index: not differentiable"
                                      : "autograd broadcasts dy (scaled, or at the argmax) with elementwise ops",
  };
}

const bool kRegistered =
    RegisterOps({Describe("sum"), Describe("mean"), Describe("max"), Describe("argmax")});

}  // namespace
}  // namespace zeroshard::ops
