#include "zeroshard/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/node.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::autograd {

namespace {

// The state of one backward pass.
struct GraphTask {
  std::vector<std::function<absl::Status()>> callbacks;
};

// Backward passes running on this thread (innermost last).
thread_local std::vector<GraphTask*> graph_tasks;

// SetBackwardOpTrace's recorder and row for this thread.
struct OpTrace {
  TraceRecorder* trace = nullptr;
  TraceRow row;
  GpuTimeline* gpu = nullptr;
  int depth = 0;  // traced ops running on this thread (an op inside an op: no GPU span of its own)
};
thread_local OpTrace op_trace;

struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Adds `g` into the slot (out of place: `g` may be shared with other consumers).
absl::Status AccumulateInto(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return absl::OkStatus();
  if (!slot.defined()) {
    slot = g;
    return absl::OkStatus();
  }
  ZS_ASSIGN_OR_RETURN(Tensor sum, Binary(BinaryOp::kAdd, slot, g));
  slot = std::move(sum);
  return absl::OkStatus();
}

absl::Status RunGraph(const std::vector<Edge>& root_edges, const std::vector<Tensor>& root_grads,
                      const BackwardOptions& options) {
  // 1. Count, for every reachable node, how many edges point at it.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> stack;
  for (const Edge& e : root_edges) {
    if (e.valid() && keep_alive.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++dependencies[e.node.get()];
      if (keep_alive.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
  }
  // 2. Seed the roots' gradients.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto buffer_of = [&](Node* n) -> std::vector<Tensor>& {
    auto it = buffers.find(n);
    if (it == buffers.end()) it = buffers.emplace(n, std::vector<Tensor>(n->num_outputs())).first;
    return it->second;
  };
  for (size_t i = 0; i < root_edges.size(); ++i) {
    if (!root_edges[i].valid()) continue;
    ZS_RETURN_IF_ERROR(
        AccumulateInto(buffer_of(root_edges[i].node.get())[root_edges[i].output_nr], root_grads[i]));
  }
  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (auto& [node, unused] : buffers) {
    if (dependencies[node] == 0) ready.push(node);
  }
  // 3. Run nodes as they become ready.
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffer_of(node));
    buffers.erase(node);
    for (auto& [output_nr, handle_hook] : node->output_hooks()) {
      if (!grads[output_nr].defined()) continue;
      ZS_ASSIGN_OR_RETURN(grads[output_nr], handle_hook.second(grads[output_nr]));
    }
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    std::vector<Tensor> input_grads;
    if (any) {
      TraceRecorder* const trace =
          op_trace.trace != nullptr && dynamic_cast<AccumulateGrad*>(node) == nullptr ? op_trace.trace : nullptr;
      const double op_start = trace != nullptr ? trace->NowUs() : 0;
      GpuTimeline* const gpu = trace != nullptr && op_trace.depth == 0 ? op_trace.gpu : nullptr;
      GpuMark gpu_mark;
      if (gpu != nullptr) gpu_mark = gpu->Begin(/*stream=*/nullptr, std::string(node->name()));  // the ops' stream
      if (trace != nullptr) ++op_trace.depth;
      absl::StatusOr<std::vector<Tensor>> r = node->Apply(std::move(grads));
      // The GPU span's end is recorded before the host span's end is read: a
      // GPU span starts and ends inside its launch where work runs at launch.
      if (gpu != nullptr) gpu->End(gpu_mark, nullptr, std::string(node->name()), "gpu op", op_trace.row.Gpu());
      if (trace != nullptr) {
        --op_trace.depth;
        trace->AddSpan(std::string(node->name()), "op", op_trace.row, op_start, trace->NowUs());
      }
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat("backward of ", node->name(), ": ", r.status().message()));
      }
      input_grads = *std::move(r);
      if (!options.retain_graph) node->ReleaseSaved();
    }
    const std::vector<Edge>& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        ZS_RETURN_IF_ERROR(AccumulateInto(buffer_of(e.node.get())[e.output_nr], input_grads[i]));
      }
      if (--dependencies[e.node.get()] == 0) {
        // A node none of whose inputs produced a gradient still passes the
        // "nothing" on, so that its own dependants are released.
        buffer_of(e.node.get());
        ready.push(e.node.get());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads,
                      const BackwardOptions& options) {
  if (roots.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Backward: ", roots.size(), " roots but ",
                                                   grads.size(), " gradients"));
  }
  std::vector<Edge> edges;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& r = roots[i];
    if (!r.defined()) return absl::InvalidArgumentError("Backward: undefined root");
    if (!r.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Backward: root ", i, " ('", r.name(), "') does not require grad: nothing to differentiate"));
    }
    Tensor seed = grads[i];
    if (!seed.defined()) {
      if (r.numel() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Backward: root ", i, " has shape ", ShapeToString(r.shape()),
            "; an implicit gradient of 1 needs a one-element root (pass a gradient)"));
      }
      ZS_ASSIGN_OR_RETURN(seed, Tensor::Full(r.shape(), 1.0, r.dtype(), r.value().allocator()));
    } else if (seed.shape() != r.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("Backward: gradient of shape ",
                                                     ShapeToString(seed.shape()), " for root ", i,
                                                     " of shape ", ShapeToString(r.shape())));
    }
    edges.push_back(GradientEdge(r));
    seeds.push_back(std::move(seed));
  }
  GraphTask task;
  graph_tasks.push_back(&task);
  absl::Status status;
  {
    // Backward itself records nothing (higher-order gradients are not supported).
    NoGradGuard no_grad;
    status = RunGraph(edges, seeds, options);
  }
  // Callbacks may queue further callbacks; run until none are left.
  for (size_t i = 0; status.ok() && i < task.callbacks.size(); ++i) {
    std::function<absl::Status()> cb = std::move(task.callbacks[i]);
    status = cb();
  }
  graph_tasks.pop_back();
  return status;
}

