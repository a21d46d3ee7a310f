#include "zeroshard/kernels/cuda/cudnn_graph.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/runtime/cuda/library_status.h"
#include "zeroshard/runtime/status.h"

// The operation graph and the execution plan still take the handle through
// attributes cuDNN 9 marks deprecated (there is no replacement for an
// on-device plan); keep their warnings out of the build.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace zeroshard::cuda {

namespace {

absl::Status Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                 cudnnBackendAttributeType_t type, int64_t count, const void* value) {
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(d, name, type, count, value));
  return absl::OkStatus();
}

// cuDNN's last error message (it explains refusals better than the code).
std::string LastCudnnError() {
  char buf[512] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return buf;
}

// Names of the modes the graphs use, for errors (others by number).
std::string PointwiseName(cudnnPointwiseMode_t mode) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: return "ADD";
    case CUDNN_POINTWISE_SUB: return "SUB";
    case CUDNN_POINTWISE_MUL: return "MUL";
    case CUDNN_POINTWISE_DIV: return "DIV";
    case CUDNN_POINTWISE_EXP: return "EXP";
    case CUDNN_POINTWISE_LOG: return "LOG";
    case CUDNN_POINTWISE_IDENTITY: return "IDENTITY";
    case CUDNN_POINTWISE_CMP_GE: return "CMP_GE";
    case CUDNN_POINTWISE_BINARY_SELECT: return "BINARY_SELECT";
    case CUDNN_POINTWISE_GEN_INDEX: return "GEN_INDEX";
    default: return absl::StrCat("mode ", static_cast<int>(mode));
  }
}

std::string ReductionName(cudnnReduceTensorOp_t op) {
  switch (op) {
    case CUDNN_REDUCE_TENSOR_ADD: return "ADD";
    case CUDNN_REDUCE_TENSOR_MAX: return "MAX";
    default: return absl::StrCat("op ", static_cast<int>(op));
  }
}

// Finalizes `d`; when cuDNN refuses, the error names `what` (e.g. "operation 3
// (OPERATION_MATMUL)"), cuDNN's status and its last error message.
// Internal (ResourceExhausted for allocation failures), as the status macros map codes.
absl::Status Finalize(cudnnBackendDescriptor_t d, absl::string_view what) {
  const cudnnStatus_t status = cudnnBackendFinalize(d);
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const bool oom = status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                   status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  return absl::Status(oom ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal,
                      absl::StrCat("cuDNN refused to finalize ", what, ": ",
                                   cudnnGetErrorString(status), " (cuDNN status ",
                                   static_cast<int>(status), "): ", LastCudnnError()));
}

}  // namespace

CudnnDims PackedStrides(const CudnnDims& dims) {
  CudnnDims s{};
  int64_t acc = 1;
  for (int i = 3; i >= 0; --i) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

CudnnGraph::~CudnnGraph() {
  // Dependants first: the plan and graph refer to the operations, which refer to tensors.
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
}

absl::StatusOr<cudnnBackendDescriptor_t> CudnnGraph::Create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(type, &d));
  owned_.push_back(d);
  return d;
}

absl::StatusOr<cudnnBackendDescriptor_t> CudnnGraph::Tensor(int64_t uid, cudnnDataType_t dtype,
                                                            const CudnnDims& dims,
                                                            const CudnnDims& strides,
                                                            bool by_value) {
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d, Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const int64_t alignment = 16;
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment));
  const bool is_virtual = uid >= kFirstVirtualUid;
  if (is_virtual) {
    ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
  }
  if (by_value) {
    ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
  }
  ZS_RETURN_IF_ERROR(Finalize(d, absl::StrCat("the TENSOR descriptor uid ", uid, " dims [",
                                                absl::StrJoin(dims, ","), "] strides [",
                                                absl::StrJoin(strides, ","), "]")));
  dims_[d] = dims;
  return d;
}

absl::StatusOr<cudnnBackendDescriptor_t> CudnnGraph::Scalar(int64_t uid, cudnnDataType_t dtype) {
  return Tensor(uid, dtype, {1, 1, 1, 1}, {1, 1, 1, 1}, /*by_value=*/true);
}

absl::StatusOr<cudnnBackendDescriptor_t> CudnnGraph::Virtual(const CudnnDims& dims,
                                                             cudnnDataType_t dtype) {
  return Virtual(dims, PackedStrides(dims), dtype);
}

