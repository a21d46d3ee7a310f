// Module: a tree of named children, parameters and buffers (dotted names as
// PyTorch's), train/eval mode, forward hooks, state dicts, and deferred
// initialisation. ForwardModule<Out(In...)>: a module whose forward has that
// signature, called through operator(), which runs the hooks around it.
//
//   class Mlp : public nn::UnaryModule {     // = ForwardModule<Variable(Variable)>
//    public:
//     Mlp(int64_t c) : UnaryModule("Mlp") {
//       fc_ = RegisterModule("c_fc", std::make_shared<nn::Linear>(c, 4 * c));
//       proj_ = RegisterModule("c_proj", std::make_shared<nn::Linear>(4 * c, c));
//     }
//    protected:
//     absl::StatusOr<Variable> Forward(const Variable& x) override { ... }
//   };
//   auto mlp = std::make_shared<Mlp>(64);    // shapes only: no memory yet
//   ZS_RETURN_IF_ERROR(mlp->Materialize(/*seed=*/1337));   // allocate and initialise
//   mlp->NamedParameters();                  // {"c_fc.weight", ...}, registration order
//   ZS_ASSIGN_OR_RETURN(Variable y, (*mlp)(x));            // hooks, Forward, hooks
//
//   // Any signature: two inputs and a flag in, a Variable out.
//   class CrossBlock : public nn::ForwardModule<Variable(Variable, Variable, bool)> { ... };
//   ZS_ASSIGN_OR_RETURN(Variable y, (*block)(x, context, /*causal=*/true));
//
// Parameters are leaf Variables that require grad. Until Materialize() they
// have a shape, dtype and InitSpec but no storage; initial values depend only
// on (seed, full dotted name, element index) (autograd/nn/init.h), so a shard
// can be initialised alone. A parameter can be tied to another (GPT's lm_head
// to wte): both names refer to one Variable; NamedParameters() lists it once,
// under the first name, while StateDict() lists both names (PyTorch's rule).
//
// Hooks: pre-forward hooks run before Forward, post-forward hooks after it
// with the Variables among its outputs (the sharding runtime gathers a unit's
// parameters in the first and frees them / registers pre-backward hooks in the
// second). Note [Module forward] below says what runs in which order, which
// arguments and results the hooks see, and why Forward must be called through
// operator().
#ifndef ZEROSHARD_AUTOGRAD_NN_MODULE_H_
#define ZEROSHARD_AUTOGRAD_NN_MODULE_H_

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <tuple>
#include <type_traits>
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

// ---------------------------------------------------------------- the Variables in a value
// Where a forward's Variables are found (Note [Module forward]): calls f(v) for
// each Variable v held by `value`, in order, recursing through
//   Variable                        itself (an undefined one too: callers skip it)
//   a type with a member            what that member visits, e.g. LmOutput's
//     template <typename F> void ForEachVariable(F&& f) { f(logits); f(loss); }
//   std::optional                   its value, if any
//   std::pair, std::tuple           each element
//   ranges (std::vector, std::array, std::map, absl::Span, ...)   each element
// and nothing else: numbers, flags, Tensors (token ids, masks), strings and
// any other type hold no Variable by this rule. With a const `value`, f gets
// const Variables. (A member ForEachVariable recursing into a container member
// calls nn::ForEachVariable(member, f), qualified.)
template <typename T, typename F>
void ForEachVariable(T& value, F&& f);

