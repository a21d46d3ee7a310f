// GradMode: how a backward kernel writes a parameter gradient that sums over
// many rows (LayerNorm's dweight and dbias, Embedding's dweight).
//
//   ZS_RETURN_IF_ERROR(LayerNormBackward(dy, x, mean, rstd, w, dx, dw, db,
//                                        GradMode::kAccumulate));   // dw += ..., db += ...
//
// kAccumulate adds into the buffer's current values (gradient accumulation
// across micro-batches, or several uses of one parameter): each element is read,
// the fp32 sum of this call added in fp32, and the result rounded once into the
// buffer's dtype. kOverwrite replaces the buffer's contents.
#ifndef ZEROSHARD_KERNELS_GRAD_MODE_H_
#define ZEROSHARD_KERNELS_GRAD_MODE_H_

namespace zeroshard {

enum class GradMode { kOverwrite, kAccumulate };

inline const char* GradModeName(GradMode m) {
  return m == GradMode::kAccumulate ? "accumulate" : "overwrite";
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_GRAD_MODE_H_