absl::StatusOr<cudnnBackendDescriptor_t> CudnnGraph::Virtual(const CudnnDims& dims,
                                                             const CudnnDims& strides,
                                                             cudnnDataType_t dtype) {
  return Tensor(next_virtual_uid_++, dtype, dims, strides);
}

absl::Status CudnnGraph::Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                cudnnBackendDescriptor_t c) {
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t desc, Create(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  ZS_RETURN_IF_ERROR(Set(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  ZS_RETURN_IF_ERROR(Finalize(desc, OpLabel("the MATMUL descriptor of operation ")));
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                      Create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc));
  ZS_RETURN_IF_ERROR(Finalize(op, OpLabel("operation ", "OPERATION_MATMUL")));
  ops_.push_back(op);
  return absl::OkStatus();
}

absl::Status CudnnGraph::Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                   cudnnBackendDescriptor_t y, cudnnDataType_t math, int64_t axis) {
  const std::string what = OpLabel("operation ", absl::StrCat("OPERATION_POINTWISE ", PointwiseName(mode)));
  for (cudnnBackendDescriptor_t in : {x, b, t}) {
    if (in != nullptr) ZS_RETURN_IF_ERROR(CheckBroadcast(in, y, what));
  }
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t desc, Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  ZS_RETURN_IF_ERROR(Set(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  ZS_RETURN_IF_ERROR(Set(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math));
  if (axis >= 0) {
    ZS_RETURN_IF_ERROR(Set(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
  }
  ZS_RETURN_IF_ERROR(Finalize(desc, OpLabel("the POINTWISE descriptor of operation ")));
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                      Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b != nullptr) {
    ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  }
  if (t != nullptr) {
    ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
  }
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  ZS_RETURN_IF_ERROR(Finalize(op, what));
  ops_.push_back(op);
  return absl::OkStatus();
}

absl::Status CudnnGraph::Reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t y) {
  const std::string what = OpLabel("operation ", absl::StrCat("OPERATION_REDUCTION ", ReductionName(reduce)));
  ZS_RETURN_IF_ERROR(CheckBroadcast(y, x, what, /*grouped=*/true));
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t desc, Create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  ZS_RETURN_IF_ERROR(Set(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce));
  ZS_RETURN_IF_ERROR(Set(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  ZS_RETURN_IF_ERROR(Finalize(desc, OpLabel("the REDUCTION descriptor of operation ")));
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                      Create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc));
  ZS_RETURN_IF_ERROR(Finalize(op, what));
  ops_.push_back(op);
  return absl::OkStatus();
}

absl::Status CudnnGraph::Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  {
    const CudnnDims* dx = DimsOf(x);
    const CudnnDims* dy = DimsOf(y);
    auto numel = [](const CudnnDims& d) { return d[0] * d[1] * d[2] * d[3]; };
    if (dx != nullptr && dy != nullptr && numel(*dx) != numel(*dy)) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpLabel("operation ", "OPERATION_RESHAPE"), ": input [", absl::StrJoin(*dx, ","),
          "] and output [", absl::StrJoin(*dy, ","), "] differ in size"));
    }
  }
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                      Create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  ZS_RETURN_IF_ERROR(Set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  ZS_RETURN_IF_ERROR(Finalize(op, OpLabel("operation ", "OPERATION_RESHAPE")));
  ops_.push_back(op);
  return absl::OkStatus();
}

absl::StatusOr<cudnnBackendDescriptor_t> CudnnGraph::Convolution(const std::vector<int64_t>& padding,
                                                                 const std::vector<int64_t>& strides,
                                                                 const std::vector<int64_t>& dilations) {
  const int64_t dims = static_cast<int64_t>(padding.size());
  if (strides.size() != padding.size() || dilations.size() != padding.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CudnnGraph::Convolution: ", padding.size(), " paddings, ",
                                                   strides.size(), " strides, ", dilations.size(),
                                                   " dilations"));
  }
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d, Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, padding.data()));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, padding.data()));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, strides.data()));
  ZS_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, dilations.data()));
  ZS_RETURN_IF_ERROR(Finalize(d, absl::StrCat("the CONVOLUTION descriptor (padding [", absl::StrJoin(padding, ","),
                                              "], strides [", absl::StrJoin(strides, ","), "], dilations [",
                                              absl::StrJoin(dilations, ","), "])")));
  return d;
}

