// Blockwise symmetric quantization of float tensors into int8 or int4, the
// wire format of ZeRO++'s quantized communication (qwZ: weights all-gathered
// as int8; qgZ: gradients exchanged as int8/int4 by all-to-all; the hooks are
// in sharding/comm_hook.h).
//
//   QuantSpec spec{.bits = 8, .block = 256};
//   // x: [chunks * m] f32/bf16/f16 -> packed: [chunks * PackedBytes(m, spec)] i8
//   ZS_ASSIGN_OR_RETURN(Tensor packed, Tensor::Empty({chunks * PackedBytes(m, spec)}, DType::kI8, alloc));
//   ZS_RETURN_IF_ERROR(QuantizeChunks(x, chunks, spec, packed));
//   ... all-gather or all-to-all `packed` ...
//   // out[g * m + i] = (sum over c < k of chunk (g * k + c), dequantized) / divisor
//   ZS_RETURN_IF_ERROR(DequantizeReduce(packed, /*groups=*/chunks, /*per_group=*/1, spec, out, 1.0f));
//
// Note [Packed chunk layout]
//   A chunk of m elements packs into PackedBytes(m) bytes: the quantized
//   values (m bytes for 8 bits; ceil(m / 2) for 4 bits, element 2k in the low
//   nibble of byte k: PackNibbles in math/quantize_ops.h), zero-padded to a
//   multiple of 4 bytes, then one f32 scale per block of `block` elements
//   (ceil(m / block) of them; the last block may be short). Blocks start at
//   the chunk's first element, so chunks are independent: a chunk is what
//   one rank sends to another, and a receiver needs nothing else to read it.
//   Chunk c of a packed buffer starts at byte c * PackedBytes(m).
//
// Numerics: quantization as math/quantize_ops.h says (its error bound is
// Note [Quantization error]); DequantizeReduce sums the k dequantized values
// of each element in f32, in chunk order, then divides by `divisor` (a true
// division, as Note [Reduction numerics] in collectives/reduction.h), and
// rounds once into out's dtype. The CPU loops and the CUDA kernels share the
// per-element functions, so both give the same bytes and values.
#ifndef ZEROSHARD_KERNELS_QUANTIZE_H_
#define ZEROSHARD_KERNELS_QUANTIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct QuantSpec {
  int bits = 8;         // 8 (int8, values in [-127, 127]) or 4 (two per byte, [-7, 7])
  int64_t block = 256;  // elements per scale (>= 1; even for 4 bits, so a block starts on a byte)

  int qmax() const { return bits == 4 ? 7 : 127; }
  // InvalidArgument naming the field unless bits is 8 or 4 and block >= 1.
  absl::Status Validate() const;
  // "int8 blocks of 256".
  std::string ToString() const;
};

// Bytes of one packed chunk of m elements (Note [Packed chunk layout]).
int64_t PackedBytes(int64_t m, const QuantSpec& spec);

// x: contiguous, f32/bf16/f16, numel = chunks * m; packed: contiguous i8 on
// x's device, numel = chunks * PackedBytes(m). Each chunk is quantized on its own.
absl::Status QuantizeChunks(const Tensor& x, int64_t chunks, const QuantSpec& spec, const Tensor& packed);

// packed: i8, groups * per_group chunks of m elements; out: contiguous
// f32/bf16/f16 on packed's device, numel = groups * m. out[g * m + i] =
// (sum over c in [0, per_group) of chunk g * per_group + c's element i) / divisor.
absl::Status DequantizeReduce(const Tensor& packed, int64_t groups, int64_t per_group, const QuantSpec& spec,
                              const Tensor& out, float divisor);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_QUANTIZE_H_
