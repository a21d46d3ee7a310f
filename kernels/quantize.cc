#include "zeroshard/kernels/quantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/quantize_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/math/quantize_ops.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::Status QuantSpec::Validate() const {
  if (bits != 8 && bits != 4) {
    return absl::InvalidArgumentError(absl::StrCat("quantization bits ", bits, ": expected 8 or 4"));
  }
  if (block < 1) {
    return absl::InvalidArgumentError(absl::StrCat("quantization block ", block, ": expected >= 1 elements"));
  }
  if (bits == 4 && block % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantization block ", block, " with 4 bits: expected an even number of elements (two values per byte)"));
  }
  return absl::OkStatus();
}

std::string QuantSpec::ToString() const { return absl::StrCat("int", bits, " blocks of ", block); }

namespace {

int64_t ValueBytes(int64_t m, const QuantSpec& spec) { return spec.bits == 4 ? (m + 1) / 2 : m; }
int64_t ScaleOffset(int64_t m, const QuantSpec& spec) { return (ValueBytes(m, spec) + 3) / 4 * 4; }
int64_t NumBlocks(int64_t m, const QuantSpec& spec) { return (m + spec.block - 1) / spec.block; }

absl::Status CheckFloat(absl::string_view op, absl::string_view what, const Tensor& t) {
  if (!t.defined() || !IsFloatingPoint(t.dtype()) || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be a contiguous f32/bf16/f16 tensor, found ",
                                                   t.defined() ? t.DebugString() : "undefined"));
  }
  return absl::OkStatus();
}

// The chunk length m of `numel` elements in `chunks` chunks, and the packed
// tensor's check against it.
absl::StatusOr<int64_t> CheckChunks(absl::string_view op, int64_t numel, int64_t chunks, const QuantSpec& spec,
                                    const Tensor& packed, int64_t packed_chunks, const Tensor& other) {
  ZS_RETURN_IF_ERROR(spec.Validate());
  if (chunks < 1 || numel % chunks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", numel, " elements do not split into ", chunks, " equal chunks"));
  }
  const int64_t m = numel / chunks;
  if (!packed.defined() || packed.dtype() != DType::kI8 || !packed.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": packed must be a contiguous i8 tensor, found ",
                                                   packed.defined() ? packed.DebugString() : "undefined"));
  }
  if (packed.numel() != packed_chunks * PackedBytes(m, spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": packed holds ", packed.numel(), " bytes, expected ", packed_chunks, " chunks of ", PackedBytes(m, spec),
        " (", m, " elements as ", spec.ToString(), ", Note [Packed chunk layout])"));
  }
  if (packed.device() != other.device()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": packed is on ", packed.device().ToString(), " and ",
                                                   other.DebugString(), " on ", other.device().ToString(),
                                                   "; expected one device"));
  }
  if (packed.numel() > 0 && MemoryOverlaps(packed, other)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": packed shares memory with ", other.DebugString()));
  }
  return m;
}

// One block of a chunk: elements [lo, hi) of x -> values and its scale.
template <typename T>
void QuantizeBlock(const T* x, int64_t lo, int64_t hi, int64_t b, const QuantSpec& spec, int8_t* values,
                   float* scales) {
  float m = 0;
  for (int64_t i = lo; i < hi; ++i) m = QuantAbsMax(m, ConvertElement<float>(x[i]));
  const float s = QuantScale(m, spec.qmax());
  scales[b] = s;
  if (spec.bits == 8) {
    for (int64_t i = lo; i < hi; ++i) {
      values[i] = static_cast<int8_t>(QuantizeValue(ConvertElement<float>(x[i]), s, spec.qmax()));
    }
    return;
  }
  // 4 bits (an even block size, so a block starts on a byte): elements
  // 2k and 2k + 1 share byte k; a chunk of odd length leaves the last high nibble 0.
  uint8_t* bytes = reinterpret_cast<uint8_t*>(values);
  for (int64_t i = lo; i < hi; i += 2) {
    const int q0 = QuantizeValue(ConvertElement<float>(x[i]), s, 7);
    const int q1 = i + 1 < hi ? QuantizeValue(ConvertElement<float>(x[i + 1]), s, 7) : 0;
    bytes[i / 2] = PackNibbles(q0, q1);
  }
}

// Element i of a packed chunk.
inline float ChunkValue(const int8_t* chunk, int64_t i, int64_t scale_offset, const QuantSpec& spec) {
  float s;
  std::memcpy(&s, chunk + scale_offset + 4 * (i / spec.block), sizeof(float));
  const int q = spec.bits == 8 ? chunk[i] : UnpackNibble(static_cast<uint8_t>(chunk[i / 2]), static_cast<int>(i & 1));
  return DequantizeValue(q, s);
}

}  // namespace

