#include "zeroshard/autograd/ops.h"

#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/function.h"
#include "zeroshard/kernels/dropout.h"
#include "zeroshard/kernels/embedding.h"
#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/softmax.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/kernels/rmsnorm.h"
#include "zeroshard/kernels/silu_gate.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::ops {

using autograd::ForwardOpSpan;
using autograd::Grads;
using autograd::GradsOr;
using autograd::Record;

namespace {

// `g` summed down to `shape` (undoing a broadcast) in `dtype`.
absl::StatusOr<Tensor> ReduceGradTo(const Tensor& g, const Shape& shape, DType dtype) {
  if (g.shape() == shape && g.dtype() == dtype) return g;
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, dtype, g.allocator()));
  ZS_RETURN_IF_ERROR(SumToShape(g, out));
  return out;
}

absl::Status CheckDefined(std::initializer_list<const Variable*> vs, absl::string_view op) {
  for (const Variable* v : vs) ZS_RETURN_IF_ERROR(autograd::CheckHasValue(*v, op));
  return absl::OkStatus();
}

using UnaryBackward = std::function<absl::StatusOr<Tensor>(const Tensor& g, const Tensor& saved)>;

// A unary op whose backward reads either its input or its output (`save_output`).
absl::StatusOr<Variable> UnaryOpWithGrad(absl::string_view name, UnaryOp op, const Variable& x,
                                         bool save_output, UnaryBackward backward) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, name));
  ZS_ASSIGN_OR_RETURN(Tensor y, Unary(op, x.value()));
  if (!autograd::ShouldRecord({&x})) return Variable(y);
  const Tensor saved = save_output ? y : x.value();
  return Record(std::string(name), y, {&x}, [saved, backward](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, backward(g[0], saved));
    return Grads{dx};
  });
}

}  // namespace

// ================================================================ elementwise

absl::StatusOr<Variable> Add(const Variable& a, const Variable& b) {
  ForwardOpSpan span("Add");
  ZS_RETURN_IF_ERROR(CheckDefined({&a, &b}, "Add"));
  ZS_ASSIGN_OR_RETURN(Tensor y, Binary(BinaryOp::kAdd, a.value(), b.value()));
  const Shape sa = a.shape(), sb = b.shape();
  const DType da = a.dtype(), db = b.dtype();
  return Record("Add", y, {&a, &b}, [sa, sb, da, db](std::vector<Tensor>& g) -> GradsOr {
    Grads out(2);
    ZS_ASSIGN_OR_RETURN(out[0], ReduceGradTo(g[0], sa, da));
    ZS_ASSIGN_OR_RETURN(out[1], ReduceGradTo(g[0], sb, db));
    return out;
  });
}

absl::StatusOr<Variable> Sub(const Variable& a, const Variable& b) {
  ForwardOpSpan span("Sub");
  ZS_RETURN_IF_ERROR(CheckDefined({&a, &b}, "Sub"));
  ZS_ASSIGN_OR_RETURN(Tensor y, Binary(BinaryOp::kSub, a.value(), b.value()));
  const Shape sa = a.shape(), sb = b.shape();
  const DType da = a.dtype(), db = b.dtype();
  return Record("Sub", y, {&a, &b}, [sa, sb, da, db](std::vector<Tensor>& g) -> GradsOr {
    Grads out(2);
    ZS_ASSIGN_OR_RETURN(out[0], ReduceGradTo(g[0], sa, da));
    ZS_ASSIGN_OR_RETURN(Tensor neg, Affine(g[0], -1.0, 0.0));
    ZS_ASSIGN_OR_RETURN(out[1], ReduceGradTo(neg, sb, db));
    return out;
  });
}

absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b) {
  ForwardOpSpan span("Mul");
  ZS_RETURN_IF_ERROR(CheckDefined({&a, &b}, "Mul"));
  ZS_ASSIGN_OR_RETURN(Tensor y, Binary(BinaryOp::kMul, a.value(), b.value()));
  if (!autograd::ShouldRecord({&a, &b})) return Variable(y);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // Save b only if a needs a gradient, and a only if b does.
  const Tensor av = need_b ? a.value() : Tensor(), bv = need_a ? b.value() : Tensor();
  const Shape sa = a.shape(), sb = b.shape();
  const DType da = a.dtype(), db = b.dtype();
  return Record("Mul", y, {&a, &b}, [av, bv, sa, sb, da, db](std::vector<Tensor>& g) -> GradsOr {
    Grads out(2);
    if (bv.defined()) {
      ZS_ASSIGN_OR_RETURN(Tensor t, Binary(BinaryOp::kMul, g[0], bv));
      ZS_ASSIGN_OR_RETURN(out[0], ReduceGradTo(t, sa, da));
    }
    if (av.defined()) {
      ZS_ASSIGN_OR_RETURN(Tensor t, Binary(BinaryOp::kMul, g[0], av));
      ZS_ASSIGN_OR_RETURN(out[1], ReduceGradTo(t, sb, db));
    }
    return out;
  });
}

absl::StatusOr<Variable> Div(const Variable& a, const Variable& b) {
  ForwardOpSpan span("Div");
  ZS_RETURN_IF_ERROR(CheckDefined({&a, &b}, "Div"));
  ZS_ASSIGN_OR_RETURN(Tensor y, Binary(BinaryOp::kDiv, a.value(), b.value()));
  if (!autograd::ShouldRecord({&a, &b})) return Variable(y);
  const Tensor bv = b.value();
  const Tensor yv = b.requires_grad() ? y : Tensor();
  const Shape sa = a.shape(), sb = b.shape();
  const DType da = a.dtype(), db = b.dtype();
  return Record("Div", y, {&a, &b}, [bv, yv, sa, sb, da, db](std::vector<Tensor>& g) -> GradsOr {
    Grads out(2);
    // d(a/b)/da = 1/b;  d(a/b)/db = -a/b^2 = -y/b.
    ZS_ASSIGN_OR_RETURN(Tensor ga, Binary(BinaryOp::kDiv, g[0], bv));
    ZS_ASSIGN_OR_RETURN(out[0], ReduceGradTo(ga, sa, da));
    if (yv.defined()) {
      ZS_ASSIGN_OR_RETURN(Tensor t, Binary(BinaryOp::kMul, ga, yv));
      ZS_RETURN_IF_ERROR(Affine(t, -1.0, 0.0, t));
      ZS_ASSIGN_OR_RETURN(out[1], ReduceGradTo(t, sb, db));
    }
    return out;
  });
}