namespace module_internal {

template <typename T>
concept HasForEachVariable = requires(T& t, void (*f)(Variable&)) { t.ForEachVariable(f); };
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <typename T>
struct IsTuple : std::false_type {};
template <typename... T>
struct IsTuple<std::tuple<T...>> : std::true_type {};
template <typename A, typename B>
struct IsTuple<std::pair<A, B>> : std::true_type {};

// Whether a T can hold a Variable, by the rules above (false: visiting it does nothing).
template <typename T>
constexpr bool HoldsVariables() {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, Variable> || HasForEachVariable<U>) {
    return true;
  } else if constexpr (IsOptional<U>::value) {
    return HoldsVariables<typename U::value_type>();
  } else if constexpr (IsTuple<U>::value) {
    return []<size_t... I>(std::index_sequence<I...>) {
      return (HoldsVariables<std::tuple_element_t<I, U>>() || ...);
    }(std::make_index_sequence<std::tuple_size_v<U>>());
  } else if constexpr (std::ranges::range<U>) {
    using Element = std::ranges::range_value_t<U>;
    if constexpr (std::is_same_v<std::remove_cv_t<Element>, U>) {
      return false;  // a range of itself (std::filesystem::path)
    } else {
      return HoldsVariables<Element>();
    }
  } else {
    return false;
  }
}

}  // namespace module_internal

template <typename T, typename F>
void ForEachVariable(T& value, F&& f) {
  using U = std::remove_cv_t<T>;
  if constexpr (!module_internal::HoldsVariables<U>()) {
    return;
  } else if constexpr (std::is_same_v<U, Variable>) {
    f(value);
  } else if constexpr (module_internal::HasForEachVariable<U>) {
    if constexpr (std::is_const_v<T>) {
      // One member serves results (written back) and arguments (only read):
      // called on the argument, it hands f nothing but const Variables.
      const_cast<U&>(value).ForEachVariable([&f](Variable& v) { f(std::as_const(v)); });
    } else {
      value.ForEachVariable(f);
    }
  } else if constexpr (module_internal::IsOptional<U>::value) {
    if (value.has_value()) ForEachVariable(*value, f);
  } else if constexpr (module_internal::IsTuple<U>::value) {
    std::apply([&f](auto&... element) { (ForEachVariable(element, f), ...); }, value);
  } else {
    for (auto& element : value) ForEachVariable(element, f);
  }
}

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
  // Hooks run in registration order (Note [Module forward]); a post-forward
  // hook may replace the outputs it is given, not add or remove any.
  int AddPreForwardHook(PreForwardHook hook);
  int AddPostForwardHook(PostForwardHook hook);
  void RemoveHook(int handle);
  // Whether any forward hook is registered here (a module that fuses its
  // children's work must call them through operator() when they have one).
  bool has_forward_hooks() const { return !pre_hooks_.empty() || !post_hooks_.empty(); }
  // The Variables among the arguments of the forward running now, for hooks to
  // read: set by RunForward (ForwardModule::operator()) from before its
  // pre-forward hooks to after its post-forward hooks, then cleared (no graph
  // is kept alive); nullptr outside that window. The sharding runtime watches
  // their gradients to free frozen parameters early (Note [Frozen parameters]
  // in sharding/sharded_model.h).
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
  std::vector<Variable> forward_inputs_;
  bool recording_inputs_ = false;

 protected:
  // Runs `forward()` (returning absl::StatusOr<Out>) as this module's forward,
  // `inputs` being its arguments: steps 1-5 of Note [Module forward]. This is
  // what ForwardModule::operator() does; a module whose entry point has
  // another name (CausalLm::Forward) calls it directly.
  template <typename Fn, typename... In>
  std::invoke_result_t<Fn&> RunForward(Fn&& forward, const In&... inputs);

 private:
  absl::Status RunPreForwardHooks();
  // Runs the post-forward hooks on `outputs`; an error if one changed their number.
  absl::Status RunPostForwardHooks(std::vector<Variable>& outputs);
};

