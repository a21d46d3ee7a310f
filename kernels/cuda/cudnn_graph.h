// A small owner of cuDNN backend descriptors (cudnn_graph.h, cuDNN 9): tensors
// and operations of one operation graph, the execution plan built from the
// heuristics' engine configs, and execution with a variant pack. Used by
// kernels/cuda/attention_cudnn.cc (fused attention) and kernels/cuda/cudnn_ops.cc
// (convolutions); host code compiled against cuDNN.
//
//   CudnnGraph g;
//   ZS_ASSIGN_OR_RETURN(auto a, g.Tensor(1, CUDNN_DATA_BFLOAT16, {1, 4, 64, 32}, {...}));
//   ZS_ASSIGN_OR_RETURN(auto s, g.Virtual({1, 4, 64, 64}, {...}));
//   ZS_RETURN_IF_ERROR(g.Matmul(a, bt, s));
//   ...
//   ZS_RETURN_IF_ERROR(g.Build(handle));       // Unimplemented when no engine takes the graph
//   // (without a device: g.FinalizeGraph(nullptr) checks the graph, choosing no engine)
//   ZS_RETURN_IF_ERROR(g.Execute(handle, {1, 2, ...}, {ptr1, ptr2, ...}, workspace));
//
// Every descriptor is finalized as soon as it is complete (a refusal is an
// error naming the descriptor or operation, cuDNN's status and its last
// error message); all are destroyed with the graph (the plan refers to them).
// Virtual tensors get unique ids from kFirstVirtualUid up.
#ifndef ZEROSHARD_KERNELS_CUDA_CUDNN_GRAPH_H_
#define ZEROSHARD_KERNELS_CUDA_CUDNN_GRAPH_H_

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard::cuda {

using CudnnDims = std::array<int64_t, 4>;

// Row-major strides of `dims`.
CudnnDims PackedStrides(const CudnnDims& dims);

struct ConvOpAttrs;  // cudnn_graph.cc

class CudnnGraph {
 public:
  static constexpr int64_t kFirstVirtualUid = 1000;

  CudnnGraph() = default;
  ~CudnnGraph();
  CudnnGraph(const CudnnGraph&) = delete;
  CudnnGraph& operator=(const CudnnGraph&) = delete;

  // A tensor bound at execution through `uid` (by_value: a host scalar).
  absl::StatusOr<cudnnBackendDescriptor_t> Tensor(int64_t uid, cudnnDataType_t dtype,
                                                  const CudnnDims& dims, const CudnnDims& strides,
                                                  bool by_value = false);
  // A 1x1x1x1 f32 scalar passed by value (host pointer in the variant pack).
  absl::StatusOr<cudnnBackendDescriptor_t> Scalar(int64_t uid,
                                                  cudnnDataType_t dtype = CUDNN_DATA_FLOAT);
  // An intermediate the engine keeps to itself (packed strides unless given).
  absl::StatusOr<cudnnBackendDescriptor_t> Virtual(const CudnnDims& dims,
                                                   cudnnDataType_t dtype = CUDNN_DATA_FLOAT);
  absl::StatusOr<cudnnBackendDescriptor_t> Virtual(const CudnnDims& dims, const CudnnDims& strides,
                                                   cudnnDataType_t dtype = CUDNN_DATA_FLOAT);

  // c = a @ b over the last two dims (batched over the first two), fp32 compute.
  absl::Status Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t c);
  // y = mode(x [, b [, t]]); compute type `math`; `axis` for GEN_INDEX.
  // InvalidArgument when an input does not broadcast to y (a dim neither y's nor 1).
  absl::Status Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                         cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                         cudnnBackendDescriptor_t y, cudnnDataType_t math = CUDNN_DATA_FLOAT,
                         int64_t axis = -1);
  // y = reduce(x) over the dims where y has size 1, fp32 compute; a dim of y
  // that divides x's reduces groups of x's / y's consecutive entries (x's
  // index i goes to i / (x's / y's): grouped-query attention's dK, dV, summed
  // from [B, H, T, D] to [B, Hkv, T, D]). InvalidArgument when a dim of y
  // neither equals x's, nor is 1, nor divides it.
  absl::Status Reduction(cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                         cudnnBackendDescriptor_t y);
  // y = x seen with y's dims and strides (a transpose of the last two dims).
  // InvalidArgument when x and y differ in element count.
  absl::Status Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // A cross-correlation over `pre_padding.size()` spatial dims with f32
  // compute (symmetric padding: post = pre). Groups are not an attribute:
  // cuDNN reads them off the filter, whose C dim is the input's C / groups.
  absl::StatusOr<cudnnBackendDescriptor_t> Convolution(const std::vector<int64_t>& padding,
                                                       const std::vector<int64_t>& strides,
                                                       const std::vector<int64_t>& dilations);
  // y = conv(x, w); dx = conv^T(dy, w); dw = conv-grad(x, dy); alpha 1, beta 0.
  absl::Status ConvForward(cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                           cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y);
  absl::Status ConvBackwardData(cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t w,
                                cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dx);
  absl::Status ConvBackwardFilter(cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                                  cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dw);

  // Engine configs whose engine carries any of `notes` (e.g. TENSOR_CORE,
  // which on f32 data means TF32) are passed over by Build. Call before Build.
  void ExcludeNumericalNotes(std::initializer_list<cudnnBackendNumericalNote_t> notes) {
    excluded_notes_.assign(notes.begin(), notes.end());
  }

  // The operation graph of every operation added, finalized (cuDNN checks
  // the operations fit together) without choosing an engine. `handle` may be
  // null: then CUDNN_ATTR_OPERATIONGRAPH_HANDLE is left unset, which lets a
  // machine without a GPU (where cudnnCreate fails) check the graph
  // (tests/kernels/cudnn_graph_finalize_test.cc). Unimplemented, with cuDNN's
  // message, when cuDNN refuses the graph; idempotent for the same handle,
  // FailedPrecondition for another (the graph keeps the handle it was given).
  absl::Status FinalizeGraph(cudnnHandle_t handle);
  bool graph_finalized() const { return graph_ != nullptr; }
  int64_t num_operations() const { return static_cast<int64_t>(ops_.size()); }

  // FinalizeGraph(handle), then the execution plan of the first engine
  // config (heuristics mode A, then the fallback list) that finalizes.
  // Unimplemented, listing what cuDNN said, when none does. Needs a device.
  absl::Status Build(cudnnHandle_t handle);
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // "engine 5 of 12 (mode A)": which plan Build chose.
  const std::string& chosen() const { return chosen_; }

  // Runs the plan on the handle's stream.
  absl::Status Execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                       const std::vector<void*>& pointers, void* workspace) const;

 private:
  // A convolution operation of `a`'s kind (forward, backward data or filter).
  absl::Status ConvOp(const ConvOpAttrs& a, cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t in0,
                      cudnnBackendDescriptor_t in1, cudnnBackendDescriptor_t out);
  absl::StatusOr<cudnnBackendDescriptor_t> Create(cudnnBackendDescriptorType_t type);
  // The dims `t` was created with (null for a descriptor not made here).
  const CudnnDims* DimsOf(cudnnBackendDescriptor_t t) const;
  // InvalidArgument naming `what` unless every dim of `in` equals `out`'s or
  // is 1 (or, when `grouped`, divides it: a reduction's grouped sum).
  absl::Status CheckBroadcast(cudnnBackendDescriptor_t in, cudnnBackendDescriptor_t out,
                              absl::string_view what, bool grouped = false) const;
  // "operation 3 (OPERATION_MATMUL)": the operation about to be added, for errors.
  std::string OpLabel(absl::string_view prefix, absl::string_view kind = "") const;
  absl::Status TryConfigs(cudnnHandle_t handle, cudnnBackendHeurMode_t mode, const char* mode_name,
                          std::string* refusals);
  // Whether `config`'s engine carries one of excluded_notes_.
  absl::StatusOr<bool> Excluded(cudnnBackendDescriptor_t config);

  std::vector<cudnnBackendDescriptor_t> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  // Every tensor's dims: cuDNN 9.19 finalizes pointwise and reduction
  // operations (and their graph) whose shapes do not broadcast, leaving the
  // refusal to the engines on a GPU, so Pointwise, Reduction and Reshape check
  // shapes themselves.
  std::map<cudnnBackendDescriptor_t, CudnnDims> dims_;
  cudnnBackendDescriptor_t graph_ = nullptr;  // set once finalized
  cudnnHandle_t graph_handle_ = nullptr;
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t workspace_bytes_ = 0;
  int64_t next_virtual_uid_ = kFirstVirtualUid;
  std::string chosen_;
  std::vector<cudnnBackendNumericalNote_t> excluded_notes_;
};

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_KERNELS_CUDA_CUDNN_GRAPH_H_
