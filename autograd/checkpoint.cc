#include "zeroshard/autograd/checkpoint.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/function.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::autograd {

absl::StatusOr<std::vector<Variable>> Checkpoint(const CheckpointFn& fn,
                                                 const std::vector<Variable>& inputs,
                                                 const CheckpointOptions& options) {
  std::vector<uint64_t> start_offsets;
  for (PhiloxGenerator* g : options.generators) start_offsets.push_back(g->offset);
  std::vector<const Variable*> input_ptrs;
  std::vector<Tensor> input_values;
  std::vector<bool> input_requires_grad;
  std::vector<Variable> detached;
  for (const Variable& v : inputs) {
    input_ptrs.push_back(&v);
    input_values.push_back(v.value());
    input_requires_grad.push_back(v.requires_grad());
    detached.push_back(v.detach());
  }
  std::vector<Variable> outputs;
  {
    NoGradGuard no_grad;
    ZS_ASSIGN_OR_RETURN(outputs, fn(detached));
  }
  if (!GradMode::IsEnabled()) return outputs;
  std::vector<Tensor> values;
  for (const Variable& o : outputs) values.push_back(o.value());
  std::vector<PhiloxGenerator*> generators = options.generators;
  // Even when no input needs a gradient, parameters inside fn may: record
  // unconditionally so the recompute can reach them.
  auto node = std::make_shared<FunctionNode>(
      "Checkpoint", static_cast<int>(values.size()),
      [fn, input_values, input_requires_grad, generators,
       start_offsets](std::vector<Tensor>& grads) -> GradsOr {
        // Replay the random streams of the forward, then put them back.
        std::vector<uint64_t> now;
        for (size_t i = 0; i < generators.size(); ++i) {
          now.push_back(generators[i]->offset);
          generators[i]->offset = start_offsets[i];
        }
        std::vector<Variable> fresh;
        for (size_t i = 0; i < input_values.size(); ++i) {
          fresh.emplace_back(input_values[i], input_requires_grad[i]);
        }
        absl::StatusOr<std::vector<Variable>> recomputed;
        {
          EnableGradGuard enable;
          recomputed = fn(fresh);
        }
        for (size_t i = 0; i < generators.size(); ++i) generators[i]->offset = now[i];
        if (!recomputed.ok()) return recomputed.status();
        std::vector<Variable> roots;
        std::vector<Tensor> seeds;
        for (size_t i = 0; i < recomputed->size(); ++i) {
          if (i < grads.size() && grads[i].defined() && (*recomputed)[i].requires_grad()) {
            roots.push_back((*recomputed)[i]);
            seeds.push_back(grads[i]);
          }
        }
        if (!roots.empty()) ZS_RETURN_IF_ERROR(Backward(roots, seeds));
        Grads out;
        for (const Variable& f : fresh) out.push_back(f.requires_grad() ? f.grad() : Tensor());
        return out;
      });
  std::vector<Edge> edges;
  for (const Variable* v : input_ptrs) edges.push_back(GradientEdge(*v));
  node->set_next_edges(std::move(edges));
  std::vector<Variable> result;
  for (size_t i = 0; i < values.size(); ++i) {
    result.push_back(Variable::FromNode(values[i], node, static_cast<int>(i)));
  }
  return result;
}

}  // namespace zeroshard::autograd
