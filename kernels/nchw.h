// Shared pieces of the NCHW image op entries (conv2d, batchnorm, pool2d):
// argument checks, and staging through contiguous f32 buffers. The CPU kernels
// of those ops compute on contiguous f32 arrays; an input of another dtype or
// layout is converted once, an output that is not contiguous f32 is written
// through a buffer and converted back (rounded once) by Finish().
//
//   ZS_RETURN_IF_ERROR(CheckImage(op, "x", x));                 // float, [N, C, H, W]
//   ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(x));                 // x itself when contiguous f32
//   ZS_ASSIGN_OR_RETURN(F32Output yo, F32Output::For(y));
//   cpu::Kernel(F32Data(xf), yo.data());
//   ZS_RETURN_IF_ERROR(yo.Finish());
#ifndef ZEROSHARD_KERNELS_NCHW_H_
#define ZEROSHARD_KERNELS_NCHW_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// `t` is defined, f32/bf16/f16 and 4-D.
absl::Status CheckImage(absl::string_view op, absl::string_view name, const Tensor& t);
// `t` is defined, floating and of shape `want` (`why` says where `want` comes from).
absl::Status CheckFloatShape(absl::string_view op, absl::string_view name, const Tensor& t,
                             const Shape& want, absl::string_view why);

// `t` as a contiguous f32 tensor: `t` itself when it is one, else a converted
// copy; undefined for an undefined `t`.
absl::StatusOr<Tensor> F32Input(const Tensor& t);
inline const float* F32Data(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr;
}

// An output written as contiguous f32: the tensor itself when it is one, else
// a buffer (holding out's current values when `load`, for kernels that add
// into it) that Finish() converts into it.
class F32Output {
 public:
  static absl::StatusOr<F32Output> For(const Tensor& out, bool load = false);
  // nullptr for an undefined output.
  float* data() const { return work_.defined() ? static_cast<float*>(work_.raw_data()) : nullptr; }
  absl::Status Finish() const;

 private:
  Tensor out_, work_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_NCHW_H_