absl::StatusOr<Variable> Neg(const Variable& x) { return Affine(x, -1.0, 0.0); }

absl::StatusOr<Variable> Affine(const Variable& x, double alpha, double beta) {
  ForwardOpSpan span("Affine");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Affine"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::Affine(x.value(), alpha, beta));
  return Record("Affine", y, {&x}, [alpha](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, zeroshard::Affine(g[0], alpha, 0.0));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Exp(const Variable& x) {
  ForwardOpSpan span("Exp");
  return UnaryOpWithGrad("Exp", UnaryOp::kExp, x, /*save_output=*/true,
                         [](const Tensor& g, const Tensor& y) { return Binary(BinaryOp::kMul, g, y); });
}

absl::StatusOr<Variable> Log(const Variable& x) {
  ForwardOpSpan span("Log");
  return UnaryOpWithGrad("Log", UnaryOp::kLog, x, /*save_output=*/false,
                         [](const Tensor& g, const Tensor& xv) { return Binary(BinaryOp::kDiv, g, xv); });
}

absl::StatusOr<Variable> Tanh(const Variable& x) {
  ForwardOpSpan span("Tanh");
  // d tanh = 1 - y^2
  return UnaryOpWithGrad("Tanh", UnaryOp::kTanh, x, true,
                         [](const Tensor& g, const Tensor& y) -> absl::StatusOr<Tensor> {
                           ZS_ASSIGN_OR_RETURN(Tensor d, Unary(UnaryOp::kSquare, y));
                           ZS_RETURN_IF_ERROR(zeroshard::Affine(d, -1.0, 1.0, d));
                           return Binary(BinaryOp::kMul, g, d);
                         });
}

absl::StatusOr<Variable> Sqrt(const Variable& x) {
  ForwardOpSpan span("Sqrt");
  // d sqrt(x) = 0.5 / y
  return UnaryOpWithGrad("Sqrt", UnaryOp::kSqrt, x, true,
                         [](const Tensor& g, const Tensor& y) -> absl::StatusOr<Tensor> {
                           ZS_ASSIGN_OR_RETURN(Tensor d, Binary(BinaryOp::kDiv, g, y));
                           ZS_RETURN_IF_ERROR(zeroshard::Affine(d, 0.5, 0.0, d));
                           return d;
                         });
}

absl::StatusOr<Variable> Rsqrt(const Variable& x) {
  ForwardOpSpan span("Rsqrt");
  // d x^-1/2 = -0.5 y^3
  return UnaryOpWithGrad("Rsqrt", UnaryOp::kRsqrt, x, true,
                         [](const Tensor& g, const Tensor& y) -> absl::StatusOr<Tensor> {
                           ZS_ASSIGN_OR_RETURN(Tensor y3, Tensor::EmptyLike(y));
                           ZS_RETURN_IF_ERROR(zeroshard::PowScalar(y, 3.0, y3));
                           ZS_ASSIGN_OR_RETURN(Tensor d, Binary(BinaryOp::kMul, g, y3));
                           ZS_RETURN_IF_ERROR(zeroshard::Affine(d, -0.5, 0.0, d));
                           return d;
                         });
}

absl::StatusOr<Variable> Relu(const Variable& x) {
  ForwardOpSpan span("Relu");
  return UnaryOpWithGrad("Relu", UnaryOp::kRelu, x, false,
                         [](const Tensor& g, const Tensor& xv) {
                           return Binary(BinaryOp::kReluBackward, xv, g);
                         });
}

absl::StatusOr<Variable> Gelu(const Variable& x) {
  ForwardOpSpan span("Gelu");
  return UnaryOpWithGrad("Gelu", UnaryOp::kGelu, x, false,
                         [](const Tensor& g, const Tensor& xv) {
                           return Binary(BinaryOp::kGeluBackward, xv, g);
                         });
}

absl::StatusOr<Variable> Sigmoid(const Variable& x) {
  ForwardOpSpan span("Sigmoid");
  // d sigmoid = y (1 - y)
  return UnaryOpWithGrad("Sigmoid", UnaryOp::kSigmoid, x, true,
                         [](const Tensor& g, const Tensor& y) -> absl::StatusOr<Tensor> {
                           ZS_ASSIGN_OR_RETURN(Tensor one_minus, zeroshard::Affine(y, -1.0, 1.0));
                           ZS_ASSIGN_OR_RETURN(Tensor d, Binary(BinaryOp::kMul, y, one_minus));
                           return Binary(BinaryOp::kMul, g, d);
                         });
}

absl::StatusOr<Variable> Square(const Variable& x) {
  ForwardOpSpan span("Square");
  return UnaryOpWithGrad("Square", UnaryOp::kSquare, x, false,
                         [](const Tensor& g, const Tensor& xv) -> absl::StatusOr<Tensor> {
                           ZS_ASSIGN_OR_RETURN(Tensor d, Binary(BinaryOp::kMul, g, xv));
                           ZS_RETURN_IF_ERROR(zeroshard::Affine(d, 2.0, 0.0, d));
                           return d;
                         });
}

absl::StatusOr<Variable> PowScalar(const Variable& x, double p) {
  ForwardOpSpan span("PowScalar");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "PowScalar"));
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::EmptyLike(x.value()));
  ZS_RETURN_IF_ERROR(zeroshard::PowScalar(x.value(), p, y));
  if (!autograd::ShouldRecord({&x})) return Variable(y);
  const Tensor xv = x.value();
  return Record("PowScalar", y, {&x}, [xv, p](std::vector<Tensor>& g) -> GradsOr {
    // d x^p = p x^(p-1)
    ZS_ASSIGN_OR_RETURN(Tensor d, Tensor::EmptyLike(xv));
    ZS_RETURN_IF_ERROR(zeroshard::PowScalar(xv, p - 1.0, d));
    ZS_ASSIGN_OR_RETURN(Tensor dx, Binary(BinaryOp::kMul, g[0], d));
    ZS_RETURN_IF_ERROR(zeroshard::Affine(dx, p, 0.0, dx));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Cast(const Variable& x, DType dtype) {
  ForwardOpSpan span("Cast");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Cast"));
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().To(dtype));
  if (dtype == x.dtype()) {
    ZS_ASSIGN_OR_RETURN(y, x.value().Clone());
  }
  const DType from = x.dtype();
  return Record("Cast", y, {&x}, [from](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, g[0].To(from));
    return Grads{dx};
  });
}