// Note [Module forward]. A module's forward runs through
// ForwardModule<Out(In...)>::operator()(const In&...) (or Module::RunForward,
// as CausalLm::Forward does), which
//   1. records the Variables among the arguments as forward_inputs();
//   2. runs the pre-forward hooks in registration order (the sharding runtime
//      gathers the unit here: its parameters get their values);
//   3. calls Forward(args...) (each argument as const In&);
//   4. runs the post-forward hooks in registration order on the Variables
//      among the result (the sharding runtime puts a pre-backward hook on each
//      and frees the gathered bytes). A hook may replace elements of that
//      vector, and the replacements are written back into the result; adding
//      or removing elements is a FailedPrecondition error;
//   5. clears forward_inputs() (restores the enclosing call's, when a module
//      runs inside its own forward) and returns the result.
// An error from a hook or from Forward is returned at once: the later steps do
// not run (except 5).
// The Variables are those nn::ForEachVariable finds (above): Variable,
// optional, pair, tuple and ranges of them, and a type that opts in with a
// ForEachVariable member; undefined ones are skipped (a loss without targets
// is no output). Everything else is passed to Forward untouched and unseen:
// numbers, flags, Tensors (token ids, masks), options. So a Variable hidden in
// a type that does not opt in is not seen either, which under sharding is
// wrong: as an input its gradient is not watched (a frozen part could be freed
// while backward still reads it); as an output it gets no pre-backward hook
// (the unit is not re-gathered for the backward through it). Opt such types in.
// Forward must be called through operator(): called directly, no hook runs.
// Unsharded that changes nothing. A sharded unit that is not gathered has
// parameters without values, and the first op reading one returns
// InvalidArgument naming it (autograd::CheckHasValue in autograd/function.h;
// norms and biases once read such a parameter as absent). A unit that stays
// gathered (one rank, where the gathered buffer is the shard) computes its
// forward, but its outputs carry no pre-backward hook, and the backward
// returns Internal "... landed before the unit's backward started" (both
// tested in tests/sharding/multi_input_module_test.cc). Declaring the
// override protected keeps callers on operator().
template <typename Signature>
class ForwardModule;

template <typename Out, typename... In>
class ForwardModule<Out(In...)> : public Module {
 public:
  using Module::Module;
  absl::StatusOr<Out> operator()(const In&... in) {
    return RunForward([&]() { return Forward(in...); }, in...);
  }

 protected:
  virtual absl::StatusOr<Out> Forward(const In&... in) = 0;
};

// A module with one input and one output. A class, not an alias, so that a
// subclass outside nn can name it in its constructor (": UnaryModule("Mlp")").
class UnaryModule : public ForwardModule<Variable(Variable)> {
 public:
  using ForwardModule::ForwardModule;
};

template <typename Fn, typename... In>
std::invoke_result_t<Fn&> Module::RunForward(Fn&& forward, const In&... inputs) {
  using Result = std::invoke_result_t<Fn&>;  // absl::StatusOr<Out>
  std::vector<Variable> recorded;
  (nn::ForEachVariable(inputs, [&recorded](const Variable& v) {
     if (v.defined()) recorded.push_back(v);
   }),
   ...);
  std::vector<Variable> enclosing = std::exchange(forward_inputs_, std::move(recorded));
  const bool enclosing_recording = std::exchange(recording_inputs_, true);
  Result result = [&]() -> Result {
    ZS_RETURN_IF_ERROR(RunPreForwardHooks());
    Result out = forward();
    if (!out.ok()) return out;
    std::vector<Variable> outputs;
    nn::ForEachVariable(*out, [&outputs](Variable& v) {
      if (v.defined()) outputs.push_back(v);
    });
    ZS_RETURN_IF_ERROR(RunPostForwardHooks(outputs));
    size_t i = 0;
    nn::ForEachVariable(*out, [&](Variable& v) {
      if (v.defined()) v = std::move(outputs[i++]);
    });
    return out;
  }();
  forward_inputs_ = std::move(enclosing);
  recording_inputs_ = enclosing_recording;
  return result;
}

// The rule for a tied parameter found under two names: same shape and equal
// values (NaN equals NaN), else an InvalidArgument naming both and the first
// element that differs. `where` starts the message.
absl::Status CheckTiedValuesEqual(const std::string& where, const std::string& name_a, const Tensor& a,
                                  const std::string& name_b, const Tensor& b);

// "a.b" from prefix "a" and name "b"; just "b" when the prefix is empty.
std::string JoinName(const std::string& prefix, const std::string& name);

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_MODULE_H_
