// The rotary embedding in the op registry (kernels/op_registry.h): RopeApply
// with Llama 3-scaled tables (every regime of the scaling among the 8
// frequencies), its backward the inverse rotation, against finite differences.
#include <cmath>

#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/kernels/rope.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {
namespace {

constexpr int64_t kB = 2, kT = 5, kH = 3, kD = 16, kPositions = 7;

// theta 10^4, D 16: wavelengths 2 pi 10^(i/2) = 6.3 .. 19869; with an original
// context of 1024, i <= 3 keep their frequency (< 256), i = 4 is smoothed
// (628), i >= 5 are divided by 8 (> 1024).
RopeOptions Options() {
  return {.theta = 1e4,
          .llama3 = Llama3RopeScaling{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                      .original_max_position_embeddings = 1024}};
}

// transformers' rotate_half form in double, from the closed-form frequencies.
Values Reference(const Values& in) {
  const std::vector<double>& x = in[0];
  std::vector<double> inv(kD / 2);
  for (int64_t i = 0; i < kD / 2; ++i) {
    const double f = std::pow(1e4, -2.0 * i / kD), wavelen = 2 * M_PI / f;
    if (wavelen < 256) {
      inv[i] = f;
    } else if (wavelen > 1024) {
      inv[i] = f / 8;
    } else {
      const double smooth = (1024 / wavelen - 1) / 3;
      inv[i] = (1 - smooth) * f / 8 + smooth * f;
    }
  }
  std::vector<double> y(x.size());
  for (int64_t v = 0; v < kB * kT * kH; ++v) {
    const int64_t t = (v / kH) % kT;
    for (int64_t i = 0; i < kD / 2; ++i) {
      const double c = std::cos(t * inv[i]), s = std::sin(t * inv[i]);
      const double lo = x[v * kD + i], hi = x[v * kD + i + kD / 2];
      y[v * kD + i] = lo * c - hi * s;
      y[v * kD + i + kD / 2] = hi * c + lo * s;
    }
  }
  return {y};
}

absl::StatusOr<RopeTables> Tables(const Tensor& like) {
  return MakeRopeTables(Options(), kPositions, kD, like.allocator());
}

const bool kRegistered = RegisterOps({OpDescriptor{
    .name = "rope",
    .family = "rope",
    .backends = {.cuda = true},
    .dtypes = {DType::kF32, DType::kBF16, DType::kF16},
    .inputs = {{.name = "x", .shape = {kB, kT, kH, kD}, .lo = -2, .hi = 2}},
    .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(RopeTables tables, Tables(in[0]));
      ZS_ASSIGN_OR_RETURN(Tensor out, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(RopeApply(in[0], tables, out));
      return Tensors{out};
    },
    .reference = Reference,
    // tests/kernels/rope_test.cc: cos and sin rounded to f32 (2^-24 each), two
    // products and a difference in fp32: within 4 2^-24 (|lo| + |hi|) <= 1e-6
    // for |x| <= 2, absolute (the two terms may cancel).
    .forward_bound = [](DType, int) { return Bound{1e-6, 1e-6, "f32 tables, two fp32 products and a sum"}; },
    .backward = [](const Tensors& in, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
      ZS_ASSIGN_OR_RETURN(RopeTables tables, Tables(in[0]));
      ZS_ASSIGN_OR_RETURN(Tensor dx, EmptyOn(in[0], in[0].shape(), in[0].dtype()));
      ZS_RETURN_IF_ERROR(RopeApply(dout[0], tables, dx, /*inverse=*/true));
      return Tensors{dx};
    },
    // The transpose of the rotation is the inverse rotation: the same
    // arithmetic on |dy| <= 1, so half the forward's bound would do.
    .backward_bound = [](DType, int) { return Bound{1e-6, 1e-6, "the inverse rotation, as the forward"}; },
}});

}  // namespace
}  // namespace zeroshard::ops
