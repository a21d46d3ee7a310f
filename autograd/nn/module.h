// Module: a tree of named children, parameters and buffers (dotted names as
// PyTorch's), train/eval mode, forward hooks, state dicts, and deferred
// initialisation.
//
//   class Mlp : public nn::UnaryModule {
//    public:
//     Mlp(int64_t c) : UnaryModule("Mlp") {
//       fc_ = RegisterModule("c_fc", std::make_shared<nn::Linear>(c, 4 * c));
//       proj_ = RegisterModule("c_proj", std::make_shared<nn::Linear>(4 * c, c));
//     }
//     absl::StatusOr<Variable> Forward(const Variable& x) override { ... }
//   };
//   auto mlp = std::make_shared<Mlp>(64);    // shapes only: no memory yet
//   ZS_RETURN_IF_ERROR(mlp->Materialize(/*seed=*/1337));   // allocate and initialise
//   mlp->NamedParameters();                  // {"c_fc.weight", ...}, registration order
//
// Parameters are leaf Variables that require grad. Until Materialize() they
// have a shape, dtype and InitSpec but no storage; initial values depend only
// on (seed, full dotted name, element index) (autograd/nn/init.h), so a shard
// can be initialised alone. A parameter can be tied to another (GPT's lm_head
// to wte): both names refer to one Variable; NamedParameters() lists it once,
// under the first name, while StateDict() lists both names (PyTorch's rule).
//
// Hooks: pre-forward hooks run before Forward, post-forward hooks after it
// with its outputs (the sharding runtime gathers a unit's parameters in the
// first and frees them / registers pre-backward hooks in the second).
#ifndef ZEROSHARD_AUTOGRAD_NN_MODULE_H_
#define ZEROSHARD_AUTOGRAD_NN_MODULE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/autograd/nn/init.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::nn {

using autograd::Variable;

// A named tensor in a state dict, in a fixed order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct ParameterSlot {
  std::string name;  // local name ("weight")
  Variable var;      // a leaf; var.value() is undefined until materialised
  Shape shape;
  DType dtype = DType::kF32;
  InitSpec init;
};

struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // expected by the module, absent from the dict
  std::vector<std::string> unexpected_keys;  // in the dict, unknown to the module
};

class Module {
 public:
  using PreForwardHook = std::function<absl::Status(Module&)>;
  using PostForwardHook = std::function<absl::Status(Module&, std::vector<Variable>& outputs)>;

  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // "Linear", "Block", ...: what wrap policies and activation checkpointing match on.
  const std::string& type_name() const { return type_name_; }

  // ---------------------------------------------------------------- traversal
  // (dotted name, module) for this module ("" or `prefix`) and all descendants, pre-order.
  std::vector<std::pair<std::string, Module*>> NamedModules(const std::string& prefix = "");
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> NamedChildren() const;
  // Every parameter once (a tied one under its first name), registration order.
  std::vector<std::pair<std::string, Variable>> NamedParameters(const std::string& prefix = "");
  // Every parameter slot with its full name, tied parameters under each name.
  std::vector<std::pair<std::string, ParameterSlot*>> NamedParameterSlots(const std::string& prefix = "");
  std::vector<std::pair<std::string, Tensor>> NamedBuffers(const std::string& prefix = "");
  // The stored buffers themselves, so that an owner can replace one (the
  // sharding runtime moves them to the rank's device); modules read their
  // buffers through FindBuffer, never through a copy of the handle.
  std::vector<std::pair<std::string, Tensor*>> NamedBufferSlots(const std::string& prefix = "");
  // Number of parameter elements, tied ones counted once.
  int64_t NumParameters();
  std::vector<ParameterSlot>& parameter_slots() { return params_; }

  // ---------------------------------------------------------------- mode
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool is_training() const { return training_; }
  // Calls fn on every descendant, then on this module (PyTorch's order).
  void Apply(const std::function<void(Module&)>& fn);

