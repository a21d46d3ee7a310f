// Node: one recorded operation of the autograd graph.
//
// A differentiable op saves exactly what its backward reads (e.g. MatMul saves
// its two inputs, Gelu its input, Add nothing but shapes), creates a Node
// subclass holding it, and points the node's edges at whatever produced its
// inputs. Backward calls Apply with the gradients of the op's outputs and gets
// the gradients of its inputs:
//
//   class ExpNode : public Node {
//    public:
//     absl::string_view name() const override { return "Exp"; }
//     absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) override {
//       // d exp(x) = exp(x) dx: the saved output times the incoming gradient
//       ZS_ASSIGN_OR_RETURN(Tensor dx, Binary(BinaryOp::kMul, grads[0], saved_y_));
//       return std::vector<Tensor>{dx};
//     }
//     void ReleaseSaved() override { saved_y_ = Tensor(); }
//     Tensor saved_y_;
//   };
//
// Edges: next_edges()[i] says where the gradient of forward input i goes: a
// node and which of that node's forward outputs the input was (`output_nr`),
// or nothing (the input needs no gradient). Leaves are reached through their
// AccumulateGrad node.
#ifndef ZEROSHARD_AUTOGRAD_NODE_H_
#define ZEROSHARD_AUTOGRAD_NODE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::autograd {

struct Edge {
  std::shared_ptr<Node> node;
  int output_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  explicit Node(int num_outputs = 1);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual absl::string_view name() const = 0;
  // `grads[k]` is the gradient w.r.t. forward output k (undefined if none
  // reached it, but at least one is defined). Returns one gradient per forward
  // input, in next_edges() order; an undefined Tensor where none is needed.
  virtual absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void ReleaseSaved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  // True when forward input `i` needs a gradient.
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }
  int num_outputs() const { return num_outputs_; }
  // Creation order; backward runs ready nodes latest-created first.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Hooks on the gradients of this node's outputs (a non-leaf variable's hooks).
  std::vector<std::pair<int, std::pair<int, GradHook>>>& output_hooks() { return output_hooks_; }

 protected:
  // For AccumulateGrad: run as soon as ready (before any other ready node).
  void set_sequence_nr(uint64_t s) { sequence_nr_ = s; }

 private:
  std::vector<Edge> next_edges_;
  int num_outputs_;
  uint64_t sequence_nr_;
  std::vector<std::pair<int, std::pair<int, GradHook>>> output_hooks_;  // (output_nr, (handle, hook))
};

// The sink of a leaf: runs the leaf's grad hooks, adds the gradient into
// .grad() (allocating it on first use, in place into an installed buffer
// otherwise), then the post-accumulate hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<VariableImpl> leaf);
  absl::string_view name() const override { return "AccumulateGrad"; }
  absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) override;
  const std::shared_ptr<VariableImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<VariableImpl> leaf_;
};

// Where the gradient of `v` should go when `v` is an input of a new op.
Edge GradientEdge(const Variable& v);

// Process-unique handle for hooks.
int NextHookHandle();

}  // namespace zeroshard::autograd

#endif  // ZEROSHARD_AUTOGRAD_NODE_H_
