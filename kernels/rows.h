// Row views for the kernels that work along the last axis (softmax, LayerNorm,
// cross-entropy, embedding): a tensor [..., C] seen as `rows` rows of `cols`
// elements each, every row contiguous (unit last stride) but the rows anywhere
// in memory, so a slice of a bigger buffer is used in place, without a copy.
//
//   // Op entry: inputs with a non-unit last stride (a transpose) are copied once.
//   ZS_ASSIGN_OR_RETURN(Tensor xr, RowMajorInput(x, x.dtype()));
//   ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(out));   // a buffer only if out needs one
//   cpu::Softmax(xr, o.tensor());
//   ZS_RETURN_IF_ERROR(o.Finish());                          // copies back if it used a buffer
//
//   // CPU kernel:
//   const RowLayout lx = RowLayout::Of(xr);
//   const float* row = static_cast<const float*>(xr.raw_data()) + lx.Offset(r);
#ifndef ZEROSHARD_KERNELS_ROWS_H_
#define ZEROSHARD_KERNELS_ROWS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// Row kernels run their rows on several threads only past this many elements
// of work: below it, starting the threads costs more than it saves.
inline constexpr int64_t kRowParallelWork = int64_t{1} << 15;

// Where the rows of a tensor [..., C] with unit last stride start, in
// elements from raw_data(). Rows are numbered in row-major order of the
// leading dimensions (a 1-D tensor is one row; a 0-D one is refused earlier).
struct RowLayout {
  int64_t rows = 1;
  int64_t cols = 1;
  // Rows equally spaced by row_stride (the common case: contiguous, or a
  // narrowed last axis); otherwise Offset() walks the leading dimensions.
  bool uniform = true;
  int64_t row_stride = 0;
  Shape lead_shape;
  Shape lead_strides;

  static RowLayout Of(const Tensor& t);

  int64_t Offset(int64_t r) const {
    if (uniform) return r * row_stride;
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(lead_shape.size()) - 1; d >= 0; --d) {
      off += (r % lead_shape[d]) * lead_strides[d];
      r /= lead_shape[d];
    }
    return off;
  }
};

// True when `t`'s rows are each contiguous (unit last stride, or at most one column).
bool HasContiguousRows(const Tensor& t);

// `t` converted to `dtype` and laid out with contiguous rows: `t` itself when
// it already is both, else a copy.
absl::StatusOr<Tensor> RowMajorInput(const Tensor& t, DType dtype);

// An output the kernels can write row by row: the output itself when its rows
// are contiguous, else a contiguous buffer copied into it by Finish().
class RowOutput {
 public:
  static absl::StatusOr<RowOutput> For(const Tensor& out);
  const Tensor& tensor() const { return work_; }
  absl::Status Finish() const;

 private:
  Tensor out_;
  Tensor work_;
};

// Checks an output of a row kernel: defined, no broadcast (stride 0)
// dimension, and no overlap with any input except, when `allow_in_place`, an
// input that is exactly the same view (same elements, dtype and strides).
// Undefined inputs are skipped.
absl::Status CheckRowOutput(absl::string_view op, absl::string_view name, const Tensor& out,
                            std::initializer_list<const Tensor*> inputs, bool allow_in_place);

// Checks that `t` is a floating tensor (f32, bf16 or f16) with at least one dimension.
absl::Status CheckFloatRows(absl::string_view op, absl::string_view name, const Tensor& t);

// The leading shape of a [..., C] tensor: its shape without the last dimension.
Shape LeadingShape(const Tensor& t);

// Checks that `t` holds one value per row of `x` [..., C]: its shape is x's
// leading shape [...] or [rows].
absl::Status CheckPerRowShape(absl::string_view op, absl::string_view name, const Tensor& t,
                              const Tensor& x);

// "[2, 5]": the multi-index of element `flat` (row-major) of a tensor of `shape`.
std::string IndexToString(absl::Span<const int64_t> shape, int64_t flat);


// ---------------------------------------------------------------- normalisation entries
// Checks and buffers shared by the entries of the normalisations over the last
// axis (kernels/layernorm.cc, kernels/rmsnorm.cc): x [..., C], per-row f32
// statistics (mean, rstd), optional [C] parameters.

// x (or dy): float [..., C] with C >= 1; returns C.
absl::StatusOr<int64_t> CheckNormRows(absl::string_view op, absl::string_view name, const Tensor& t);

// `t`: float, of `like`'s shape.
absl::Status CheckNormLike(absl::string_view op, absl::string_view name, const Tensor& t,
                           const Tensor& like, absl::string_view like_name);

// An optional [C] float tensor (weight, bias, dweight, dbias); undefined passes.
absl::Status CheckNormParam(absl::string_view op, absl::string_view name, const Tensor& t, int64_t c);

// A saved statistic (mean, rstd): f32, of x's leading shape or [rows].
absl::Status CheckNormStat(absl::string_view op, absl::string_view name, const Tensor& t,
                           const Tensor& x);

// `t` ([C], optional) as C contiguous floats; `fill` where t is undefined.
absl::StatusOr<std::vector<float>> NormParamValues(const Tensor& t, int64_t c, float fill);

// A contiguous f32 tensor holding `t`'s values (t itself when it already is one).
absl::StatusOr<Tensor> NormContiguousF32(const Tensor& t);

// An optional f32 statistic output of a CPU kernel, written through a
// contiguous buffer when it is not contiguous itself.
class NormStatOutput {
 public:
  static absl::StatusOr<NormStatOutput> For(const Tensor& t);
  // Where the kernel writes; nullptr when the statistic is not wanted.
  float* data() const;
  absl::Status Finish() const;

 private:
  Tensor out_, work_;
};

// The CUDA kernels write saved statistics in place: `t` (optional) must be
// contiguous; nullptr when undefined.
absl::StatusOr<float*> CudaNormStat(absl::string_view op, absl::string_view name, const Tensor& t);

// `t`'s f32 data, or nullptr when undefined.
const float* NormF32Data(const Tensor& t);

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_ROWS_H_
