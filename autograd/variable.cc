#include "zeroshard/autograd/variable.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/node.h"

namespace zeroshard::autograd {

namespace {
const Tensor& UndefinedTensor() {
  static const Tensor* const t = new Tensor();
  return *t;
}
const std::shared_ptr<Node>& NullNode() {
  static const std::shared_ptr<Node>* const n = new std::shared_ptr<Node>();
  return *n;
}
const std::string& EmptyName() {
  static const std::string* const s = new std::string();
  return *s;
}
}  // namespace

Variable::Variable(Tensor value, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

Variable Variable::FromNode(Tensor value, std::shared_ptr<Node> grad_fn, int output_nr) {
  Variable v;
  v.impl_ = std::make_shared<VariableImpl>();
  v.impl_->value = std::move(value);
  v.impl_->requires_grad = grad_fn != nullptr;
  v.impl_->grad_fn = std::move(grad_fn);
  v.impl_->output_nr = output_nr;
  return v;
}

Variable Variable::FromImpl(std::shared_ptr<VariableImpl> impl) {
  Variable v;
  v.impl_ = std::move(impl);
  return v;
}

const Tensor& Variable::value() const { return impl_ ? impl_->value : UndefinedTensor(); }

absl::Status Variable::set_value(Tensor value) const {
  if (!impl_) return absl::FailedPreconditionError("set_value on an undefined Variable");
  if (!is_leaf()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "set_value: '", impl_->name, "' is the output of ", "an op; only leaves can be repointed"));
  }
  impl_->value = std::move(value);
  return absl::OkStatus();
}

absl::Status Variable::set_requires_grad(bool requires_grad) const {
  if (!impl_) return absl::FailedPreconditionError("set_requires_grad on an undefined Variable");
  if (!is_leaf()) {
    return absl::FailedPreconditionError(
        "set_requires_grad: only leaves can change requires_grad (use detach() on an op output)");
  }
  impl_->requires_grad = requires_grad;
  return absl::OkStatus();
}

const std::shared_ptr<Node>& Variable::grad_fn() const { return impl_ ? impl_->grad_fn : NullNode(); }

const Tensor& Variable::grad() const { return impl_ ? impl_->grad : UndefinedTensor(); }

absl::Status Variable::set_grad(Tensor grad) const {
  if (!impl_) return absl::FailedPreconditionError("set_grad on an undefined Variable");
  if (grad.defined() && grad.shape() != impl_->value.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "set_grad: gradient buffer of shape ", ShapeToString(grad.shape()), " for '", impl_->name,
        "' of shape ", ShapeToString(impl_->value.shape())));
  }
  impl_->grad = std::move(grad);
  return absl::OkStatus();
}

void Variable::reset_grad() const {
  if (impl_) impl_->grad = Tensor();
}

Variable Variable::detach() const {
  if (!impl_) return Variable();
  Variable v(impl_->value, /*requires_grad=*/false);
  v.impl_->name = impl_->name;
  return v;
}

int Variable::AddGradHook(GradHook hook) const {
  const int handle = NextHookHandle();
  if (is_leaf()) {
    impl_->grad_hooks.emplace_back(handle, std::move(hook));
  } else {
    impl_->grad_fn->output_hooks().push_back({impl_->output_nr, {handle, std::move(hook)}});
  }
  return handle;
}

int Variable::AddPostAccumulateGradHook(PostAccumulateGradHook hook) const {
  const int handle = NextHookHandle();
  impl_->post_accumulate_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::RemoveHook(int handle) const {
  if (!impl_) return;
  auto drop = [handle](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& e) { return e.first == handle; }),
            v.end());
  };
  drop(impl_->grad_hooks);
  drop(impl_->post_accumulate_hooks);
  if (impl_->grad_fn) {
    auto& hooks = impl_->grad_fn->output_hooks();
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [&](const auto& e) { return e.second.first == handle; }),
                hooks.end());
  }
}

const std::string& Variable::name() const { return impl_ ? impl_->name : EmptyName(); }

void Variable::set_name(std::string name) const {
  if (impl_) impl_->name = std::move(name);
}

}  // namespace zeroshard::autograd
