#include "zeroshard/autograd/vision_ops.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/function.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {

using autograd::ForwardOpSpan;
using autograd::Grads;
using autograd::GradsOr;
using autograd::Record;

namespace {

absl::Status CheckInput(const Variable& x, absl::string_view op) { return autograd::CheckHasValue(x, op); }

// An empty gradient buffer shaped like `v`'s value, or undefined when v needs none.
absl::StatusOr<Tensor> GradFor(const Variable& v, const Tensor& like_alloc) {
  if (!v.defined() || !v.requires_grad()) return Tensor();
  return Tensor::Empty(v.shape(), v.dtype(), like_alloc.allocator());
}

}  // namespace

absl::StatusOr<Variable> Conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                                const Conv2dOptions& options) {
  ForwardOpSpan span("Conv2d");
  ZS_RETURN_IF_ERROR(CheckInput(x, "Conv2d"));
  ZS_RETURN_IF_ERROR(CheckInput(weight, "Conv2d"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(bias, "Conv2d"));
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  ZS_ASSIGN_OR_RETURN(Tensor y, Conv2dForward(x.value(), weight.value(), bv, options));
  if (!autograd::ShouldRecord({&x, &weight, &bias})) return Variable(y);
  const bool need_x = x.requires_grad();
  const bool need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  // x is read only for the weight gradient, weight only for the input gradient.
  const Tensor xv = x.value(), wv = weight.value();
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype(), b_dtype = bias.defined() ? bias.dtype() : DType::kF32;
  const Shape w_shape = weight.shape();
  return Record("Conv2d", y, {&x, &weight, &bias},
                [xv, wv, need_x, need_w, need_b, x_dtype, w_dtype, b_dtype, w_shape,
                 options](std::vector<Tensor>& g) -> GradsOr {
                  Grads out(3);
                  Allocator* a = g[0].allocator();
                  if (need_x) {
                    ZS_ASSIGN_OR_RETURN(out[0], Tensor::Empty(xv.shape(), x_dtype, a));
                  }
                  if (need_w) {
                    ZS_ASSIGN_OR_RETURN(out[1], Tensor::Empty(w_shape, w_dtype, a));
                  }
                  if (need_b) {
                    ZS_ASSIGN_OR_RETURN(out[2], Tensor::Empty({w_shape[0]}, b_dtype, a));
                  }
                  ZS_RETURN_IF_ERROR(Conv2dBackward(g[0], xv, wv, options, out[0], out[1], out[2],
                                                    GradMode::kOverwrite));
                  return out;
                });
}

absl::StatusOr<Variable> BatchNorm(const Variable& x, const Variable& weight, const Variable& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const BatchNormOptions& options) {
  ForwardOpSpan span("BatchNorm");
  ZS_RETURN_IF_ERROR(CheckInput(x, "BatchNorm"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(weight, "BatchNorm"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(bias, "BatchNorm"));
  const Tensor xv = x.value();
  if (xv.dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("BatchNorm: x has shape ", ShapeToString(xv.shape()),
                                                   ", expected at least 2 dimensions [N, C, ...]"));
  }
  const int64_t c = xv.size(1);
  const Tensor wv = weight.defined() ? weight.value() : Tensor();
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::EmptyLike(xv));
  ZS_ASSIGN_OR_RETURN(Tensor mean, Tensor::Empty({c}, DType::kF32, xv.allocator()));
  ZS_ASSIGN_OR_RETURN(Tensor rstd, Tensor::Empty({c}, DType::kF32, xv.allocator()));
  ZS_RETURN_IF_ERROR(BatchNormForward(xv, wv, bv, running_mean, running_var, options, y, mean, rstd));
  if (!autograd::ShouldRecord({&x, &weight, &bias})) return Variable(y);
  const bool need_x = x.requires_grad();
  const Variable w = weight, b = bias;
  const bool training = options.training;
  return Record("BatchNorm", y, {&x, &weight, &bias},
                [xv, wv, mean, rstd, need_x, w, b, training](std::vector<Tensor>& g) -> GradsOr {
                  Grads out(3);
                  if (need_x) {
                    ZS_ASSIGN_OR_RETURN(out[0], Tensor::Empty(xv.shape(), xv.dtype(), g[0].allocator()));
                  }
                  ZS_ASSIGN_OR_RETURN(out[1], GradFor(w, g[0]));
                  ZS_ASSIGN_OR_RETURN(out[2], GradFor(b, g[0]));
                  ZS_RETURN_IF_ERROR(BatchNormBackward(g[0], xv, mean, rstd, wv, training, out[0],
                                                       out[1], out[2], GradMode::kOverwrite));
                  return out;
                });
}

absl::StatusOr<Variable> MaxPool2d(const Variable& x, const Pool2dOptions& options) {
  ForwardOpSpan span("MaxPool2d");
  ZS_RETURN_IF_ERROR(CheckInput(x, "MaxPool2d"));
  const Tensor xv = x.value();
  ZS_ASSIGN_OR_RETURN(Shape shape, Pool2dOutputShape(xv.shape(), options));
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(shape, xv.dtype(), xv.allocator()));
  const bool record = autograd::ShouldRecord({&x});
  Tensor indices;
  if (record) {
    ZS_ASSIGN_OR_RETURN(indices, Tensor::Empty(shape, DType::kI64, xv.allocator()));
  }
  ZS_RETURN_IF_ERROR(MaxPool2dForward(xv, options, y, indices));
  if (!record) return Variable(y);
  const Shape x_shape = xv.shape();
  const DType x_dtype = xv.dtype();
  return Record("MaxPool2d", y, {&x}, [indices, options, x_shape, x_dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(x_shape, x_dtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(MaxPool2dBackward(g[0], indices, options, dx));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> AvgPool2d(const Variable& x, const Pool2dOptions& options) {
  ForwardOpSpan span("AvgPool2d");
  ZS_RETURN_IF_ERROR(CheckInput(x, "AvgPool2d"));
  const Tensor xv = x.value();
  ZS_ASSIGN_OR_RETURN(Shape shape, Pool2dOutputShape(xv.shape(), options));
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(shape, xv.dtype(), xv.allocator()));
  ZS_RETURN_IF_ERROR(AvgPool2dForward(xv, options, y));
  if (!autograd::ShouldRecord({&x})) return Variable(y);
  const Shape x_shape = xv.shape();
  const DType x_dtype = xv.dtype();
  return Record("AvgPool2d", y, {&x}, [options, x_shape, x_dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(x_shape, x_dtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(AvgPool2dBackward(g[0], options, dx));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> AdaptiveAvgPool2d(const Variable& x, int64_t out_h, int64_t out_w) {
  ForwardOpSpan span("AdaptiveAvgPool2d");
  ZS_RETURN_IF_ERROR(CheckInput(x, "AdaptiveAvgPool2d"));
  const Tensor xv = x.value();
  if (xv.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("AdaptiveAvgPool2d: x has shape ",
                                                   ShapeToString(xv.shape()),
                                                   ", expected 4 dimensions [N, C, H, W]"));
  }
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({xv.size(0), xv.size(1), out_h, out_w}, xv.dtype(),
                                              xv.allocator()));
  ZS_RETURN_IF_ERROR(AdaptiveAvgPool2dForward(xv, y));
  if (!autograd::ShouldRecord({&x})) return Variable(y);
  const Shape x_shape = xv.shape();
  const DType x_dtype = xv.dtype();
  return Record("AdaptiveAvgPool2d", y, {&x}, [x_shape, x_dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(x_shape, x_dtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(AdaptiveAvgPool2dBackward(g[0], dx));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Flatten(const Variable& x, int64_t start_dim) {
  ZS_RETURN_IF_ERROR(CheckInput(x, "Flatten"));
  if (start_dim < 0) start_dim += x.dim();
  if (start_dim < 0 || start_dim >= std::max<int64_t>(x.dim(), 1)) {
    return absl::InvalidArgumentError(absl::StrCat("Flatten: start_dim ", start_dim, " for shape ",
                                                   ShapeToString(x.shape()), ", expected a dimension of it"));
  }
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  shape.push_back(-1);
  return Reshape(x, shape);
}

}  // namespace zeroshard::ops
