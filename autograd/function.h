// Recording an op in the graph: the small helper every differentiable op uses.
//
//   absl::StatusOr<Variable> Exp(const Variable& x) {
//     ZS_ASSIGN_OR_RETURN(Tensor y, Unary(UnaryOp::kExp, x.value()));
//     // Saves y (the only tensor the backward reads): captured by the lambda.
//     return Record("Exp", y, {&x}, [y](std::vector<Tensor>& g) -> GradsOr {
//       ZS_ASSIGN_OR_RETURN(Tensor dx, Binary(BinaryOp::kMul, g[0], y));
//       return Grads{dx};
//     });
//   }
//
// When grad mode is off or no input requires a gradient, Record returns a
// plain leaf and the lambda (with everything it saved) is dropped at once.
// Saved tensors are the lambda's captures; after a backward without
// retain_graph the lambda is destroyed, freeing them.
#ifndef ZEROSHARD_AUTOGRAD_FUNCTION_H_
#define ZEROSHARD_AUTOGRAD_FUNCTION_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/autograd/node.h"
#include "zeroshard/autograd/variable.h"

namespace zeroshard::autograd {

using Grads = std::vector<Tensor>;
using GradsOr = absl::StatusOr<Grads>;
// Receives the gradients of the op's outputs; returns those of its inputs.
using BackwardFn = std::function<GradsOr(std::vector<Tensor>& grads)>;

class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, int num_outputs, BackwardFn fn)
      : Node(num_outputs), name_(std::move(name)), fn_(std::move(fn)) {}
  absl::string_view name() const override { return name_; }
  absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) override;
  void ReleaseSaved() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// True when an op on `inputs` must be recorded.
bool ShouldRecord(std::initializer_list<const Variable*> inputs);

// The output of a one-output op.
Variable Record(std::string name, Tensor value, std::initializer_list<const Variable*> inputs,
                BackwardFn fn);
// The outputs of a multi-output op (gradients of unused outputs arrive undefined).
std::vector<Variable> RecordMulti(std::string name, std::vector<Tensor> values,
                                  std::initializer_list<const Variable*> inputs, BackwardFn fn);
std::vector<Variable> RecordMulti(std::string name, std::vector<Tensor> values,
                                  const std::vector<const Variable*>& inputs, BackwardFn fn);
bool ShouldRecord(const std::vector<const Variable*>& inputs);

// OK when an operand of `op` has a value. A Variable() has none ("undefined
// input"); a Variable with state but no value is a parameter not yet
// materialised, or a sharded unit's parameter read while the unit is not
// gathered (its module's Forward called directly instead of through
// operator(): Note [Module forward] in autograd/nn/module.h), and the error
// names it.
absl::Status CheckHasValue(const Variable& v, absl::string_view op);
// For an optional operand (a bias, a norm's weight): Variable() means absent
// and is OK; a Variable with state must have a value (as CheckHasValue), so a
// parameter without one is an error rather than read as absent.
absl::Status CheckAbsentOrHasValue(const Variable& v, absl::string_view op);

}  // namespace zeroshard::autograd

#endif  // ZEROSHARD_AUTOGRAD_FUNCTION_H_