// The three convolution operations differ only in their descriptor type and
// attribute names: alpha, beta, the convolution, two inputs and the output.
struct ConvOpAttrs {
  const char* name;  // for errors
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t alpha, beta, conv, in0, in1, out;
};

absl::Status CudnnGraph::ConvOp(const ConvOpAttrs& a, cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t in0,
                                cudnnBackendDescriptor_t in1, cudnnBackendDescriptor_t out) {
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, Create(a.type));
  const float alpha = 1.0f, beta = 0.0f;
  ZS_RETURN_IF_ERROR(Set(op, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
  ZS_RETURN_IF_ERROR(Set(op, a.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  ZS_RETURN_IF_ERROR(Set(op, a.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
  ZS_RETURN_IF_ERROR(Set(op, a.in0, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in0));
  ZS_RETURN_IF_ERROR(Set(op, a.in1, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in1));
  ZS_RETURN_IF_ERROR(Set(op, a.out, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out));
  ZS_RETURN_IF_ERROR(Finalize(op, OpLabel("operation ", a.name)));
  ops_.push_back(op);
  return absl::OkStatus();
}

absl::Status CudnnGraph::ConvForward(cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                                     cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y) {
  return ConvOp({"OPERATION_CONVOLUTION_FORWARD", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
                conv, x, w, y);
}

absl::Status CudnnGraph::ConvBackwardData(cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t w,
                                          cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dx) {
  return ConvOp({"OPERATION_CONVOLUTION_BACKWARD_DATA", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX},
                conv, w, dy, dx);
}

absl::Status CudnnGraph::ConvBackwardFilter(cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                                            cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dw) {
  return ConvOp({"OPERATION_CONVOLUTION_BACKWARD_FILTER", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW},
                conv, x, dy, dw);
}

absl::StatusOr<bool> CudnnGraph::Excluded(cudnnBackendDescriptor_t config) {
  if (excluded_notes_.empty()) return false;
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t engine, Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  int64_t n = 0;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                                    CUDNN_TYPE_NUMERICAL_NOTE,
                                                    static_cast<int64_t>(notes.size()), &n,
                                                    notes.data()));
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(notes.size()); ++i) {
    for (cudnnBackendNumericalNote_t excluded : excluded_notes_) {
      if (notes[i] == excluded) return true;
    }
  }
  return false;
}

absl::Status CudnnGraph::TryConfigs(cudnnHandle_t handle, cudnnBackendHeurMode_t mode,
                                    const char* mode_name, std::string* refusals) {
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t heur, Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  ZS_RETURN_IF_ERROR(Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph_));
  ZS_RETURN_IF_ERROR(Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) {
    absl::StrAppend(refusals, "heuristics ", mode_name, ": ", LastCudnnError(), "; ");
    return absl::UnimplementedError("no heuristics");
  }
  int64_t count = 0;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                                    nullptr));
  if (count <= 0) {
    absl::StrAppend(refusals, "heuristics ", mode_name, ": no engine config; ");
    return absl::UnimplementedError("no engine config");
  }
  std::vector<cudnnBackendDescriptor_t> configs(static_cast<size_t>(count));
  for (auto& c : configs) {
    ZS_ASSIGN_OR_RETURN(c, Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  }
  int64_t returned = 0;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                    &returned, configs.data()));
  for (int64_t i = 0; i < returned; ++i) {
    ZS_ASSIGN_OR_RETURN(bool excluded, Excluded(configs[i]));
    if (excluded) {
      absl::StrAppend(refusals, "config ", i, " (mode ", mode_name, "): excluded numerical note; ");
      continue;
    }
    ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t plan,
                        Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
    ZS_RETURN_IF_ERROR(Set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
    ZS_RETURN_IF_ERROR(Set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]));
    if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) {
      absl::StrAppend(refusals, "config ", i, " (mode ", mode_name, "): ", LastCudnnError(), "; ");
      continue;
    }
    int64_t bytes = 0, n = 0;
    ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                      CUDNN_TYPE_INT64, 1, &n, &bytes));
    plan_ = plan;
    workspace_bytes_ = bytes;
    chosen_ = absl::StrCat("engine config ", i, " of ", returned, " (heuristics mode ", mode_name, ")");
    return absl::OkStatus();
  }
  return absl::UnimplementedError("no plan");
}