// ================================================================ linear algebra

absl::StatusOr<Variable> MatMul(const Variable& a, const Variable& b, const MatMulOptions& o) {
  ForwardOpSpan span("MatMul");
  ZS_RETURN_IF_ERROR(CheckDefined({&a, &b}, "MatMul"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::MatMul(a.value(), b.value(), o));
  if (!autograd::ShouldRecord({&a, &b})) return Variable(y);
  const bool shared_b = b.dim() == 2 && a.dim() > 2;
  if (shared_b && o.transpose_a && b.requires_grad()) {
    return absl::UnimplementedError(
        "MatMul: the gradient of a 2-D b shared across a batch is computed for transpose_a = false "
        "only; transpose a explicitly first");
  }
  const Tensor av = b.requires_grad() ? a.value() : Tensor();
  const Tensor bv = a.requires_grad() ? b.value() : Tensor();
  const DType da = a.dtype(), db = b.dtype();
  return Record("MatMul", y, {&a, &b}, [av, bv, o, shared_b, da, db](std::vector<Tensor>& g) -> GradsOr {
    Grads out(2);
    const Tensor& gy = g[0];
    const float alpha = o.alpha;
    if (bv.defined()) {
      // d op(a) = g op(b)^T, transposed back when a was transposed.
      MatMulOptions m = o.transpose_a ? MatMulOptions{.transpose_a = o.transpose_b, .transpose_b = true}
                                      : MatMulOptions{.transpose_b = !o.transpose_b};
      m.alpha = alpha;
      ZS_ASSIGN_OR_RETURN(out[0], o.transpose_a ? zeroshard::MatMul(bv, gy, m) : zeroshard::MatMul(gy, bv, m));
      if (out[0].dtype() != da) {
        ZS_ASSIGN_OR_RETURN(out[0], out[0].To(da));
      }
    }
    if (av.defined()) {
      Tensor a2 = av, g2 = gy;
      if (shared_b) {  // sum over the batch: fold it into the rows
        ZS_ASSIGN_OR_RETURN(a2, av.Reshape({-1, av.size(-1)}));
        ZS_ASSIGN_OR_RETURN(g2, gy.Reshape({-1, gy.size(-1)}));
      }
      // d op(b) = op(a)^T g, transposed back when b was transposed.
      MatMulOptions m = o.transpose_b ? MatMulOptions{.transpose_a = true, .transpose_b = o.transpose_a}
                                      : MatMulOptions{.transpose_a = !o.transpose_a};
      m.alpha = alpha;
      ZS_ASSIGN_OR_RETURN(out[1], o.transpose_b ? zeroshard::MatMul(g2, a2, m) : zeroshard::MatMul(a2, g2, m));
      if (out[1].dtype() != db) {
        ZS_ASSIGN_OR_RETURN(out[1], out[1].To(db));
      }
    }
    return out;
  });
}

namespace {

// What a linear layer's backward reads: x when w needs a gradient, w when x
// does; the bias gradient's need; the dtypes each gradient returns in.
struct LinearSaved {
  Tensor x, w;
  bool need_b = false;
  DType dx_t = DType::kF32, dw_t = DType::kF32, db_t = DType::kF32;
};

absl::Status CheckLinearShapes(absl::string_view op, const Variable& w, const Variable& b) {
  if (w.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": weight must be [out, in], got ",
                                                   ShapeToString(w.shape())));
  }
  if (b.defined() && (b.dim() != 1 || b.size(0) != w.size(0))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bias of shape ", ShapeToString(b.shape()),
                                                   " for a weight of shape ", ShapeToString(w.shape()),
                                                   ", expected [", w.size(0), "]"));
  }
  return absl::OkStatus();
}

LinearSaved SaveLinear(const Variable& x, const Variable& w, const Variable& b, const Tensor& x_value) {
  return {.x = w.requires_grad() ? x_value : Tensor(),
          .w = x.requires_grad() ? w.value() : Tensor(),
          .need_b = b.defined() && b.requires_grad(),
          .dx_t = x_value.dtype(),
          .dw_t = w.dtype(),
          .db_t = b.defined() ? b.dtype() : DType::kF32};
}

