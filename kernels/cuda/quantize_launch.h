// Host launchers of the blockwise quantization kernels (kernels/cuda/quantize.cu),
// the CUDA twins of kernels/quantize.cc's CPU loops; both call the per-element
// functions of kernels/math/quantize_ops.h. Callable from plain C++.
//
//   // x: chunks * m elements of dtype code `dtype` (f32/bf16/f16) -> packed bytes
//   LaunchQuantizeChunks(dtype, x, chunks, m, bits, block, chunk_bytes, packed, stream);
//   LaunchDequantizeReduce(packed, groups, per_group, m, bits, block, chunk_bytes,
//                          out_dtype, out, divisor, stream);
//
// Layout: Note [Packed chunk layout] in kernels/quantize.h (`chunk_bytes` is
// PackedBytes(m), the values' bytes rounded up to 4, then the scales).
// Enqueued on `stream`; returns a cudaError_t as int (0 = success).
#ifndef ZEROSHARD_KERNELS_CUDA_QUANTIZE_LAUNCH_H_
#define ZEROSHARD_KERNELS_CUDA_QUANTIZE_LAUNCH_H_

#include <cstdint>

namespace zeroshard::cuda {

int LaunchQuantizeChunks(int dtype, const void* x, int64_t chunks, int64_t m, int bits, int64_t block,
                         int64_t chunk_bytes, void* packed, void* stream);

int LaunchDequantizeReduce(const void* packed, int64_t groups, int64_t per_group, int64_t m, int bits,
                           int64_t block, int64_t chunk_bytes, int out_dtype, void* out, float divisor,
                           void* stream);

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_QUANTIZE_LAUNCH_H_
