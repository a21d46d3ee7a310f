#include "zeroshard/autograd/function.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/grad_mode.h"

namespace zeroshard::autograd {

absl::StatusOr<std::vector<Tensor>> FunctionNode::Apply(std::vector<Tensor> grads) {
  if (!fn_) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": its saved tensors were freed by an earlier backward; pass retain_graph = true "
               "to the first backward to run it again"));
  }
  return fn_(grads);
}

bool ShouldRecord(const std::vector<const Variable*>& inputs) {
  if (!GradMode::IsEnabled()) return false;
  for (const Variable* v : inputs) {
    if (v != nullptr && v->requires_grad()) return true;
  }
  return false;
}

bool ShouldRecord(std::initializer_list<const Variable*> inputs) {
  return ShouldRecord(std::vector<const Variable*>(inputs));
}

absl::Status CheckHasValue(const Variable& v, absl::string_view op) {
  if (v.defined()) return absl::OkStatus();
  if (v.impl() == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined input"));
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": operand \"", v.name(), "\" has no value; expected a materialised parameter. A sharded unit's ",
      "parameters have values only while it is gathered: call its module through operator(), not Forward ",
      "(Note [Module forward] in autograd/nn/module.h)"));
}

absl::Status CheckAbsentOrHasValue(const Variable& v, absl::string_view op) {
  return v.impl() == nullptr ? absl::OkStatus() : CheckHasValue(v, op);
}

namespace {
std::vector<Edge> EdgesOf(const std::vector<const Variable*>& inputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Variable* v : inputs) edges.push_back(v != nullptr ? GradientEdge(*v) : Edge{});
  return edges;
}
}  // namespace

Variable Record(std::string name, Tensor value, std::initializer_list<const Variable*> inputs,
                BackwardFn fn) {
  if (!ShouldRecord(inputs)) return Variable(std::move(value));
  auto node = std::make_shared<FunctionNode>(std::move(name), 1, std::move(fn));
  node->set_next_edges(EdgesOf(std::vector<const Variable*>(inputs)));
  return Variable::FromNode(std::move(value), std::move(node), 0);
}

std::vector<Variable> RecordMulti(std::string name, std::vector<Tensor> values,
                                  std::initializer_list<const Variable*> inputs, BackwardFn fn) {
  return RecordMulti(std::move(name), std::move(values), std::vector<const Variable*>(inputs),
                     std::move(fn));
}

std::vector<Variable> RecordMulti(std::string name, std::vector<Tensor> values,
                                  const std::vector<const Variable*>& inputs, BackwardFn fn) {
  std::vector<Variable> out;
  out.reserve(values.size());
  if (!ShouldRecord(inputs)) {
    for (Tensor& v : values) out.emplace_back(std::move(v));
    return out;
  }
  auto node = std::make_shared<FunctionNode>(std::move(name), static_cast<int>(values.size()),
                                             std::move(fn));
  node->set_next_edges(EdgesOf(inputs));
  for (size_t i = 0; i < values.size(); ++i) {
    out.push_back(Variable::FromNode(std::move(values[i]), node, static_cast<int>(i)));
  }
  return out;
}

}  // namespace zeroshard::autograd