const CudnnDims* CudnnGraph::DimsOf(cudnnBackendDescriptor_t t) const {
  auto it = dims_.find(t);
  return it == dims_.end() ? nullptr : &it->second;
}

absl::Status CudnnGraph::CheckBroadcast(cudnnBackendDescriptor_t in, cudnnBackendDescriptor_t out,
                                        absl::string_view what, bool grouped) const {
  const CudnnDims* di = DimsOf(in);
  const CudnnDims* d_out = DimsOf(out);
  if (di == nullptr || d_out == nullptr) return absl::OkStatus();  // not ours: cuDNN judges
  for (int i = 0; i < 4; ++i) {
    const int64_t a = (*di)[i], b = (*d_out)[i];
    if (a == b || a == 1 || (grouped && a > 0 && b % a == 0)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dims [", absl::StrJoin(*di, ","), "] do not broadcast to [",
        absl::StrJoin(*d_out, ","), "] (each must equal the other's or be 1",
        grouped ? ", or divide it" : "", ")"));
  }
  return absl::OkStatus();
}

std::string CudnnGraph::OpLabel(absl::string_view prefix, absl::string_view kind) const {
  // ops_.size() is the index the operation being finalized will get.
  return absl::StrCat(prefix, ops_.size(), kind.empty() ? "" : " (", kind, kind.empty() ? "" : ")");
}

absl::Status CudnnGraph::FinalizeGraph(cudnnHandle_t handle) {
  if (graph_ != nullptr) {
    if (handle != graph_handle_) {
      return absl::FailedPreconditionError(
          "CudnnGraph::FinalizeGraph: the operation graph is already finalized with another handle");
    }
    return absl::OkStatus();
  }
  if (ops_.empty()) return absl::FailedPreconditionError("CudnnGraph::FinalizeGraph: no operations");
  ZS_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph, Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  // Without a handle (no device) the graph is still checked: cuDNN refuses a
  // null handle attribute, so it is left unset.
  if (handle != nullptr) {
    ZS_RETURN_IF_ERROR(Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  }
  ZS_RETURN_IF_ERROR(Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         static_cast<int64_t>(ops_.size()), ops_.data()));
  if (cudnnBackendFinalize(graph) != CUDNN_STATUS_SUCCESS) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN refused the operation graph of ", ops_.size(), " operations: ",
                     LastCudnnError()));
  }
  graph_ = graph;
  graph_handle_ = handle;
  return absl::OkStatus();
}

absl::Status CudnnGraph::Build(cudnnHandle_t handle) {
  if (plan_ != nullptr) return absl::OkStatus();
  ZS_RETURN_IF_ERROR(FinalizeGraph(handle));
  std::string refusals;
  for (auto [mode, name] : {std::pair{CUDNN_HEUR_MODE_A, "A"}, std::pair{CUDNN_HEUR_MODE_FALLBACK, "fallback"}}) {
    absl::Status s = TryConfigs(handle, mode, name, &refusals);
    if (s.ok()) return s;
    if (!absl::IsUnimplemented(s)) return s;
  }
  return absl::UnimplementedError(absl::StrCat("cuDNN has no engine for the operation graph of ",
                                               ops_.size(), " operations: ", refusals));
}

absl::Status CudnnGraph::Execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                                 const std::vector<void*>& pointers, void* workspace) const {
  if (plan_ == nullptr) return absl::FailedPreconditionError("CudnnGraph::Execute before Build");
  if (uids.size() != pointers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CudnnGraph::Execute: ", uids.size(), " uids but ",
                                                   pointers.size(), " pointers"));
  }
  cudnnBackendDescriptor_t pack = nullptr;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  auto run = [&]() -> absl::Status {
    const int64_t n = static_cast<int64_t>(uids.size());
    ZS_RETURN_IF_ERROR(Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data()));
    ZS_RETURN_IF_ERROR(Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data()));
    ZS_RETURN_IF_ERROR(Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
    ZS_RETURN_IF_ERROR(Finalize(pack, "the VARIANT_PACK descriptor"));
    ZS_CUDNN_RETURN_IF_ERROR(cudnnBackendExecute(handle, plan_, pack));
    return absl::OkStatus();
  };
  absl::Status s = run();
  cudnnBackendDestroyDescriptor(pack);
  return s;
}

}  // namespace zeroshard::cuda