// dx, dw, db of y = x w^T + b for the gradient g of y. With `dgelu_pre`, x was
// gelu(dgelu_pre) and the first gradient returned is dgelu_pre's, GELU's
// backward fused into the dx GEMM (Note [GELU in the GEMM]): in dgelu_pre's
// dtype, which is x's.
GradsOr LinearBackward(const Tensor& g, const LinearSaved& s, const Tensor& dgelu_pre = Tensor()) {
  Grads out(3);
  ZS_ASSIGN_OR_RETURN(Tensor g2, g.Reshape({-1, g.size(-1)}));  // [rows, out]
  if (s.w.defined() && dgelu_pre.defined()) {  // d(pre) = (g w) gelu'(pre)
    ZS_ASSIGN_OR_RETURN(out[0], Tensor::Empty(dgelu_pre.shape(), dgelu_pre.dtype(), g.allocator()));
    ZS_RETURN_IF_ERROR(zeroshard::MatMul(g, s.w, out[0], {.dgelu_pre = dgelu_pre}));
  } else if (s.w.defined()) {  // dx = g w
    ZS_ASSIGN_OR_RETURN(out[0], zeroshard::MatMul(g, s.w));
    if (out[0].dtype() != s.dx_t) {
      ZS_ASSIGN_OR_RETURN(out[0], out[0].To(s.dx_t));
    }
  }
  if (s.x.defined()) {  // dw = g^T x over all rows (and db = g's column sums with it)
    ZS_ASSIGN_OR_RETURN(Tensor x2, s.x.Reshape({-1, s.x.size(-1)}));
    if (s.need_b) {
      ZS_ASSIGN_OR_RETURN(out[2], Tensor::Empty({g2.size(1)}, g2.dtype(), g2.allocator()));
    }
    ZS_ASSIGN_OR_RETURN(out[1], zeroshard::MatMul(g2, x2, {.transpose_a = true, .bias_grad = out[2]}));
    if (out[1].dtype() != s.dw_t) {
      ZS_ASSIGN_OR_RETURN(out[1], out[1].To(s.dw_t));
    }
  }
  if (s.need_b) {  // db = sum of g over rows
    if (!out[2].defined()) {
      ZS_ASSIGN_OR_RETURN(out[2], zeroshard::Sum(g2, 0));
    }
    if (out[2].dtype() != s.db_t) {
      ZS_ASSIGN_OR_RETURN(out[2], out[2].To(s.db_t));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Variable> Linear(const Variable& x, const Variable& w, const Variable& b) {
  ForwardOpSpan span("Linear");
  ZS_RETURN_IF_ERROR(CheckDefined({&x, &w}, "Linear"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(b, "Linear"));
  ZS_RETURN_IF_ERROR(CheckLinearShapes("Linear", w, b));
  // The bias rides in the GEMM (cuBLASLt's bias epilogue on CUDA).
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::MatMul(x.value(), w.value(),
                                                  {.transpose_b = true,
                                                   .bias = b.defined() ? b.value() : Tensor()}));
  if (!autograd::ShouldRecord({&x, &w, &b})) return Variable(y);
  const LinearSaved saved = SaveLinear(x, w, b, x.value());
  return Record("Linear", y, {&x, &w, &b},
                [saved](std::vector<Tensor>& g) -> GradsOr { return LinearBackward(g[0], saved); });
}

absl::StatusOr<Variable> GeluMlp(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2,
                                 const Variable& b2) {
  ForwardOpSpan span("GeluMlp");
  ZS_RETURN_IF_ERROR(CheckDefined({&x, &w1, &w2}, "GeluMlp"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(b1, "GeluMlp"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(b2, "GeluMlp"));
  ZS_RETURN_IF_ERROR(CheckLinearShapes("GeluMlp (first layer)", w1, b1));
  ZS_RETURN_IF_ERROR(CheckLinearShapes("GeluMlp (second layer)", w2, b2));
  if (x.dim() < 1 || x.size(-1) != w1.size(1) || w2.size(1) != w1.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat("GeluMlp: x ", ShapeToString(x.shape()), ", w1 ",
                                                   ShapeToString(w1.shape()), ", w2 ", ShapeToString(w2.shape()),
                                                   "; expected x [..., in], w1 [hidden, in], w2 [out, hidden]"));
  }
  // h is kept only when the first layer's inputs need gradients (GELU's backward reads it).
  const bool record_first = autograd::ShouldRecord({&x, &w1, &b1});
  const bool record = record_first || autograd::ShouldRecord({&w2, &b2});
  // h and a as Linear and Gelu would allocate them: the inputs' dtype when
  // they agree, else f32; x's allocator.
  Shape hidden_shape = x.shape();
  hidden_shape.back() = w1.size(0);
  const DType hidden_t = x.dtype() == w1.dtype() ? x.dtype() : DType::kF32;
  Allocator* allocator = x.value().allocator();
  Tensor h;  // GELU's input, kept for the backward only (allocated first, as Linear then Gelu would)
  if (record_first) {
    ZS_ASSIGN_OR_RETURN(h, Tensor::Empty(hidden_shape, hidden_t, allocator));
  }
  ZS_ASSIGN_OR_RETURN(Tensor a, Tensor::Empty(hidden_shape, hidden_t, allocator));
  ZS_RETURN_IF_ERROR(zeroshard::MatMul(
      x.value(), w1.value(), a,
      {.transpose_b = true, .bias = b1.defined() ? b1.value() : Tensor(), .gelu = true, .pre_gelu = h}));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::MatMul(a, w2.value(),
                                                  {.transpose_b = true,
                                                   .bias = b2.defined() ? b2.value() : Tensor()}));
  if (!record) return Variable(y);
  // Two nodes, so that the second layer's saved tensors (a, h) are freed once
  // its backward ran, before the first layer's, as with Linear, Gelu, Linear.
  // The gradient passed between them is h's, not a's: GELU's backward is done
  // in the second node's dx GEMM. `hidden` is internal, so no one else sees it.
  const Variable hidden = Record("GeluMlp", a, {&x, &w1, &b1},
                                 [first = SaveLinear(x, w1, b1, x.value())](std::vector<Tensor>& g) -> GradsOr {
                                   return LinearBackward(g[0], first);  // g[0]: the gradient of GELU's input
                                 });
  const LinearSaved second = SaveLinear(hidden, w2, b2, a);
  return Record("GeluMlp", y, {&hidden, &w2, &b2}, [second, h](std::vector<Tensor>& g) -> GradsOr {
    return LinearBackward(g[0], second, h);  // its first gradient is h's (GELU's backward fused)
  });
}

// ================================================================ reductions

namespace {

// g (shaped like the reduction's output) broadcast back over `dim` of `shape`, times `scale`.
absl::StatusOr<Tensor> ExpandReducedGrad(const Tensor& g, const Shape& shape, int64_t dim,
                                         bool keepdim, double scale, DType dtype) {
  Tensor gk = g;
  if (!keepdim) {
    ZS_ASSIGN_OR_RETURN(gk, g.Unsqueeze(dim));
  }
  ZS_ASSIGN_OR_RETURN(Tensor ge, gk.Expand(shape));
  ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(shape, dtype, g.allocator()));
  ZS_RETURN_IF_ERROR(zeroshard::Affine(ge, scale, 0.0, dx));
  return dx;
}

}  // namespace

absl::StatusOr<Variable> Sum(const Variable& x, int64_t dim, bool keepdim) {
  ForwardOpSpan span("Sum");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Sum"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::Sum(x.value(), dim, keepdim));
  ZS_ASSIGN_OR_RETURN(int64_t d, x.value().CheckDim(dim, "Sum"));
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  return Record("Sum", y, {&x}, [shape, d, keepdim, dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, ExpandReducedGrad(g[0], shape, d, keepdim, 1.0, dtype));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Mean(const Variable& x, int64_t dim, bool keepdim) {
  ForwardOpSpan span("Mean");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Mean"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::Mean(x.value(), dim, keepdim));
  ZS_ASSIGN_OR_RETURN(int64_t d, x.value().CheckDim(dim, "Mean"));
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  const double scale = 1.0 / static_cast<double>(shape[d]);
  return Record("Mean", y, {&x}, [shape, d, keepdim, scale, dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, ExpandReducedGrad(g[0], shape, d, keepdim, scale, dtype));
    return Grads{dx};
  });
}

namespace {

absl::StatusOr<Variable> ReduceAll(const Variable& x, bool mean) {
  const char* name = mean ? "MeanAll" : "SumAll";
  ForwardOpSpan span(name);
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, name));
  ZS_ASSIGN_OR_RETURN(double s, zeroshard::SumAll(x.value()));
  const double scale = mean ? 1.0 / static_cast<double>(x.numel()) : 1.0;
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Full({}, s * scale, DType::kF32, x.value().allocator()));
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  return Record(name, y, {&x}, [shape, scale, dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor ge, g[0].Expand(shape));
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(shape, dtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(zeroshard::Affine(ge, scale, 0.0, dx));
    return Grads{dx};
  });
}

}  // namespace

