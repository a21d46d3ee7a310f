// ShardOptimizerRule: an optimizer written outside the library, as a rule
// over flat fp32 shards. ShardedOptimizer (optim/sharded_optimizer.h) hands it
// each unit's master shard, gradient shard and state as it hands them to
// AdamW, so sharding, CPU offload, NVMe swap of the state and checkpoints
// (save, load, re-shard: by slot name) come with it.
//
//   // Lion (Chen et al. 2023), the rule tests/optim/custom_rule_test.cc adds:
//   class Lion final : public optim::ShardOptimizerRule {
//    public:
//     std::string name() const override { return "lion"; }
//     std::vector<std::string> state_slots() const override { return {"exp_avg"}; }
//     absl::Status Step(const optim::ShardStepArgs& a) const override {
//       absl::Span<float> m = a.state[0];
//       for (const optim::ParamGroup& g : a.groups) {
//         const float lr = static_cast<float>(g.lr), wd = static_cast<float>(g.weight_decay);
//         for (const optim::FlatRange& r : g.ranges) {
//           for (int64_t i = r.offset; i < r.offset + r.numel; ++i) {
//             const float c = 0.9f * m[i] + 0.1f * a.grad[i];
//             a.param[i] -= lr * (float((c > 0) - (c < 0)) + wd * a.param[i]);
//             m[i] = 0.99f * m[i] + 0.01f * a.grad[i];
//           }
//         }
//       }
//       return absl::OkStatus();
//     }
//   };
//   optim::OptimizerOptions o{.lr = 1e-4, .weight_decay = 0.1, .rule = std::make_shared<Lion>()};
//   ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, o));
//   ZS_RETURN_IF_ERROR(opt.Step(lr));   // as with AdamW; or through OptimWrapper / TrainStep
//
// Note [Shard rule contract]. What a rule may assume and must keep:
//  - Its arguments: `param` is this rank's fp32 master shard of one unit
//    (shard_numel elements; Note [Shard layout] in sharding/flat_parameter.h);
//    `grad` its gradient shard, already widened to fp32 and multiplied by the
//    step's grad_scale (clip coefficient / loss scale) exactly as AdamW reads
//    it, g = float(grad) * float(grad_scale); `state[k]` the shard of slot
//    state_slots()[k], zero before the first step and kept between steps;
//    `groups` the unit's parameter groups restricted to the shard (offsets
//    relative to it, optim/param_group.h ShardParamGroups), each with the
//    step's lr and its weight_decay (weight decay on parameters of 2 or more
//    dimensions unless OptimizerOptions::decays says otherwise); `step` the
//    1-based count of this step (restored from checkpoints).
//  - Only elements inside a group's range may change, in param and in the
//    state. The others are padding or frozen parameters (Note [Frozen
//    parameters] in sharding/sharded_model.h) and must stay bit for bit as
//    they are; nothing restores them. A shard may hold no range at all (a
//    rank whose shard is all padding): Step is still called, and does nothing.
//  - Element-wise: element i's new param and state depend only on param[i],
//    grad[i], state[k][i], its group's lr and weight_decay, `step` and the
//    rule's own constants, and are computed with the same float operations for
//    every i. No sums, norms or maxima over elements (a shard is an arbitrary
//    slice, so they would change with the world size): Adafactor's factored
//    row and column statistics do not fit, its unfactored form does. This is
//    what makes a sharded run bitwise the unsharded one for the same
//    gradients, and a checkpoint re-shard exact.
//  - Deterministic: the same inputs give the same bits, whatever the thread,
//    the call order of units or the time (no randomness; if Step spreads work
//    over threads, each element's arithmetic must not depend on how). The
//    library is built without floating-point contraction (.bazelrc), so plain
//    float expressions round alike on every instruction set; a rule compiled
//    elsewhere with FMA contraction still agrees across ranks of one build,
//    not across builds.
//  - Threading: Step is const and may run concurrently on different shards
//    (ranks that are threads of one process share one rule object). A rule
//    keeps no mutable state of its own: what persists per element is a state
//    slot, what varies per step comes in the arguments. The spans are valid
//    only during the call.
//  - Errors: a non-OK Status stops the optimizer's step and is returned with
//    the rule's name and the unit prefixed; the unit's param and state are
//    then whatever Step left (the run should stop, not go on).
//  - Where it runs: on the host, on CPU memory. A shard on a GPU (no CPU
//    offload) makes ShardedOptimizer::Create fail with FailedPrecondition
//    naming the rule and the device; with OffloadPolicy::optimizer (or
//    nvme_optimizer) the master shards, gradient shards and state are on the
//    host and the rule runs there, as DeepSpeed's CPU Adam does.
//  - Names: name() is what checkpoint.json records as the optimizer (a load
//    into another optimizer is refused): letters, digits, '_', '-' or '.',
//    not one of the built-in kinds (adamw, adam, sgd). Slot names are the
//    tensor names' suffixes in checkpoints ("<param>.<slot>" in a full one,
//    "<unit>.<slot>" in a sharded one): letters, digits or '_', distinct, not
//    "param". ValidateShardOptimizerRule checks both.
#ifndef ZEROSHARD_OPTIM_SHARD_RULE_H_
#define ZEROSHARD_OPTIM_SHARD_RULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "zeroshard/optim/param_group.h"

namespace zeroshard::optim {

// One step of one unit's shard (Note [Shard rule contract]); n = shard_numel.
struct ShardStepArgs {
  absl::Span<float> param;               // (n,) the fp32 master shard, updated in place
  absl::Span<const float> grad;          // (n,) float(grad) * float(grad_scale)
  std::vector<absl::Span<float>> state;  // per state_slots() entry: (n,), updated in place
  absl::Span<const ParamGroup> groups;   // ranges relative to the shard; lr and weight_decay each
  int64_t step = 0;                      // 1-based: this is the step-th step
};

class ShardOptimizerRule {
 public:
  virtual ~ShardOptimizerRule() = default;
  // Recorded in checkpoints; see Note [Shard rule contract] for the characters.
  virtual std::string name() const = 0;
  // Per-element fp32 state tensors, each of the shard's length, zero at start,
  // in the order Step receives them. None: a stateless rule (e.g. signSGD).
  virtual std::vector<std::string> state_slots() const = 0;
  virtual absl::Status Step(const ShardStepArgs& args) const = 0;
};

// OK when the rule's name and slot names follow Note [Shard rule contract];
// InvalidArgument naming the rule and the offending name otherwise.
absl::Status ValidateShardOptimizerRule(const ShardOptimizerRule& rule);

}  // namespace zeroshard::optim

#endif  // ZEROSHARD_OPTIM_SHARD_RULE_H_
