#include "zeroshard/autograd/nn/module.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/autograd/node.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::nn {

std::string JoinName(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

// ================================================================ traversal

std::vector<std::pair<std::string, Module*>> Module::NamedModules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out;
  out.emplace_back(prefix, this);
  for (auto& [name, child] : children_) {
    auto sub = child->NamedModules(JoinName(prefix, name));
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::NamedChildren() const {
  return children_;
}

std::vector<std::pair<std::string, ParameterSlot*>> Module::NamedParameterSlots(
    const std::string& prefix) {
  std::vector<std::pair<std::string, ParameterSlot*>> out;
  for (auto& [mname, m] : NamedModules(prefix)) {
    for (ParameterSlot& p : m->params_) out.emplace_back(JoinName(mname, p.name), &p);
  }
  return out;
}

std::vector<std::pair<std::string, Variable>> Module::NamedParameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Variable>> out;
  std::unordered_set<const autograd::VariableImpl*> seen;
  for (auto& [name, slot] : NamedParameterSlots(prefix)) {
    if (seen.insert(slot->var.impl().get()).second) out.emplace_back(name, slot->var);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::NamedBuffers(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [mname, m] : NamedModules(prefix)) {
    for (auto& [bname, t] : m->buffers_) out.emplace_back(JoinName(mname, bname), t);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::NamedBufferSlots(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [mname, m] : NamedModules(prefix)) {
    for (auto& [bname, t] : m->buffers_) out.emplace_back(JoinName(mname, bname), &t);
  }
  return out;
}

int64_t Module::NumParameters() {
  int64_t n = 0;
  std::unordered_set<const autograd::VariableImpl*> seen;
  for (auto& [name, slot] : NamedParameterSlots()) {
    if (seen.insert(slot->var.impl().get()).second) n += NumElements(slot->shape);
  }
  return n;
}

void Module::Train(bool on) {
  Apply([on](Module& m) { m.training_ = on; });
}

void Module::Apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->Apply(fn);
  fn(*this);
}

// ================================================================ initialisation

bool Module::is_materialized() {
  for (auto& [name, slot] : NamedParameterSlots()) {
    if (!slot->var.defined()) return false;
  }
  return true;
}

absl::Status Module::Materialize(uint64_t seed, Allocator* allocator) {
  std::unordered_set<const autograd::VariableImpl*> done;
  for (auto& [name, slot] : NamedParameterSlots()) {
    if (!done.insert(slot->var.impl().get()).second) continue;  // tied: initialised once
    if (slot->var.defined()) continue;
    ZS_ASSIGN_OR_RETURN(Tensor value, Tensor::Empty(slot->shape, slot->dtype, allocator));
    ZS_RETURN_IF_ERROR(FillInit(slot->init, seed, name, 0, value));
    ZS_RETURN_IF_ERROR(slot->var.set_value(std::move(value)));
  }
  return absl::OkStatus();
}

// ================================================================ state dicts

NamedTensors Module::StateDict(const std::string& prefix) {
  NamedTensors out;
  for (auto& [mname, m] : NamedModules(prefix)) {
    for (ParameterSlot& p : m->params_) out.emplace_back(JoinName(mname, p.name), p.var.value());
    for (auto& [bname, t] : m->buffers_) out.emplace_back(JoinName(mname, bname), t);
  }
  return out;
}

absl::Status CheckTiedValuesEqual(const std::string& where, const std::string& name_a, const Tensor& a,
                                  const std::string& name_b, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": tied parameter names \"", name_a, "\" and \"", name_b, "\" are both present with different shapes, ",
        ShapeToString(a.shape()), " and ", ShapeToString(b.shape()), "; expected one tensor under both names"));
  }
  ZS_ASSIGN_OR_RETURN(std::vector<double> va, a.ToVector<double>());
  ZS_ASSIGN_OR_RETURN(std::vector<double> vb, b.ToVector<double>());
  for (size_t i = 0; i < va.size(); ++i) {
    if (va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": tied parameter names \"", name_a, "\" and \"", name_b, "\" are both present with different values (",
        "element ", i, ": ", va[i], " vs ", vb[i], "); expected one tensor under both names (or only one of them)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadStateDictResult> Module::LoadStateDict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  LoadStateDictResult result;
  std::set<std::string> used;
  std::vector<std::string> shape_errors;
  // Targets: parameters (a tied one once, with all its names) and buffers.
  struct Target {
    std::vector<std::string> names;
    ParameterSlot* slot = nullptr;
    Tensor* buffer = nullptr;
    const Tensor* source = nullptr;  // the first of its names present in `state`
  };
  std::vector<Target> targets;
  std::map<const autograd::VariableImpl*, size_t> target_of;
  for (auto& [mname, m] : NamedModules()) {
    for (ParameterSlot& p : m->params_) {
      auto [it, fresh] = target_of.emplace(p.var.impl().get(), targets.size());
      if (fresh) targets.push_back({{}, &p, nullptr});
      targets[it->second].names.push_back(JoinName(mname, p.name));
    }
    for (auto& [bname, t] : m->buffers_) targets.push_back({{JoinName(mname, bname)}, nullptr, &t});
  }
  // A tied parameter is found under any of its names; names given together must agree.
  for (Target& t : targets) {
    std::string source_name;
    for (const std::string& name : t.names) {
      auto it = given.find(name);
      if (it == given.end()) continue;
      used.insert(name);
      const Shape& want = t.slot ? t.slot->shape : t.buffer->shape();
      if (it->second->shape() != want) {
        shape_errors.push_back(absl::StrCat(name, ": expected ", ShapeToString(want), ", found ",
                                            ShapeToString(it->second->shape())));
        continue;
      }
      if (t.source == nullptr) {
        t.source = it->second;
        source_name = name;
        continue;
      }
      ZS_RETURN_IF_ERROR(CheckTiedValuesEqual("LoadStateDict", source_name, *t.source, name, *it->second));
    }
    if (t.source == nullptr) {
      result.missing_keys.insert(result.missing_keys.end(), t.names.begin(), t.names.end());
    }
  }
  for (const auto& [name, t] : state) {
    if (!used.count(name)) result.unexpected_keys.push_back(name);
  }
  if (!shape_errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadStateDict: shape mismatch for ",
                                                   absl::StrJoin(shape_errors, "; ")));
  }
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadStateDict (strict): missing keys [", absl::StrJoin(result.missing_keys, ", "),
        "], unexpected keys [", absl::StrJoin(result.unexpected_keys, ", "), "]"));
  }
  for (const Target& t : targets) {
    if (t.source == nullptr) continue;
    if (t.slot != nullptr) {
      if (!t.slot->var.defined()) {
        ZS_ASSIGN_OR_RETURN(Tensor value, Tensor::Empty(t.slot->shape, t.slot->dtype));
        ZS_RETURN_IF_ERROR(t.slot->var.set_value(std::move(value)));
      }
      ZS_RETURN_IF_ERROR(t.slot->var.value().CopyFrom(*t.source));
    } else {
      ZS_RETURN_IF_ERROR(t.buffer->CopyFrom(*t.source));
    }
  }
  return result;
}

