// Max, average and adaptive average pooling in the op registry
// (kernels/op_registry.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/pool2d.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

// [N, C, H, W] = [2, 3, 6, 5]: 180 values, distinct multiples of 1/32 for
// max pooling (exact in bf16), so no window holds a tie.
constexpr int64_t kN = 2, kC = 3, kH = 6, kW = 5;
const Shape kX = {kN, kC, kH, kW};
// 3x3 windows, stride 2, padding 1: overlapping windows, padded edges.
const Pool2dOptions kWindows{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
constexpr int64_t kOH = (kH + 2 - 3) / 2 + 1, kOW = (kW + 2 - 3) / 2 + 1;
// Adaptive: 6x5 into 4x3, windows [floor(i H / OH), ceil((i + 1) H / OH)).
constexpr int64_t kAH = 4, kAW = 3;

// The pooled value of each output: max, or mean over the window (padding
// counted, count_include_pad), or the adaptive window's mean.
Values Reference(const Values& in, const std::string& kind) {
  const std::vector<double>& x = in[0];
  const bool adaptive = kind == "adaptive";
  const int64_t oh = adaptive ? kAH : kOH, ow = adaptive ? kAW : kOW;
  std::vector<double> y(kN * kC * oh * ow);
  for (int64_t p = 0; p < kN * kC; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t h0 = 2 * i - 1, h1 = h0 + 3, w0 = 2 * j - 1, w1 = w0 + 3;
        if (adaptive) {
          h0 = i * kH / kAH, h1 = ((i + 1) * kH + kAH - 1) / kAH;
          w0 = j * kW / kAW, w1 = ((j + 1) * kW + kAW - 1) / kAW;
        }
        double m = -INFINITY, s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            if (h < 0 || h >= kH || w < 0 || w >= kW) continue;
            m = std::max(m, x[(p * kH + h) * kW + w]);
            s += x[(p * kH + h) * kW + w];
          }
        y[(p * oh + i) * ow + j] = kind == "max" ? m : s / static_cast<double>((h1 - h0) * (w1 - w0));
      }
  return {y};
}

OpDescriptor Describe(const std::string& kind) {
  const bool max = kind == "max";
  return OpDescriptor{
      .name = kind + "_pool2d",
      .family = "pool2d",
      .backends = {.cuda = true},
      .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
      .inputs = {{.name = "x", .shape = kX, .lo = -2, .hi = 2, .distinct = max}},
      .forward = [kind](const Tensors& in) -> absl::StatusOr<Tensors> {
        const Shape ys = kind == "adaptive" ? Shape{kN, kC, kAH, kAW} : Shape{kN, kC, kOH, kOW};
        ZS_ASSIGN_OR_RETURN(Tensor y, EmptyOn(in[0], ys, in[0].dtype()));
        if (kind == "max") {
          ZS_ASSIGN_OR_RETURN(Tensor idx, EmptyOn(in[0], ys, DType::kI64));
          ZS_RETURN_IF_ERROR(MaxPool2dForward(in[0], kWindows, y, idx));
          return Tensors{y, idx};
        }
        ZS_RETURN_IF_ERROR(kind == "avg" ? AvgPool2dForward(in[0], kWindows, y)
                                         : AdaptiveAvgPool2dForward(in[0], y));
        return Tensors{y};
      },
      .reference = [kind](const Values& in) {
        Values r = Reference(in, kind);
        if (kind == "max") {
          // The saved indices: the argmax's h W + w within the plane.
          std::vector<double> idx(r[0].size());
          for (int64_t p = 0; p < kN * kC; ++p)
            for (int64_t o = 0; o < kOH * kOW; ++o)
              for (int64_t k = 0; k < kH * kW; ++k)
                if (in[0][p * kH * kW + k] == r[0][p * kOH * kOW + o]) idx[p * kOH * kOW + o] = k;
          r.push_back(idx);
        }
        return r;
      },
      // tests/kernels/pool2d_test.cc: a maximum is exact; a mean of at most 9
      // values is an fp32 sum and one division.
      .forward_bound = [max](DType, int) {
        return max ? Bound{0, 0, "a maximum and its index: exact"} : Bound{1e-6, 1e-6, "fp32 mean of <= 9 values"};
      },
      .graded_outputs = 1,  // max pooling's indices are saved for the backward
      .backward = [kind](const Tensors& in, const Tensors& out, const Tensors& dout) -> absl::StatusOr<Tensors> {
        ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
        ZS_RETURN_IF_ERROR(kind == "max"   ? MaxPool2dBackward(dout[0], out[1], kWindows, dx)
                           : kind == "avg" ? AvgPool2dBackward(dout[0], kWindows, dx)
                                           : AdaptiveAvgPool2dBackward(dout[0], dx));
        return Tensors{dx};
      },
      // The same test: fp32 sums of at most 4 (overlapping windows) scaled dy.
      .backward_bound = [](DType, int) { return Bound{1e-6, 1e-6, "fp32 sums of <= 4 window shares"}; },
  };
}

const bool kRegistered = RegisterOps({Describe("max"), Describe("avg"), Describe("adaptive")});

}  // namespace
}  // namespace zeroshard::ops