absl::Status Backward(const Variable& root, const BackwardOptions& options) {
  return Backward(std::vector<Variable>{root}, std::vector<Tensor>{Tensor()}, options);
}

absl::Status QueueCallback(std::function<absl::Status()> fn) {
  if (graph_tasks.empty()) {
    return absl::FailedPreconditionError("QueueCallback: no backward pass is running on this thread");
  }
  // The outermost pass: an inner pass (a checkpoint's recompute) ends before
  // the backward the caller means has finished.
  graph_tasks.front()->callbacks.push_back(std::move(fn));
  return absl::OkStatus();
}

bool InBackward() { return !graph_tasks.empty(); }

void SetBackwardOpTrace(TraceRecorder* trace, TraceRow row, GpuTimeline* gpu) {
  op_trace = OpTrace{.trace = trace, .row = row, .gpu = trace != nullptr ? gpu : nullptr};
}

ForwardOpSpan::ForwardOpSpan(const char* name) : name_(name) {
  // Inside a backward pass (a checkpoint's recompute) or another op: the
  // enclosing node's or op's span holds it.
  if (op_trace.trace == nullptr || op_trace.depth > 0 || InBackward()) return;
  trace_ = op_trace.trace;
  gpu_ = op_trace.gpu;
  start_us_ = trace_->NowUs();
  if (gpu_ != nullptr) gpu_mark_ = gpu_->Begin(/*stream=*/nullptr, name_);  // the ops' stream
  ++op_trace.depth;
}

ForwardOpSpan::~ForwardOpSpan() {
  if (trace_ == nullptr) return;
  --op_trace.depth;
  // As the backward's: the GPU span's end before the host span's end is read.
  if (gpu_ != nullptr) gpu_->End(gpu_mark_, nullptr, name_, "gpu op", op_trace.row.Gpu());
  trace_->AddSpan(name_, "op", op_trace.row, start_us_, trace_->NowUs());
}

}  // namespace zeroshard::autograd