// ================================================================ hooks

int Module::AddPreForwardHook(PreForwardHook hook) {
  const int h = autograd::NextHookHandle();
  pre_hooks_.emplace_back(h, std::move(hook));
  return h;
}

int Module::AddPostForwardHook(PostForwardHook hook) {
  const int h = autograd::NextHookHandle();
  post_hooks_.emplace_back(h, std::move(hook));
  return h;
}

void Module::RemoveHook(int handle) {
  auto drop = [handle](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& e) { return e.first == handle; }),
            v.end());
  };
  drop(pre_hooks_);
  drop(post_hooks_);
}

absl::Status Module::RunPreForwardHooks() {
  for (auto& [h, hook] : pre_hooks_) ZS_RETURN_IF_ERROR(hook(*this));
  return absl::OkStatus();
}

absl::Status Module::RunPostForwardHooks(std::vector<Variable>& outputs) {
  const size_t n = outputs.size();
  for (auto& [h, hook] : post_hooks_) {
    ZS_RETURN_IF_ERROR(hook(*this, outputs));
    if (outputs.size() != n) {
      return absl::FailedPreconditionError(absl::StrCat(
          type_name_, ": a post-forward hook changed the number of forward outputs from ", n, " to ", outputs.size(),
          "; a hook may replace outputs, not add or remove them (Note [Module forward] in autograd/nn/module.h)"));
    }
  }
  return absl::OkStatus();
}

// ================================================================ registration

Variable Module::RegisterParameter(std::string name, Shape shape, InitSpec init, DType dtype) {
  Variable v(Tensor(), /*requires_grad=*/true);
  v.set_name(name);
  params_.push_back(ParameterSlot{std::move(name), v, std::move(shape), dtype, init});
  return v;
}

void Module::RegisterBuffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), std::move(value));
}

Tensor* Module::FindBuffer(const std::string& name) {
  for (auto& [bname, t] : buffers_) {
    if (bname == name) return &t;
  }
  return nullptr;
}

ParameterSlot* Module::FindParameter(const std::string& name) {
  for (ParameterSlot& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::Status Module::TieParameter(const std::string& name, const ParameterSlot& target) {
  ParameterSlot* slot = FindParameter(name);
  if (slot == nullptr) {
    return absl::NotFoundError(absl::StrCat("TieParameter: ", type_name_, " has no parameter '", name, "'"));
  }
  if (slot->shape != target.shape || slot->dtype != target.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TieParameter: '", name, "' is ", ShapeToString(slot->shape), " ", DTypeName(slot->dtype),
        " but the target '", target.name, "' is ", ShapeToString(target.shape), " ",
        DTypeName(target.dtype)));
  }
  slot->var = target.var;
  slot->init = target.init;
  return absl::OkStatus();
}

}  // namespace zeroshard::nn