int64_t PackedBytes(int64_t m, const QuantSpec& spec) { return ScaleOffset(m, spec) + 4 * NumBlocks(m, spec); }

absl::Status QuantizeChunks(const Tensor& x, int64_t chunks, const QuantSpec& spec, const Tensor& packed) {
  constexpr absl::string_view kOp = "QuantizeChunks";
  ZS_RETURN_IF_ERROR(CheckFloat(kOp, "x", x));
  ZS_ASSIGN_OR_RETURN(const int64_t m, CheckChunks(kOp, x.numel(), chunks, spec, packed, chunks, x));
  const int64_t chunk_bytes = PackedBytes(m, spec);
  const int64_t blocks = NumBlocks(m, spec);
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(kOp, {&packed}, {&x}, 3);  // |x|, max, divide
    case DeviceType::kCpu: {
      if (m == 0) return absl::OkStatus();
      std::memset(packed.raw_data(), 0, static_cast<size_t>(packed.nbytes()));  // the padding too
      return DispatchFloatDType(x.dtype(), [&]<typename T>() {
        const T* xs = x.data<T>();
        int8_t* out = packed.data<int8_t>();
        const int64_t total = chunks * blocks;
#pragma omp parallel for schedule(static) if (x.numel() >= (int64_t{1} << 16))
        for (int64_t cb = 0; cb < total; ++cb) {
          const int64_t c = cb / blocks, b = cb % blocks;
          int8_t* chunk = out + c * chunk_bytes;
          float* scales = reinterpret_cast<float*>(chunk + ScaleOffset(m, spec));
          const int64_t lo = b * spec.block, hi = std::min(m, lo + spec.block);
          QuantizeBlock(xs + c * m, lo, hi, b, spec, chunk, scales);
        }
        return absl::OkStatus();
      });
    }
    case DeviceType::kCuda:
      ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &packed}, kOp));
      return cuda::CudaLaunchStatus(
          cuda::LaunchQuantizeChunks(static_cast<int>(x.dtype()), x.raw_data(), chunks, m, spec.bits, spec.block,
                                     chunk_bytes, packed.raw_data(), cuda::kOpStream),
          cuda::LaunchWhat(kOp, x));
  }
  return NoDeviceKernel(kOp, x.device());
}

absl::Status DequantizeReduce(const Tensor& packed, int64_t groups, int64_t per_group, const QuantSpec& spec,
                              const Tensor& out, float divisor) {
  constexpr absl::string_view kOp = "DequantizeReduce";
  ZS_RETURN_IF_ERROR(CheckFloat(kOp, "out", out));
  if (per_group < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": per_group ", per_group, ", expected >= 1 chunks"));
  }
  if (!(divisor > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": divisor ", divisor, ", expected > 0"));
  }
  ZS_ASSIGN_OR_RETURN(const int64_t m, CheckChunks(kOp, out.numel(), groups, spec, packed, groups * per_group, out));
  const int64_t chunk_bytes = PackedBytes(m, spec);
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(kOp, {&out}, {&packed}, 2.0 * static_cast<double>(per_group));
    case DeviceType::kCpu: {
      if (m == 0) return absl::OkStatus();
      return DispatchFloatDType(out.dtype(), [&]<typename T>() {
        const int8_t* in = packed.data<int8_t>();
        T* o = out.data<T>();
        const int64_t scale_offset = ScaleOffset(m, spec);
        const int64_t total = groups * m;
#pragma omp parallel for schedule(static) if (total * per_group >= (int64_t{1} << 16))
        for (int64_t gi = 0; gi < total; ++gi) {
          const int64_t g = gi / m, i = gi % m;
          const int8_t* first = in + g * per_group * chunk_bytes;
          float acc = ChunkValue(first, i, scale_offset, spec);
          for (int64_t c = 1; c < per_group; ++c) acc += ChunkValue(first + c * chunk_bytes, i, scale_offset, spec);
          o[gi] = ConvertElement<T>(acc / divisor);
        }
        return absl::OkStatus();
      });
    }
    case DeviceType::kCuda:
      ZS_RETURN_IF_ERROR(CheckSameDevice({&packed, &out}, kOp));
      return cuda::CudaLaunchStatus(
          cuda::LaunchDequantizeReduce(packed.raw_data(), groups, per_group, m, spec.bits, spec.block, chunk_bytes,
                                       static_cast<int>(out.dtype()), out.raw_data(), divisor, cuda::kOpStream),
          cuda::LaunchWhat(kOp, out));
  }
  return NoDeviceKernel(kOp, out.device());
}

}  // namespace zeroshard
