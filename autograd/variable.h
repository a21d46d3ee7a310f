// Variable: a Tensor that autograd tracks. The value, whether it requires a
// gradient, the gradient of a leaf, the node that produced a non-leaf, and hooks.
//
//   Variable w(Tensor::Zeros({4, 3}, DType::kF32).value(), /*requires_grad=*/true);
//   ZS_ASSIGN_OR_RETURN(Variable y, ops::MatMul(x, w));
//   ZS_ASSIGN_OR_RETURN(Variable loss, ops::MeanAll(y));
//   ZS_RETURN_IF_ERROR(Backward(loss));
//   w.grad();                           // d loss / d w, accumulated (+=) across backwards
//
// Handle semantics: copies share one state (like Tensor), so the methods that
// change that state (set_value, set_grad, hooks) are const on the handle. A leaf is a Variable
// made by the user (parameters, inputs); every op result that requires a
// gradient is a non-leaf with a grad_fn (see node.h). Only leaves keep .grad().
//
// Hooks (what the sharding runtime builds on):
// - AddGradHook(fn): runs when the gradient with respect to this variable has
//   been computed, before it is used (for a leaf: before accumulation); the hook
//   may return a replacement gradient. FSDP's pre-backward hook registers one on
//   each unit's forward outputs.
// - AddPostAccumulateGradHook(fn) (leaves): runs after the gradient has been
//   added into .grad(); the sharding runtime counts a unit's landed gradients
//   and starts its reduce-scatter from here.
// - set_grad(view): gives a leaf a gradient buffer before backward, e.g. a view
//   into one flat gradient buffer; accumulation then adds into it in place, so
//   gradients land directly in the flat buffer.
#ifndef ZEROSHARD_AUTOGRAD_VARIABLE_H_
#define ZEROSHARD_AUTOGRAD_VARIABLE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::autograd {

class Node;
class Variable;

// Receives the gradient w.r.t. a variable; returns the gradient to use instead
// (return `grad` itself to only observe).
using GradHook = std::function<absl::StatusOr<Tensor>(const Tensor& grad)>;
// Runs after a leaf's gradient has been accumulated into its .grad().
using PostAccumulateGradHook = std::function<absl::Status(const Variable& leaf)>;

// The shared state behind Variable handles.
struct VariableImpl {
  Tensor value;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;              // which output of grad_fn this is
  std::string name;
  // Leaves only: the node that accumulates into `grad` while a graph refers to it.
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::pair<int, GradHook>> grad_hooks;  // leaves (non-leaves keep theirs on grad_fn)
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;
};

class Variable {
 public:
  Variable() = default;
  // A leaf.
  explicit Variable(Tensor value, bool requires_grad = false);
  // A non-leaf: output `output_nr` of `grad_fn` (used by ops).
  static Variable FromNode(Tensor value, std::shared_ptr<Node> grad_fn, int output_nr);
  // Another handle to existing state (the engine hands hooks their leaf this way).
  static Variable FromImpl(std::shared_ptr<VariableImpl> impl);

  bool defined() const { return impl_ != nullptr && impl_->value.defined(); }
  const Tensor& value() const;
  // Points this variable at another tensor (e.g. a parameter at its slice of a
  // gathered flat buffer). Leaves only: a non-leaf's value is what its node saw.
  absl::Status set_value(Tensor value) const;

  const Shape& shape() const { return value().shape(); }
  int64_t dim() const { return value().dim(); }
  int64_t size(int64_t d) const { return value().size(d); }
  int64_t numel() const { return value().numel(); }
  DType dtype() const { return value().dtype(); }
  Device device() const { return value().device(); }

  bool requires_grad() const { return impl_ != nullptr && impl_->requires_grad; }
  // Leaves only; an error for a non-leaf.
  absl::Status set_requires_grad(bool requires_grad) const;
  bool is_leaf() const { return impl_ == nullptr || impl_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const { return impl_ ? impl_->output_nr : 0; }

  // The accumulated gradient of a leaf (undefined until a backward reaches it).
  const Tensor& grad() const;
  // Installs a gradient buffer (same shape as the value); later backward passes add into it.
  absl::Status set_grad(Tensor grad) const;
  // Forgets the gradient (the next backward allocates a fresh one).
  void reset_grad() const;

  // The same value, cut from the graph: a leaf that does not require grad.
  Variable detach() const;

  // Hook registration; returns a handle for RemoveHook.
  // Hooks live in the shared state, so registering through a const handle is fine.
  int AddGradHook(GradHook hook) const;
  int AddPostAccumulateGradHook(PostAccumulateGradHook hook) const;
  void RemoveHook(int handle) const;

  const std::string& name() const;
  void set_name(std::string name) const;

  // Identity: two handles of one variable.
  bool SameAs(const Variable& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<VariableImpl> impl_;
};

}  // namespace zeroshard::autograd

#endif  // ZEROSHARD_AUTOGRAD_VARIABLE_H_