absl::StatusOr<Variable> SumAll(const Variable& x) { return ReduceAll(x, false); }
absl::StatusOr<Variable> MeanAll(const Variable& x) { return ReduceAll(x, true); }

// ================================================================ views

absl::StatusOr<Variable> Reshape(const Variable& x, absl::Span<const int64_t> shape) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Reshape"));
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().Reshape(shape));
  const Shape in = x.shape();
  return Record("Reshape", y, {&x}, [in](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, g[0].Reshape(in));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Transpose(const Variable& x, int64_t dim0, int64_t dim1) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Transpose"));
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().Transpose(dim0, dim1));
  return Record("Transpose", y, {&x}, [dim0, dim1](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, g[0].Transpose(dim0, dim1));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Permute(const Variable& x, absl::Span<const int64_t> dims) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Permute"));
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().Permute(dims));
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + x.dim() : dims[i];
    inverse[d] = static_cast<int64_t>(i);
  }
  return Record("Permute", y, {&x}, [inverse](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, g[0].Permute(inverse));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Narrow"));
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().Narrow(dim, start, length));
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  return Record("Narrow", y, {&x}, [shape, dtype, dim, start, length](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Zeros(shape, dtype, g[0].allocator()));
    ZS_ASSIGN_OR_RETURN(Tensor slot, dx.Narrow(dim, start, length));
    ZS_RETURN_IF_ERROR(slot.CopyFrom(g[0]));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Expand(const Variable& x, absl::Span<const int64_t> shape) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Expand"));
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().Expand(shape));
  const Shape in = x.shape();
  const DType dtype = x.dtype();
  return Record("Expand", y, {&x}, [in, dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, ReduceGradTo(g[0], in, dtype));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> Contiguous(const Variable& x) {
  ForwardOpSpan span("Contiguous");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Contiguous"));
  if (x.value().is_contiguous()) return x;
  ZS_ASSIGN_OR_RETURN(Tensor y, x.value().Contiguous());
  return Record("Contiguous", y, {&x}, [](std::vector<Tensor>& g) -> GradsOr { return Grads{g[0]}; });
}

absl::StatusOr<std::vector<Variable>> Split(const Variable& x, int64_t dim,
                                            absl::Span<const int64_t> sizes) {
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Split"));
  ZS_ASSIGN_OR_RETURN(const int64_t d, x.value().CheckDim(dim, "Split"));
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != x.size(d)) {
    return absl::InvalidArgumentError(absl::StrCat("Split: sizes ", ShapeToString(sizes), " sum to ",
                                                   total, " but dimension ", d, " has size ", x.size(d)));
  }
  std::vector<Tensor> pieces;
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    ZS_ASSIGN_OR_RETURN(Tensor piece, x.value().Narrow(d, start, s));
    pieces.push_back(piece);
    starts.push_back(start);
    start += s;
  }
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  const std::vector<int64_t> lengths(sizes.begin(), sizes.end());
  return autograd::RecordMulti(
      "Split", pieces, {&x}, [shape, dtype, d, starts, lengths](std::vector<Tensor>& g) -> GradsOr {
        bool all = true;
        for (const Tensor& t : g) all = all && t.defined();
        Allocator* home = nullptr;  // where the gradients live (any defined one)
        for (const Tensor& t : g) {
          if (t.defined()) home = t.allocator();
        }
        ZS_ASSIGN_OR_RETURN(Tensor dx, all ? Tensor::Empty(shape, dtype, home)
                                           : Tensor::Zeros(shape, dtype, home));
        for (size_t i = 0; i < g.size(); ++i) {
          if (!g[i].defined()) continue;
          ZS_ASSIGN_OR_RETURN(Tensor slot, dx.Narrow(d, starts[i], lengths[i]));
          ZS_RETURN_IF_ERROR(slot.CopyFrom(g[i]));
        }
        return Grads{dx};
      });
}

