// CPU implementation behind kernels/dropout.h. Tensors are contiguous and
// validated by the op entry (same shape, same float dtype; out may be x).
#ifndef ZEROSHARD_KERNELS_CPU_DROPOUT_H_
#define ZEROSHARD_KERNELS_CPU_DROPOUT_H_

#include <cstdint>

#include "zeroshard/kernels/math/dropout_math.h"
#include "zeroshard/kernels/math/philox.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

// words[j] = word(first + j) of the seed's stream for j in [0, n) (Note
// [Philox stream layout]); `words` holds n + 3 values (the partial blocks at
// both ends are computed whole). Vectorised over blocks.
void PhiloxWords(uint64_t seed, uint64_t first, int64_t n, uint32_t* words);

// out[i] = DropoutApply(x[i], word(stream.offset + i), dp).
void Dropout(const Tensor& x, const DropoutParams& dp, const PhiloxStream& stream,
             const Tensor& out);
// mask[i] = DropoutKeep(word(stream.offset + i), dp) ? 1 : 0.
void DropoutMask(const DropoutParams& dp, const PhiloxStream& stream, const Tensor& mask);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_DROPOUT_H_
