// Blockwise quantization in the op registry (kernels/op_registry.h): quantize
// into the packed layout and dequantize (summing chunk groups), on every
// backend, against a reference that follows the same float steps from the
// stored inputs. The error against the unquantized values (Note
// [Quantization error]) is tested in tests/kernels/quantize_test.cc.
#include <cmath>
#include <vector>

#include "zeroshard/kernels/math/quantize_ops.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/quantize.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

// x [kChunks, kM] as kChunks chunks; blocks of kBlock (the last one short).
constexpr int64_t kChunks = 4, kM = 70, kBlock = 32;

// Chunk c of x, quantized and dequantized as float arithmetic does it.
std::vector<float> RoundTrip(const std::vector<double>& x, int64_t c, int bits) {
  const int qmax = bits == 4 ? 7 : 127;
  std::vector<float> out(kM);
  for (int64_t lo = 0; lo < kM; lo += kBlock) {
    const int64_t hi = std::min(kM, lo + kBlock);
    float m = 0;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(static_cast<float>(x[c * kM + i])));
    const float s = m / static_cast<float>(qmax);
    for (int64_t i = lo; i < hi; ++i) {
      const float q = s > 0 ? std::rint(static_cast<float>(x[c * kM + i]) / s) : 0.0f;
      out[i] = q * s;
    }
  }
  return out;
}

// Groups of `per_group` consecutive chunks summed in f32 in chunk order, divided by `divisor`.
Values Reference(const Values& in, int bits, int64_t per_group, float divisor) {
  std::vector<double> out;
  for (int64_t g = 0; g < kChunks / per_group; ++g) {
    std::vector<float> acc = RoundTrip(in[0], g * per_group, bits);
    for (int64_t c = 1; c < per_group; ++c) {
      const std::vector<float> v = RoundTrip(in[0], g * per_group + c, bits);
      for (int64_t i = 0; i < kM; ++i) acc[i] += v[i];
    }
    for (float a : acc) out.push_back(a / divisor);
  }
  return {out};
}

OpDescriptor Case(const char* name, int bits, int64_t per_group, float divisor) {
  return OpDescriptor{
      .name = name,
      .family = "quantize",
      .backends = {.cuda = true},
      .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
      .inputs = {{.name = "x", .shape = {kChunks, kM}, .lo = -3, .hi = 3}},
      .forward = [=](const Tensors& in) -> absl::StatusOr<Tensors> {
        const QuantSpec spec{.bits = bits, .block = kBlock};
        ZS_ASSIGN_OR_RETURN(Tensor packed, EmptyOn(in[0], {kChunks * PackedBytes(kM, spec)}, DType::kI8));
        ZS_RETURN_IF_ERROR(QuantizeChunks(in[0], kChunks, spec, packed));
        ZS_ASSIGN_OR_RETURN(Tensor out, EmptyOn(in[0], {kChunks / per_group * kM}, in[0].dtype()));
        ZS_RETURN_IF_ERROR(DequantizeReduce(packed, kChunks / per_group, per_group, spec, out, divisor));
        return Tensors{out};
      },
      .reference = [=](const Values& in) { return Reference(in, bits, per_group, divisor); },
      .forward_bound = [](DType, int) {
        return Bound{0, 0,
                     "the reference takes the kernel's float steps (max |x|, m / qmax, rint(x / s), q s, an f32 sum "
                     "in chunk order, one division): equal, up to the harness's rounding into the dtype"};
      },
      .no_backward = "communication encoding (ZeRO++ qwZ/qgZ), never differentiated",
  };
}

const bool kRegistered = RegisterOps({
    Case("quantize/int8", 8, 1, 1.0f),
    Case("quantize/int4", 4, 1, 1.0f),
    Case("quantize/int8_sum_avg", 8, 2, 2.0f),
    Case("quantize/int4_sum_avg", 4, 4, 4.0f),
});

}  // namespace
}  // namespace zeroshard::ops