// ================================================================ nn ops

absl::StatusOr<Variable> Attention(const Variable& q, const Variable& k, const Variable& v,
                                   const AttentionOptions& options) {
  ForwardOpSpan span("Attention");
  ZS_RETURN_IF_ERROR(CheckDefined({&q, &k, &v}, "Attention"));
  ZS_ASSIGN_OR_RETURN(AttentionOutputs fwd,
                      AttentionForward(q.value(), k.value(), v.value(), options));
  if (!autograd::ShouldRecord({&q, &k, &v})) return Variable(fwd.out);
  const Tensor qv = q.value(), kv = k.value(), vv = v.value(), out = fwd.out, lse = fwd.lse;
  return Record("Attention", fwd.out, {&q, &k, &v},
                [qv, kv, vv, out, lse, options](std::vector<Tensor>& g) -> GradsOr {
                  ZS_ASSIGN_OR_RETURN(AttentionGrads d,
                                      AttentionBackward(g[0], qv, kv, vv, out, lse, options));
                  return Grads{d.dq, d.dk, d.dv};
                });
}

// Note [Packed attention]: a GPT's attention reads q, k and v from one
// projection [B, T, 3C] and hands one [B, T, C] to the output projection. As
// [B, H, T, D] tensors they are strided views: q = qkv viewed as
// [B, T, 3, H, D], index 0 of dim 2, dims T and H swapped (strides 3CT, D,
// 3C, 1), and the output's memory is [B, T, H, D] read as [B, H, T, D]
// (strides CT, D, C, 1). Every attention kernel takes strided operands with
// a unit stride in D (cuDNN's graph is built from the strides, ours and the
// CPU's index with them), so nothing is copied: split into heads, merged
// back, and in backward dq, dk and dv are written straight into one
// [B, T, 3C] gradient. Composed of Reshape, Permute, Split and Attention,
// the merge and the gradients' concatenation and reshape were copies: 8.5% +
// 1.4% of the GPT-2 124M step on an H100 (docs/gpu.md).
namespace {

struct QkvDims {
  int64_t b = 0, t = 0, c = 0, h = 0, d = 0;
};

absl::StatusOr<QkvDims> CheckQkv(const Tensor& qkv, int64_t heads) {
  if (qkv.dim() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("QkvAttention: qkv has shape ",
                                                   ShapeToString(qkv.shape()),
                                                   ", expected 3 dims [B, T, 3C]"));
  }
  if (heads < 1 || qkv.size(2) % (3 * heads) != 0 || qkv.size(2) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QkvAttention: qkv has ", qkv.size(2), " features and ", heads,
        " heads, expected 3 * heads * D features with D >= 1 (q, k and v of heads x D each)"));
  }
  QkvDims d;
  d.b = qkv.size(0);
  d.t = qkv.size(1);
  d.c = qkv.size(2) / 3;
  d.h = heads;
  d.d = d.c / heads;
  return d;
}

// x [B, T, H * D] (any layout Reshape can view, copied otherwise) as [B, H, T, D].
absl::StatusOr<Tensor> HeadsOf(const Tensor& x, const QkvDims& d) {
  ZS_ASSIGN_OR_RETURN(Tensor bthd, x.Reshape({d.b, d.t, d.h, d.d}));
  return bthd.Permute({0, 2, 1, 3});
}

// q, k and v of a [B, T, 3C] tensor, each [B, H, T, D].
absl::StatusOr<std::vector<Tensor>> SplitQkv(const Tensor& qkv, const QkvDims& d) {
  ZS_ASSIGN_OR_RETURN(Tensor five, qkv.Reshape({d.b, d.t, 3, d.h, d.d}));
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < 3; ++i) {
    ZS_ASSIGN_OR_RETURN(Tensor part, five.Select(2, i));
    ZS_ASSIGN_OR_RETURN(Tensor heads, part.Permute({0, 2, 1, 3}));
    parts.push_back(std::move(heads));
  }
  return parts;
}

}  // namespace

absl::StatusOr<Variable> QkvAttention(const Variable& qkv, int64_t heads, const AttentionOptions& options) {
  ForwardOpSpan span("Attention");
  ZS_RETURN_IF_ERROR(CheckDefined({&qkv}, "QkvAttention"));
  const Tensor x = qkv.value();
  ZS_ASSIGN_OR_RETURN(const QkvDims d, CheckQkv(x, heads));
  ZS_ASSIGN_OR_RETURN(std::vector<Tensor> in, SplitQkv(x, d));
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({d.b, d.t, d.c}, x.dtype(), x.allocator()));
  ZS_ASSIGN_OR_RETURN(Tensor out, HeadsOf(y, d));
  ZS_ASSIGN_OR_RETURN(Tensor lse, Tensor::Empty({d.b, d.h, d.t}, DType::kF32, x.allocator()));
  ZS_RETURN_IF_ERROR(AttentionForward(in[0], in[1], in[2], out, lse, options));
  if (!autograd::ShouldRecord({&qkv})) return Variable(y);
  return Record("Attention", y, {&qkv},
                [in, out, lse, d, options](std::vector<Tensor>& g) -> GradsOr {
                  ZS_ASSIGN_OR_RETURN(Tensor dout, HeadsOf(g[0], d));
                  ZS_ASSIGN_OR_RETURN(Tensor dqkv, Tensor::Empty({d.b, d.t, 3 * d.c}, in[0].dtype(),
                                                                 in[0].allocator()));
                  ZS_ASSIGN_OR_RETURN(std::vector<Tensor> dparts, SplitQkv(dqkv, d));
                  ZS_RETURN_IF_ERROR(AttentionBackward(dout, in[0], in[1], in[2], out, lse, dparts[0],
                                                       dparts[1], dparts[2], options));
                  return Grads{dqkv};
                });
}

