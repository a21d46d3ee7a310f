#include "zeroshard/autograd/nn/init.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard::nn {

namespace {

uint64_t SplitMix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::string InitSpec::ToString() const {
  switch (kind) {
    case Kind::kZeros: return "zeros";
    case Kind::kOnes: return "ones";
    case Kind::kConstant: return absl::StrFormat("constant(%g)", a);
    case Kind::kNormal: return absl::StrFormat("normal(%g, %g)", a, b);
    case Kind::kUniform: return absl::StrFormat("uniform(%g, %g)", a, b);
  }
  return "?";
}

uint64_t NameHash(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

double InitUniform(uint64_t seed, uint64_t key, uint64_t counter) {
  const uint64_t bits = SplitMix(SplitMix(seed ^ SplitMix(key)) ^ counter);
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

absl::Status FillInit(const InitSpec& spec, uint64_t seed, absl::string_view name, int64_t offset,
                      const Tensor& out) {
  if (!out.defined()) return absl::InvalidArgumentError("FillInit: undefined output");
  switch (spec.kind) {
    case InitSpec::Kind::kZeros: return out.Fill(0.0);
    case InitSpec::Kind::kOnes: return out.Fill(1.0);
    case InitSpec::Kind::kConstant: return out.Fill(spec.a);
    default: break;
  }
  const int64_t n = out.numel();
  if (out.device().is_virtual()) {  // the values would be drawn on the host and sent over
    return ChargeVirtualCopy(out.device(), VirtualDevice::kCompute, n * static_cast<int64_t>(out.itemsize()),
                             /*async=*/false);
  }
  const uint64_t key = NameHash(name);
  std::vector<float> values(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t e = static_cast<uint64_t>(offset + i);
    const double u1 = InitUniform(seed, key, 2 * e);
    double v;
    if (spec.kind == InitSpec::Kind::kUniform) {
      v = spec.a + (static_cast<double>(spec.b) - spec.a) * u1;
    } else {
      const double u2 = InitUniform(seed, key, 2 * e + 1);
      const double r = std::sqrt(-2.0 * std::log(1.0 - u1));  // 1 - u1 in (0, 1]
      v = spec.a + spec.b * r * std::cos(2.0 * M_PI * u2);
    }
    values[i] = static_cast<float>(v);
  }
  const Tensor src = Tensor::Wrap(values.data(), out.shape(), DType::kF32);
  return out.CopyFrom(src);
}

}  // namespace zeroshard::nn
