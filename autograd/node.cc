#include "zeroshard/autograd/node.h"

#include <atomic>
#include <limits>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
std::atomic<int> next_hook_handle{1};
}  // namespace

int NextHookHandle() { return next_hook_handle.fetch_add(1); }

Node::Node(int num_outputs) : num_outputs_(num_outputs), sequence_nr_(next_sequence_nr.fetch_add(1)) {}

AccumulateGrad::AccumulateGrad(std::shared_ptr<VariableImpl> leaf) : leaf_(std::move(leaf)) {
  set_sequence_nr(std::numeric_limits<uint64_t>::max());
}

absl::StatusOr<std::vector<Tensor>> AccumulateGrad::Apply(std::vector<Tensor> grads) {
  Tensor g = std::move(grads[0]);
  for (auto& [handle, hook] : leaf_->grad_hooks) {
    ZS_ASSIGN_OR_RETURN(g, hook(g));
  }
  if (g.defined()) {
    if (g.shape() != leaf_->value.shape()) {
      return absl::InternalError(absl::StrCat("AccumulateGrad: gradient of shape ",
                                              ShapeToString(g.shape()), " for '", leaf_->name,
                                              "' of shape ", ShapeToString(leaf_->value.shape())));
    }
    if (!leaf_->grad.defined()) {
      // A private copy: the incoming tensor may be shared with other consumers.
      ZS_ASSIGN_OR_RETURN(leaf_->grad, g.Clone());
    } else {
      ZS_RETURN_IF_ERROR(Add(leaf_->grad, g, leaf_->grad));  // in place: may be a flat-buffer view
    }
  }
  if (!leaf_->post_accumulate_hooks.empty()) {
    const Variable leaf_handle = Variable::FromImpl(leaf_);
    for (auto& [handle, hook] : leaf_->post_accumulate_hooks) ZS_RETURN_IF_ERROR(hook(leaf_handle));
  }
  return std::vector<Tensor>{};
}

Edge GradientEdge(const Variable& v) {
  if (!v.defined() || !v.requires_grad()) return Edge{};
  if (!v.is_leaf()) return Edge{v.grad_fn(), v.output_nr()};
  const std::shared_ptr<VariableImpl>& impl = v.impl();
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl);
    impl->grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

}  // namespace zeroshard::autograd
