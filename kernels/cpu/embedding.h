// CPU implementations behind kernels/embedding.h. Arguments are validated by
// the op entry: weight and dweight [V, C] float with unit last stride; out and
// dout float [..., C] with contiguous rows, one row per id; every id in [0, V).
#ifndef ZEROSHARD_KERNELS_CPU_EMBEDDING_H_
#define ZEROSHARD_KERNELS_CPU_EMBEDDING_H_

#include <cstdint>

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::cpu {

// out row p = weight row ids[p].
void Embedding(const Tensor& weight, const int64_t* ids, const Tensor& out);

// dweight row v += the sum, in position order, of the dout rows p with ids[p] == v.
void EmbeddingBackward(const Tensor& dout, const int64_t* ids, const Tensor& dweight);

}  // namespace zeroshard::cpu

#endif  // ZEROSHARD_KERNELS_CPU_EMBEDDING_H_