absl::StatusOr<Variable> Softmax(const Variable& x) {
  ForwardOpSpan span("Softmax");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Softmax"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::Softmax(x.value()));
  return Record("Softmax", y, {&x}, [y](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, SoftmaxBackward(y, g[0]));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> LogSoftmax(const Variable& x) {
  ForwardOpSpan span("LogSoftmax");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "LogSoftmax"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::LogSoftmax(x.value()));
  return Record("LogSoftmax", y, {&x}, [y](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, LogSoftmaxBackward(y, g[0]));
    return Grads{dx};
  });
}

absl::StatusOr<Variable> LayerNorm(const Variable& x, const Variable& weight, const Variable& bias,
                                   double eps) {
  ForwardOpSpan span("LayerNorm");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "LayerNorm"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(weight, "LayerNorm"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(bias, "LayerNorm"));
  const Tensor xv = x.value();
  Shape rows(xv.shape().begin(), xv.shape().end() - 1);
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::EmptyLike(xv));
  ZS_ASSIGN_OR_RETURN(Tensor mean, Tensor::Empty(rows, DType::kF32, xv.allocator()));
  ZS_ASSIGN_OR_RETURN(Tensor rstd, Tensor::Empty(rows, DType::kF32, xv.allocator()));
  const Tensor wv = weight.defined() ? weight.value() : Tensor();
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  ZS_RETURN_IF_ERROR(LayerNormForward(xv, wv, bv, eps, y, mean, rstd));
  if (!autograd::ShouldRecord({&x, &weight, &bias})) return Variable(y);
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  return Record("LayerNorm", y, {&x, &weight, &bias},
                [xv, wv, bv, mean, rstd, need_x, need_w, need_b](std::vector<Tensor>& g) -> GradsOr {
                  Grads out(3);
                  if (need_x) {
                    ZS_ASSIGN_OR_RETURN(out[0], Tensor::EmptyLike(xv));
                  }
                  if (need_w) {
                    ZS_ASSIGN_OR_RETURN(out[1], Tensor::EmptyLike(wv));
                  }
                  if (need_b) {
                    ZS_ASSIGN_OR_RETURN(out[2], Tensor::EmptyLike(bv));
                  }
                  ZS_RETURN_IF_ERROR(LayerNormBackward(g[0], xv, mean, rstd, wv, out[0], out[1],
                                                       out[2], zeroshard::GradMode::kOverwrite));
                  return out;
                });
}

absl::StatusOr<Variable> Embedding(const Variable& weight, const Tensor& ids) {
  ForwardOpSpan span("Embedding");
  ZS_RETURN_IF_ERROR(CheckDefined({&weight}, "Embedding"));
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::Embedding(weight.value(), ids));
  const Shape wshape = weight.shape();
  const DType wdtype = weight.dtype();
  return Record("Embedding", y, {&weight}, [ids, wshape, wdtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dw, Tensor::Empty(wshape, wdtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(EmbeddingBackward(g[0], ids, dw, zeroshard::GradMode::kOverwrite));
    return Grads{dw};
  });
}

absl::StatusOr<Variable> CrossEntropy(const Variable& logits, const Tensor& targets,
                                      const CrossEntropyOptions& options) {
  ForwardOpSpan span("CrossEntropy");
  ZS_RETURN_IF_ERROR(CheckDefined({&logits}, "CrossEntropy"));
  const Tensor lv = logits.value();
  ZS_ASSIGN_OR_RETURN(Tensor lse, Tensor::Empty(targets.shape(), DType::kF32, lv.allocator()));
  if (lv.device().is_cuda()) {
    // The loss stays on the device; so does the backward's 1 / valid rows.
    ZS_ASSIGN_OR_RETURN(CrossEntropyOnDevice d, CrossEntropyMeanOnDevice(lv, targets, lse, options));
    return Record("CrossEntropy", d.loss, {&logits},
                  [lv, t = d.targets, lse, weight = d.weight, options](std::vector<Tensor>& g) -> GradsOr {
                    ZS_ASSIGN_OR_RETURN(Tensor dloss, zeroshard::Binary(BinaryOp::kMul, g[0], weight));
                    ZS_ASSIGN_OR_RETURN(Tensor dlogits, Tensor::EmptyLike(lv));
                    ZS_RETURN_IF_ERROR(CrossEntropyBackward(lv, t, lse, dloss, dlogits, options));
                    return Grads{dlogits};
                  });
  }
  ZS_ASSIGN_OR_RETURN(CrossEntropyStats stats,
                      CrossEntropyForward(lv, targets, Tensor(), lse, options));
  ZS_ASSIGN_OR_RETURN(Tensor loss, Tensor::Full({}, stats.mean_loss, DType::kF32, lv.allocator()));
  const int64_t valid = stats.valid_rows;
  return Record("CrossEntropy", loss, {&logits},
                [lv, targets, lse, valid, options](std::vector<Tensor>& g) -> GradsOr {
                  // Each valid row's loss has weight 1 / valid in the mean.
                  ZS_ASSIGN_OR_RETURN(Tensor dloss,
                                      zeroshard::Affine(g[0], valid > 0 ? 1.0 / valid : 0.0, 0.0));
                  ZS_ASSIGN_OR_RETURN(Tensor dlogits, Tensor::EmptyLike(lv));
                  ZS_RETURN_IF_ERROR(CrossEntropyBackward(lv, targets, lse, dloss, dlogits, options));
                  return Grads{dlogits};
                });
}

