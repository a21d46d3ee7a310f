// Blockwise quantization kernels (kernels/quantize.h): one thread block per
// quantization block (its |x| maximum by a block reduction, then its values),
// and a grid-stride dequantize-and-sum. The per-element math is
// kernels/math/quantize_ops.h, the very functions of the CPU loops, so both
// give the same bytes and values (nvcc --fmad=false, as every kernel here).
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/quantize_launch.h"
#include "zeroshard/kernels/math/quantize_ops.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float WarpAbsMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = QuantAbsMax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float ScaleAt(const int8_t* chunk, int64_t scale_offset, int64_t b) {
  return reinterpret_cast<const float*>(chunk + scale_offset)[b];
}

// Block (blockIdx.x) of the chunks' blocks: chunk = blockIdx.x / blocks.
template <typename T>
__global__ void QuantizeKernel(const T* __restrict__ x, int64_t m, int bits, int64_t block, int64_t blocks,
                               int64_t chunk_bytes, int64_t scale_offset, int8_t* __restrict__ packed) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x / blocks, b = blockIdx.x % blocks;
  const T* xc = x + c * m;
  int8_t* chunk = packed + c * chunk_bytes;
  const int64_t lo = b * block, hi = lo + block < m ? lo + block : m;
  float mx = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) mx = QuantAbsMax(mx, ToFloat(xc[i]));
  mx = BlockReduce(mx, scratch, 0.0f, [](float v) { return WarpAbsMax(v); });
  const int qmax = bits == 4 ? 7 : 127;
  const float s = QuantScale(mx, qmax);
  if (threadIdx.x == 0) reinterpret_cast<float*>(chunk + scale_offset)[b] = s;
  if (bits == 8) {
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      chunk[i] = static_cast<int8_t>(QuantizeValue(ToFloat(xc[i]), s, qmax));
    }
  } else {
    for (int64_t i = lo + 2 * threadIdx.x; i < hi; i += 2 * blockDim.x) {
      const int q0 = QuantizeValue(ToFloat(xc[i]), s, 7);
      const int q1 = i + 1 < hi ? QuantizeValue(ToFloat(xc[i + 1]), s, 7) : 0;
      reinterpret_cast<uint8_t*>(chunk)[i / 2] = PackNibbles(q0, q1);
    }
  }
  // The padding between the values and the scales (Note [Packed chunk layout]).
  if (b == 0) {
    const int64_t value_bytes = bits == 4 ? (m + 1) / 2 : m;
    for (int64_t i = value_bytes + threadIdx.x; i < scale_offset; i += blockDim.x) chunk[i] = 0;
  }
}

template <typename T>
__global__ void DequantizeReduceKernel(const int8_t* __restrict__ packed, int64_t groups, int64_t per_group,
                                       int64_t m, int bits, int64_t block, int64_t chunk_bytes,
                                       int64_t scale_offset, T* __restrict__ out, float divisor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t gi = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; gi < groups * m; gi += stride) {
    const int64_t g = gi / m, i = gi % m;
    const int8_t* first = packed + g * per_group * chunk_bytes;
    float acc = 0;
    for (int64_t c = 0; c < per_group; ++c) {
      const int8_t* chunk = first + c * chunk_bytes;
      const int q = bits == 8 ? chunk[i] : UnpackNibble(static_cast<uint8_t>(chunk[i / 2]), static_cast<int>(i & 1));
      const float v = DequantizeValue(q, ScaleAt(chunk, scale_offset, i / block));
      acc = c == 0 ? v : acc + v;
    }
    out[gi] = FromFloat<T>(acc / divisor);
  }
}

}  // namespace

int LaunchQuantizeChunks(int dtype, const void* x, int64_t chunks, int64_t m, int bits, int64_t block,
                         int64_t chunk_bytes, void* packed, void* stream) {
  if (chunks == 0 || m == 0) return 0;
  const int64_t blocks = (m + block - 1) / block;
  const int64_t scale_offset = ((bits == 4 ? (m + 1) / 2 : m) + 3) / 4 * 4;
  if (chunks * blocks > 0x7fffffff) return InvalidValue();
  return DispatchFloat(dtype, [&]<typename T>() {
    Launch(QuantizeKernel<T>, static_cast<int>(chunks * blocks), kThreads, 0, AsStream(stream),
           static_cast<const T*>(x), m, bits, block, blocks, chunk_bytes, scale_offset, static_cast<int8_t*>(packed));
    return Launched();
  });
}

int LaunchDequantizeReduce(const void* packed, int64_t groups, int64_t per_group, int64_t m, int bits,
                           int64_t block, int64_t chunk_bytes, int out_dtype, void* out, float divisor,
                           void* stream) {
  if (groups == 0 || m == 0) return 0;
  const int64_t scale_offset = ((bits == 4 ? (m + 1) / 2 : m) + 3) / 4 * 4;
  return DispatchFloat(out_dtype, [&]<typename T>() {
    Launch(DequantizeReduceKernel<T>, GridFor(groups * m, kThreads), kThreads, 0, AsStream(stream),
           static_cast<const int8_t*>(packed), groups, per_group, m, bits, block, chunk_bytes, scale_offset,
           static_cast<T*>(out), divisor);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
