// Flat-buffer pack and unpack: gather many tensors into one 1-D buffer and
// scatter them back, the data movement of FSDP's flat parameters (a unit's
// parameters flattened, in registration order, into one buffer; see
// Note [Shard layout] in the sharding runtime).
//
//   // w [768, 768], b [768] -> flat [768 * 768 + 768 + pad]
//   const std::vector<int64_t> offsets = {0, 768 * 768};
//   ZS_RETURN_IF_ERROR(PackFlat({w, b}, offsets, flat));
//   ... all-gather, optimizer step on the flat buffer ...
//   ZS_RETURN_IF_ERROR(UnpackFlat(flat, offsets, {w, b}));
//
// Piece i occupies flat[offsets[i], offsets[i] + pieces[i].numel()) (element
// offsets; gaps between pieces, e.g. alignment padding, are left untouched).
//
// Rules (each violation is an InvalidArgument saying what was found):
// - flat is 1-D and contiguous; pieces are contiguous, of flat's dtype and
//   device (any shapes); one offset per piece.
// - Every piece's range lies inside flat, the ranges do not overlap, and no
//   piece shares memory with flat.
// On CUDA one kernel moves every piece (kernels/cuda/flat_buffer.cu, 16-byte
// moves when aligned); its table of copies is uploaded through flat's allocator.
#ifndef ZEROSHARD_KERNELS_FLAT_BUFFER_H_
#define ZEROSHARD_KERNELS_FLAT_BUFFER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// flat[offsets[i] ...] = pieces[i], for every i.
absl::Status PackFlat(absl::Span<const Tensor> pieces, absl::Span<const int64_t> offsets,
                      const Tensor& flat);

// pieces[i] = flat[offsets[i] ...], for every i.
absl::Status UnpackFlat(const Tensor& flat, absl::Span<const int64_t> offsets,
                        absl::Span<const Tensor> pieces);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_FLAT_BUFFER_H_