absl::StatusOr<Variable> Dropout(const Variable& x, double p, PhiloxGenerator& generator,
                                 bool training) {
  ForwardOpSpan span("Dropout");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Dropout"));
  if (!training || p == 0.0) return x;
  const PhiloxStream stream = generator.Next(x.numel());
  ZS_ASSIGN_OR_RETURN(Tensor y, zeroshard::Dropout(x.value(), p, stream));
  const DType dtype = x.dtype();
  return Record("Dropout", y, {&x}, [p, stream, dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(g[0].shape(), dtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(DropoutBackward(g[0], p, stream, dx));
    return Grads{dx};
  });
}

// ================================================================ Llama ops

absl::StatusOr<Variable> RmsNorm(const Variable& x, const Variable& weight, double eps) {
  ForwardOpSpan span("RmsNorm");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "RmsNorm"));
  ZS_RETURN_IF_ERROR(autograd::CheckAbsentOrHasValue(weight, "RmsNorm"));
  const Tensor xv = x.value();
  if (xv.dim() == 0) {
    return absl::InvalidArgumentError("RmsNorm: x is 0-d, expected [..., C]");
  }
  Shape rows(xv.shape().begin(), xv.shape().end() - 1);
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(xv.shape(), xv.dtype(), xv.allocator()));
  ZS_ASSIGN_OR_RETURN(Tensor rstd, Tensor::Empty(rows, DType::kF32, xv.allocator()));
  const Tensor wv = weight.defined() ? weight.value() : Tensor();
  ZS_RETURN_IF_ERROR(RmsNormForward(xv, wv, eps, y, rstd));
  if (!autograd::ShouldRecord({&x, &weight})) return Variable(y);
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  return Record("RmsNorm", y, {&x, &weight},
                [xv, wv, rstd, need_x, need_w](std::vector<Tensor>& g) -> GradsOr {
                  Grads out(2);
                  if (need_x) {
                    ZS_ASSIGN_OR_RETURN(out[0], Tensor::Empty(xv.shape(), xv.dtype(), g[0].allocator()));
                  }
                  if (need_w) {
                    ZS_ASSIGN_OR_RETURN(out[1], Tensor::Empty(wv.shape(), wv.dtype(), g[0].allocator()));
                  }
                  ZS_RETURN_IF_ERROR(RmsNormBackward(g[0], xv, rstd, wv, out[0], out[1],
                                                     zeroshard::GradMode::kOverwrite));
                  return out;
                });
}

absl::StatusOr<Variable> Silu(const Variable& x) {
  ForwardOpSpan span("Silu");
  return UnaryOpWithGrad("Silu", UnaryOp::kSilu, x, /*save_output=*/false,
                         [](const Tensor& g, const Tensor& xv) {
                           return Binary(BinaryOp::kSiluBackward, xv, g);
                         });
}

absl::StatusOr<Variable> SiluGate(const Variable& gate, const Variable& up) {
  ForwardOpSpan span("SiluGate");
  ZS_RETURN_IF_ERROR(CheckDefined({&gate, &up}, "SiluGate"));
  const Tensor gv = gate.value(), uv = up.value();
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(gv.shape(), gv.dtype(), gv.allocator()));
  ZS_RETURN_IF_ERROR(SiluGateForward(gv, uv, y));
  if (!autograd::ShouldRecord({&gate, &up})) return Variable(y);
  const bool need_gate = gate.requires_grad(), need_up = up.requires_grad();
  return Record("SiluGate", y, {&gate, &up},
                [gv, uv, need_gate, need_up](std::vector<Tensor>& g) -> GradsOr {
                  Grads out(2);
                  if (need_gate) {
                    ZS_ASSIGN_OR_RETURN(out[0], Tensor::Empty(gv.shape(), gv.dtype(), g[0].allocator()));
                  }
                  if (need_up) {
                    ZS_ASSIGN_OR_RETURN(out[1], Tensor::Empty(uv.shape(), uv.dtype(), g[0].allocator()));
                  }
                  // One pass for both, unless their dtypes differ (the kernel
                  // writes dgate and dup in one dtype): then one pass each.
                  if (!need_gate || !need_up || gv.dtype() == uv.dtype()) {
                    ZS_RETURN_IF_ERROR(SiluGateBackward(g[0], gv, uv, out[0], out[1]));
                  } else {
                    ZS_RETURN_IF_ERROR(SiluGateBackward(g[0], gv, uv, out[0], Tensor()));
                    ZS_RETURN_IF_ERROR(SiluGateBackward(g[0], gv, uv, Tensor(), out[1]));
                  }
                  return out;
                });
}

absl::StatusOr<Variable> Rope(const Variable& x, const RopeTables& tables) {
  ForwardOpSpan span("Rope");
  ZS_RETURN_IF_ERROR(CheckDefined({&x}, "Rope"));
  const Tensor xv = x.value();
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(xv.shape(), xv.dtype(), xv.allocator()));
  ZS_RETURN_IF_ERROR(RopeApply(xv, tables, y));
  if (!autograd::ShouldRecord({&x})) return Variable(y);
  const DType dtype = xv.dtype();
  return Record("Rope", y, {&x}, [tables, dtype](std::vector<Tensor>& g) -> GradsOr {
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(g[0].shape(), dtype, g[0].allocator()));
    ZS_RETURN_IF_ERROR(RopeApply(g[0], tables, dx, /*inverse=*/true));
    return Grads{dx};
  });
}

}  // namespace zeroshard::ops