  // ---------------------------------------------------------------- initialisation
  // True when every parameter has storage.
  bool is_materialized();
  // Allocates (from `allocator`, nullptr = the default CPU allocator) and
  // initialises every parameter that has no storage, by its full dotted name
  // relative to this module. Tied parameters are initialised once.
  absl::Status Materialize(uint64_t seed, Allocator* allocator = nullptr);

  // ---------------------------------------------------------------- state dicts
  // Parameters (tied ones under every name) and buffers, by full name, in order.
  NamedTensors StateDict(const std::string& prefix = "");
  // Copies values by name (converting dtype). A shape mismatch is always an
  // error; with `strict`, so are missing and unexpected keys (all listed).
  // A tied parameter is found under any of its names (a file written the
  // Hugging Face way holds only "transformer.wte.weight"); its other names are
  // then not missing; names present together must hold equal values
  // (CheckTiedValuesEqual).
  // Unmaterialised parameters are allocated to hold the loaded values.
  absl::StatusOr<LoadStateDictResult> LoadStateDict(const NamedTensors& state, bool strict = true);

  // ---------------------------------------------------------------- hooks
  int AddPreForwardHook(PreForwardHook hook);
  int AddPostForwardHook(PostForwardHook hook);
  void RemoveHook(int handle);
  absl::Status RunPreForwardHooks();
  absl::Status RunPostForwardHooks(std::vector<Variable>& outputs);
  // The inputs of the forward running now, for hooks to read: set by
  // UnaryModule::operator() from before its pre-forward hooks to after its
  // post-forward hooks, then cleared (no graph is kept alive); nullptr outside
  // that window and for modules whose forward does not record them. The
  // sharding runtime watches their gradients to free frozen parameters early
  // (Note [Frozen parameters] in sharding/sharded_model.h).
  const std::vector<Variable>* forward_inputs() const { return recording_inputs_ ? &forward_inputs_ : nullptr; }

  // ---------------------------------------------------------------- registration
  // Registers a parameter with a shape and an initialiser (no storage yet).
  Variable RegisterParameter(std::string name, Shape shape, InitSpec init, DType dtype = DType::kF32);
  // Registers a buffer (state that is saved but not trained).
  void RegisterBuffer(std::string name, Tensor value);
  template <typename M>
  std::shared_ptr<M> RegisterModule(std::string name, std::shared_ptr<M> child) {
    children_.emplace_back(std::move(name), child);
    return child;
  }
  // Makes parameter `name` of this module the same Variable as `target` (tying);
  // shapes and dtypes must agree.
  absl::Status TieParameter(const std::string& name, const ParameterSlot& target);
  // Looks up a local parameter slot.
  ParameterSlot* FindParameter(const std::string& name);
  // Looks up a local buffer (nullptr when there is none of that name).
  Tensor* FindBuffer(const std::string& name);

 private:
  std::string type_name_;
  bool training_ = true;
  std::vector<ParameterSlot> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<int, PreForwardHook>> pre_hooks_;
  std::vector<std::pair<int, PostForwardHook>> post_hooks_;

 protected:
  std::vector<Variable> forward_inputs_;
  bool recording_inputs_ = false;
};

// A module with one input and one output: operator() runs the hooks around Forward.
class UnaryModule : public Module {
 public:
  using Module::Module;
  absl::StatusOr<Variable> operator()(const Variable& x);
  virtual absl::StatusOr<Variable> Forward(const Variable& x) = 0;
};

// The rule for a tied parameter found under two names: same shape and equal
// values (NaN equals NaN), else an InvalidArgument naming both and the first
// element that differs. `where` starts the message.
absl::Status CheckTiedValuesEqual(const std::string& where, const std::string& name_a, const Tensor& a,
                                  const std::string& name_b, const Tensor& b);

// "a.b" from prefix "a" and name "b"; just "b" when the prefix is empty.
std::string JoinName(const std::string& prefix, const std::string& name);

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_MODULE_H_
