// The cuDNN path of the image ops (built only with the CUDA toolkit); see
// kernels/cuda/cudnn_ops.h. Convolutions: the graph (backend) API first, one
// CudnnGraph per (pass, device, geometry, dtype) built once and cached (a
// refusal is cached too), its workspace a scratch tensor from the operands'
// allocator; f32 graphs pass over engines noted TENSOR_CORE (TF32) or
// DOWN_CONVERT_INPUTS, and graphs of every dtype over those noted
// REDUCED_PRECISION_REDUCTION, so the compute stays fp32.
// When no engine takes the graph (or a pointer is not 16-byte aligned) the
// legacy descriptor API runs instead: the first algorithm of cuDNN's heuristic
// ranking (cudnnGet*Algorithm_v7) whose workspace fits kMaxWorkspaceBytes.
// Bias add and the bias gradient stay on the legacy calls. BatchNorm: legacy
// API, CUDNN_BATCHNORM_SPATIAL mode. Operands are made contiguous and of one
// dtype on the device first (x and weight of different dtypes meet in f32);
// f32 data runs with FMA math (no TF32), so the results follow the CPU twins
// within sum-order rounding.
//
// Note: the graph path has been compiled and linked but never run on a GPU.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/kernels/cuda/conv_cudnn_graph.h"
#include "zeroshard/kernels/cuda/conv_graph_desc.h"
#include "zeroshard/kernels/cuda/cudnn_graph.h"
#include "zeroshard/kernels/cuda/cudnn_ops.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/runtime/cuda/cuda_status.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/library_status.h"
#include "zeroshard/runtime/status.h"

// cuDNN 9 marks the legacy convolution and BatchNorm calls deprecated in
// favour of the graph API; they remain supported: BatchNorm and the
// convolutions' fallback use them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace zeroshard::cuda {

namespace {

constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

// One cuDNN handle per device for the process, on the legacy default stream
// (kOpStream), like the other op entries.
absl::StatusOr<cudnnHandle_t> Handle(int device) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* handles = new absl::flat_hash_map<int, cudnnHandle_t>();
  absl::MutexLock lock(&mu);
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudnnHandle_t h = nullptr;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
  (*handles)[device] = h;
  return h;
}

absl::StatusOr<cudnnDataType_t> ToCudnn(DType d) {
  switch (d) {
    case DType::kF32: return CUDNN_DATA_FLOAT;
    case DType::kBF16: return CUDNN_DATA_BFLOAT16;
    case DType::kF16: return CUDNN_DATA_HALF;
    default: return absl::InvalidArgumentError(absl::StrCat("cuDNN: no float type for ", DTypeName(d)));
  }
}

// RAII owners of one call's descriptors.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  ~TensorDesc() {
    if (d != nullptr) cudnnDestroyTensorDescriptor(d);
  }
  absl::Status Set(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w) {
    ZS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d));
    ZS_ASSIGN_OR_RETURN(cudnnDataType_t t, ToCudnn(dtype));
    ZS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, static_cast<int>(n),
                                                        static_cast<int>(c), static_cast<int>(h),
                                                        static_cast<int>(w)));
    return absl::OkStatus();
  }
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  ~FilterDesc() {
    if (d != nullptr) cudnnDestroyFilterDescriptor(d);
  }
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ~ConvDesc() {
    if (d != nullptr) cudnnDestroyConvolutionDescriptor(d);
  }
};

// The descriptors of one convolution in `dtype`.
struct ConvSetup {
  DType dtype;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
};

absl::Status Setup(const Conv2dGeometry& g, DType dtype, ConvSetup& s) {
  s.dtype = dtype;
  ZS_ASSIGN_OR_RETURN(cudnnDataType_t t, ToCudnn(dtype));
  ZS_RETURN_IF_ERROR(s.x.Set(dtype, g.n, g.c, g.h, g.w));
  ZS_RETURN_IF_ERROR(s.y.Set(dtype, g.n, g.o, g.oh, g.ow));
  ZS_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&s.w.d));
  ZS_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(s.w.d, t, CUDNN_TENSOR_NCHW, static_cast<int>(g.o),
                                                      static_cast<int>(g.cg()), static_cast<int>(g.kh),
                                                      static_cast<int>(g.kw)));
  ZS_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&s.conv.d));
  ZS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      s.conv.d, static_cast<int>(g.ph), static_cast<int>(g.pw), static_cast<int>(g.sh), static_cast<int>(g.sw),
      static_cast<int>(g.dh), static_cast<int>(g.dw), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  ZS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(s.conv.d, static_cast<int>(g.groups)));
  ZS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(
      s.conv.d, dtype == DType::kF32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  return absl::OkStatus();
}

// The first of cuDNN's ranked algorithms that succeeded and whose workspace fits.
template <typename Perf>
absl::StatusOr<Perf> Pick(const std::vector<Perf>& perf, int count, absl::string_view what) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspaceBytes) return perf[i];
  }
  return absl::UnimplementedError(absl::StrCat("cuDNN: no ", what, " algorithm for this convolution within ",
                                               kMaxWorkspaceBytes >> 20, " MiB of workspace"));
}

// A scratch buffer of at least `bytes` from `like`'s allocator (null when 0).
absl::StatusOr<Tensor> Workspace(const Tensor& like, size_t bytes) {
  if (bytes == 0) return Tensor();
  return DeviceEmpty("cuDNN workspace", like, {static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32);
}

void* Ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// An output computed in `dtype` contiguous: the output itself when it already
// is, else a scratch tensor that Finish() converts (and adds, with accumulate) into it.
struct Staged {
  Tensor out, work;
  // scratch: stage even an output that is already contiguous in `dtype`.
  static absl::StatusOr<Staged> For(absl::string_view op, const Tensor& out, DType dtype,
                                    bool scratch = false) {
    Staged s{out, out};
    if (out.defined() && (scratch || out.dtype() != dtype || !out.is_contiguous())) {
      ZS_ASSIGN_OR_RETURN(s.work, DeviceEmpty(op, out, out.shape(), dtype));
    }
    return s;
  }
  // Whether cuDNN may blend into the output itself (beta = 1).
  bool direct() const { return out.defined() && IsSameView(out, work); }
  absl::Status Finish(absl::string_view op, bool accumulate) const {
    if (!out.defined() || direct()) return absl::OkStatus();
    if (accumulate) return Add(out, work, out);
    return Cast(work, out);
  }
};


// ---------------------------------------------------------------- graph path

// Unique ids of the graph tensors; the backward passes bind dx to kConvX,
// dy to kConvY and dw to kConvW.
enum ConvUid : int64_t { kConvX = 1, kConvW = 2, kConvY = 3 };

// cuDNN tensors of the graph declare 16-byte alignment.
bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

absl::Status BuildConvGraph(CudnnGraph& graph, ConvGraphPass pass, const Conv2dGeometry& g,
                            DType dtype) {
  ZS_ASSIGN_OR_RETURN(cudnnDataType_t t, ToCudnn(dtype));
  const ConvGraphDesc d = ConvGraphDescFor(g);
  ZS_ASSIGN_OR_RETURN(auto x, graph.Tensor(kConvX, t, d.x.dims, d.x.strides));
  ZS_ASSIGN_OR_RETURN(auto w, graph.Tensor(kConvW, t, d.w.dims, d.w.strides));
  ZS_ASSIGN_OR_RETURN(auto y, graph.Tensor(kConvY, t, d.y.dims, d.y.strides));
  ZS_ASSIGN_OR_RETURN(auto conv, graph.Convolution(d.padding, d.strides, d.dilations));
  switch (pass) {
    case ConvGraphPass::kForward: ZS_RETURN_IF_ERROR(graph.ConvForward(conv, x, w, y)); break;
    case ConvGraphPass::kBackwardData: ZS_RETURN_IF_ERROR(graph.ConvBackwardData(conv, w, y, x)); break;
    case ConvGraphPass::kBackwardFilter: ZS_RETURN_IF_ERROR(graph.ConvBackwardFilter(conv, x, y, w)); break;
  }
  if (dtype == DType::kF32) {
    graph.ExcludeNumericalNotes({CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
                                 CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION});
  } else {
    graph.ExcludeNumericalNotes({CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION});
  }
  return absl::OkStatus();
}

namespace {

struct CachedConvGraph {
  std::unique_ptr<CudnnGraph> graph;  // null: refused
  absl::Status refusal;
};

// The cached graph of one pass, built on first use. Unimplemented (cached)
// when cuDNN refuses any part of it: the caller may fall back to the legacy
// API. Any failure while building counts as a refusal: the graph path is
// optional, the legacy one is not.
absl::StatusOr<CudnnGraph*> ConvGraphFor(ConvGraphPass pass, const Conv2dGeometry& g, DType dtype,
                                         cudnnHandle_t handle, int device) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, CachedConvGraph>();
  const std::string key = ConvGraphKey(pass, device, g, dtype);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it == cache->end()) {
    CachedConvGraph entry;
    auto graph = std::make_unique<CudnnGraph>();
    absl::Status s = BuildConvGraph(*graph, pass, g, dtype);
    if (s.ok()) s = graph->Build(handle);
    if (s.ok()) {
      entry.graph = std::move(graph);
    } else {
      entry.refusal = s;
    }
    it = cache->emplace(key, std::move(entry)).first;
  }
  if (it->second.graph == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN graph convolution (", key, "): ", it->second.refusal.ToString()));
  }
  return it->second.graph.get();
}

// The graph to run `pass` with, or null when the legacy API should (path
// kLegacy, or kAuto and cuDNN refused the graph or an input is misaligned).
// With kGraph a refusal is the error.
absl::StatusOr<CudnnGraph*> ChooseGraph(ConvGraphPass pass, const Conv2dGeometry& g, DType dtype,
                                        cudnnHandle_t handle, int device,
                                        std::initializer_list<const void*> inputs) {
  const CudnnConvPath path = GetCudnnConvPath();
  if (path == CudnnConvPath::kLegacy) return nullptr;
  absl::StatusOr<CudnnGraph*> graph = absl::UnimplementedError("");
  if (std::all_of(inputs.begin(), inputs.end(), Aligned16)) {
    graph = ConvGraphFor(pass, g, dtype, handle, device);
  } else {
    graph = absl::UnimplementedError(absl::StrCat("cuDNN graph convolution (", ConvGraphPassName(pass),
                                                  "): an input is not 16-byte aligned"));
  }
  if (graph.ok() || path == CudnnConvPath::kGraph) return graph;
  return nullptr;  // kAuto: the legacy API
}

// Runs `graph` with its workspace from `like`'s allocator.
absl::Status RunConvGraph(const CudnnGraph& graph, cudnnHandle_t handle, const Tensor& like, void* x,
                          void* w, void* y) {
  ZS_ASSIGN_OR_RETURN(Tensor ws, Workspace(like, static_cast<size_t>(graph.workspace_bytes())));
  ZS_RETURN_IF_ERROR(graph.Execute(handle, {kConvX, kConvW, kConvY}, {x, w, y}, Ptr(ws)));
  CountCudnnConvPass(/*graph=*/true);
  return absl::OkStatus();
}

// Whether an output must be staged for the graph path (its pointer misaligned).
bool Misaligned(const Tensor& t) { return t.defined() && !Aligned16(t.raw_data()); }

}  // namespace

bool UseOwnImageKernels(int device) {
  const CudnnConvPath path = GetCudnnConvPath();
  if (path == CudnnConvPath::kOwn) return true;
  if (path != CudnnConvPath::kAuto) return false;
  // The simulated device (tools/cuda/sim) names itself "cuda_sim"; asked once per device.
  static absl::Mutex mu(absl::kConstInit);
  static auto* simulated = new absl::flat_hash_map<int, bool>();
  absl::MutexLock lock(&mu);
  auto it = simulated->find(device);
  if (it == simulated->end()) {
    const absl::StatusOr<std::string> name = CudaDeviceName(device);
    it = simulated->emplace(device, name.ok() && name->rfind("cuda_sim", 0) == 0).first;
  }
  return it->second;
}

absl::Status CudnnConv2dForward(const Conv2dGeometry& g, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const Tensor& y) {
  constexpr absl::string_view op = "Conv2dForward";
  if (y.numel() == 0) return absl::OkStatus();
  const DType dtype = x.dtype() == weight.dtype() ? x.dtype() : DType::kF32;
  const int device = x.device().index;
  ZS_ASSIGN_OR_RETURN(Tensor xc, ContiguousOnDevice(op, x, dtype));
  ZS_ASSIGN_OR_RETURN(Tensor wc, ContiguousOnDevice(op, weight, dtype));
  ZS_ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(device));
  ConvSetup s;
  ZS_RETURN_IF_ERROR(Setup(g, dtype, s));
  const float one = 1.0f, zero = 0.0f;
  ZS_ASSIGN_OR_RETURN(CudnnGraph * graph,
                      ChooseGraph(ConvGraphPass::kForward, g, dtype, h, device, {xc.raw_data(), wc.raw_data()}));
  ZS_ASSIGN_OR_RETURN(Staged yo, Staged::For(op, y, dtype, /*scratch=*/graph != nullptr && Misaligned(y)));
  if (graph != nullptr) {
    ZS_RETURN_IF_ERROR(RunConvGraph(*graph, h, x, xc.raw_data(), wc.raw_data(), yo.work.raw_data()));
  } else {
    int count = 0;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    ZS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(h, s.x.d, s.w.d, s.conv.d, s.y.d,
                                                                    static_cast<int>(perf.size()), &count, perf.data()));
    ZS_ASSIGN_OR_RETURN(cudnnConvolutionFwdAlgoPerf_t algo, Pick(perf, count, "forward"));
    ZS_ASSIGN_OR_RETURN(Tensor ws, Workspace(x, algo.memory));
    ZS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(h, &one, s.x.d, xc.raw_data(), s.w.d, wc.raw_data(), s.conv.d,
                                                     algo.algo, Ptr(ws), algo.memory, &zero, s.y.d,
                                                     yo.work.raw_data()));
    CountCudnnConvPass(/*graph=*/false);
  }
  if (bias.defined()) {
    ZS_ASSIGN_OR_RETURN(Tensor bc, ContiguousOnDevice(op, bias, dtype));
    TensorDesc bd;
    ZS_RETURN_IF_ERROR(bd.Set(dtype, 1, g.o, 1, 1));
    ZS_CUDNN_RETURN_IF_ERROR(cudnnAddTensor(h, &one, bd.d, bc.raw_data(), &one, s.y.d, yo.work.raw_data()));
  }
  return yo.Finish(op, /*accumulate=*/false);
}

absl::Status CudnnConv2dBackward(const Conv2dGeometry& g, const Tensor& dy, const Tensor& x,
                                 const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias, bool accumulate) {
  constexpr absl::string_view op = "Conv2dBackward";
  const DType dtype = x.dtype() == weight.dtype() ? x.dtype() : DType::kF32;
  const int device = x.device().index;
  ZS_ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(device));
  ConvSetup s;
  ZS_RETURN_IF_ERROR(Setup(g, dtype, s));
  ZS_ASSIGN_OR_RETURN(Tensor dyc, ContiguousOnDevice(op, dy, dtype));
  const float one = 1.0f, zero = 0.0f;
  // The graph path needs every size non-zero; empty passes take the legacy calls.
  const bool nonempty = dy.numel() > 0 && x.numel() > 0 && weight.numel() > 0;
  if (dx.defined() && dx.numel() > 0) {
    ZS_ASSIGN_OR_RETURN(Tensor wc, ContiguousOnDevice(op, weight, dtype));
    CudnnGraph* graph = nullptr;
    if (nonempty) {
      ZS_ASSIGN_OR_RETURN(graph, ChooseGraph(ConvGraphPass::kBackwardData, g, dtype, h, device,
                                             {wc.raw_data(), dyc.raw_data()}));
    }
    ZS_ASSIGN_OR_RETURN(Staged o, Staged::For(op, dx, dtype, /*scratch=*/graph != nullptr && Misaligned(dx)));
    if (graph != nullptr) {
      ZS_RETURN_IF_ERROR(RunConvGraph(*graph, h, x, o.work.raw_data(), wc.raw_data(), dyc.raw_data()));
    } else {
      int count = 0;
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      ZS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, s.w.d, s.y.d, s.conv.d, s.x.d, static_cast<int>(perf.size()), &count, perf.data()));
      ZS_ASSIGN_OR_RETURN(cudnnConvolutionBwdDataAlgoPerf_t algo, Pick(perf, count, "backward-data"));
      ZS_ASSIGN_OR_RETURN(Tensor ws, Workspace(x, algo.memory));
      ZS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(h, &one, s.w.d, wc.raw_data(), s.y.d, dyc.raw_data(),
                                                            s.conv.d, algo.algo, Ptr(ws), algo.memory, &zero, s.x.d,
                                                            o.work.raw_data()));
      CountCudnnConvPass(/*graph=*/false);
    }
    ZS_RETURN_IF_ERROR(o.Finish(op, false));
  }
  if (dweight.defined()) {
    ZS_ASSIGN_OR_RETURN(Tensor xc, ContiguousOnDevice(op, x, dtype));
    CudnnGraph* graph = nullptr;
    if (nonempty) {
      ZS_ASSIGN_OR_RETURN(graph, ChooseGraph(ConvGraphPass::kBackwardFilter, g, dtype, h, device,
                                             {xc.raw_data(), dyc.raw_data()}));
    }
    // The graph writes with beta = 0: accumulation goes through scratch.
    ZS_ASSIGN_OR_RETURN(Staged o, Staged::For(op, dweight, dtype,
                                              /*scratch=*/graph != nullptr && (accumulate || Misaligned(dweight))));
    if (graph != nullptr) {
      ZS_RETURN_IF_ERROR(RunConvGraph(*graph, h, x, xc.raw_data(), o.work.raw_data(), dyc.raw_data()));
    } else {
      int count = 0;
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      ZS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, s.x.d, s.y.d, s.conv.d, s.w.d, static_cast<int>(perf.size()), &count, perf.data()));
      ZS_ASSIGN_OR_RETURN(cudnnConvolutionBwdFilterAlgoPerf_t algo, Pick(perf, count, "backward-filter"));
      ZS_ASSIGN_OR_RETURN(Tensor ws, Workspace(x, algo.memory));
      const float beta = accumulate && o.direct() ? 1.0f : 0.0f;
      ZS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(h, &one, s.x.d, xc.raw_data(), s.y.d, dyc.raw_data(),
                                                              s.conv.d, algo.algo, Ptr(ws), algo.memory, &beta, s.w.d,
                                                              o.work.raw_data()));
      CountCudnnConvPass(/*graph=*/false);
    }
    ZS_RETURN_IF_ERROR(o.Finish(op, accumulate));
  }
  if (dbias.defined() && dbias.numel() > 0) {
    // dbias = dy summed over N, H and W, by our axis reduction (fp32 sums in a
    // fixed order) rather than cudnnConvolutionBackwardBias, which refuses bf16
    // (CUDNN_STATUS_NOT_SUPPORTED on an H200 with cuDNN 9.19, docs/gpu.md). dy
    // [N, C, H, W] is viewed as [N, C, HW]: HW summed, then N, both into f32.
    const int64_t n = dyc.size(0), c = dyc.size(1), hw = dyc.numel() / std::max<int64_t>(1, n * c);
    ZS_ASSIGN_OR_RETURN(Tensor dy3, dyc.Reshape({n, c, hw}));
    ZS_ASSIGN_OR_RETURN(Tensor per_image, DeviceEmpty(op, dyc, {n, c}, DType::kF32));
    ZS_RETURN_IF_ERROR(Sum(dy3, 2, per_image));
    ZS_ASSIGN_OR_RETURN(Tensor sum, DeviceEmpty(op, dyc, {c}, DType::kF32));
    ZS_RETURN_IF_ERROR(Sum(per_image, 0, sum));
    ZS_RETURN_IF_ERROR(accumulate ? Add(dbias, sum, dbias) : dbias.CopyFrom(sum));
  }
  return absl::OkStatus();
}

namespace {

// A contiguous f32 [C] device tensor: `t`, or `fill` everywhere when undefined.
absl::StatusOr<Tensor> ParamOrFill(absl::string_view op, const Tensor& t, const Tensor& like, int64_t c,
                                   double fill) {
  if (t.defined()) return ContiguousOnDevice(op, t, DType::kF32);
  ZS_ASSIGN_OR_RETURN(Tensor f, DeviceEmpty(op, like, {c}, DType::kF32));
  ZS_RETURN_IF_ERROR(f.Fill(fill));
  return f;
}

absl::Status CheckStats(absl::string_view op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->defined() && !t->is_contiguous()) {
      return absl::UnimplementedError(absl::StrCat(op, " on ", t->device().ToString(), ": statistics tensor ",
                                                   t->DebugString(), " must be contiguous for cuDNN"));
    }
  }
  return absl::OkStatus();
}

// The (H, W) of x as cuDNN's spatial BatchNorm sees it: [N, C, H, W] as it is,
// and BatchNorm1d's [N, C, L] and [N, C] as [N, C, L, 1] and [N, C, 1, 1] (the
// same contiguous bytes; statistics per channel over N and L either way).
absl::StatusOr<std::pair<int64_t, int64_t>> Hw(absl::string_view op, const Tensor& x) {
  switch (x.dim()) {
    case 2: return std::pair<int64_t, int64_t>{1, 1};
    case 3: return std::pair<int64_t, int64_t>{x.size(2), 1};
    case 4: return std::pair<int64_t, int64_t>{x.size(2), x.size(3)};
    default:
      return absl::UnimplementedError(absl::StrCat(op, " on ", x.device().ToString(),
                                                   ": cuDNN BatchNorm takes [N, C], [N, C, L] or [N, C, H, W], got ",
                                                   ShapeToString(x.shape())));
  }
}

}  // namespace

absl::Status CudnnBatchNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var, bool training,
                                   double momentum, double eps, const Tensor& y, const Tensor& save_mean,
                                   const Tensor& save_rstd) {
  constexpr absl::string_view op = "BatchNormForward";
  if (x.numel() == 0) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(auto hw, Hw(op, x));
  if (eps < CUDNN_BN_MIN_EPSILON) {
    return absl::UnimplementedError(absl::StrCat(op, ": eps ", eps, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON));
  }
  ZS_RETURN_IF_ERROR(CheckStats(op, {&running_mean, &running_var, &save_mean, &save_rstd}));
  const int64_t c = x.size(1);
  const DType dtype = x.dtype();
  ZS_ASSIGN_OR_RETURN(Tensor xc, ContiguousOnDevice(op, x, dtype));
  ZS_ASSIGN_OR_RETURN(Staged yo, Staged::For(op, y, dtype));
  ZS_ASSIGN_OR_RETURN(Tensor w, ParamOrFill(op, weight, x, c, 1.0));
  ZS_ASSIGN_OR_RETURN(Tensor b, ParamOrFill(op, bias, x, c, 0.0));
  ZS_ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(x.device().index));
  TensorDesc xd, pd;
  ZS_RETURN_IF_ERROR(xd.Set(dtype, x.size(0), c, hw.first, hw.second));
  ZS_RETURN_IF_ERROR(pd.Set(DType::kF32, 1, c, 1, 1));
  const float one = 1.0f, zero = 0.0f;
  if (training) {
    ZS_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardTraining(
        h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, xc.raw_data(), xd.d, yo.work.raw_data(), pd.d, w.raw_data(),
        b.raw_data(), momentum, Ptr(running_mean), Ptr(running_var), eps, Ptr(save_mean), Ptr(save_rstd)));
    return yo.Finish(op, false);
  }
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardInference(
      h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, xc.raw_data(), xd.d, yo.work.raw_data(), pd.d, w.raw_data(),
      b.raw_data(), running_mean.raw_data(), running_var.raw_data(), eps));
  ZS_RETURN_IF_ERROR(yo.Finish(op, false));
  // The backward's constants: the running mean and 1 / sqrt(running_var + eps).
  if (save_mean.defined()) ZS_RETURN_IF_ERROR(CastInto(op, running_mean, save_mean));
  if (save_rstd.defined()) {
    ZS_RETURN_IF_ERROR(Affine(running_var, 1.0, eps, save_rstd));
    ZS_RETURN_IF_ERROR(Rsqrt(save_rstd, save_rstd));
  }
  return absl::OkStatus();
}

absl::Status CudnnBatchNormBackward(const Tensor& dy, const Tensor& x, const Tensor& save_mean,
                                    const Tensor& save_rstd, const Tensor& weight, bool training,
                                    const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                    bool accumulate) {
  constexpr absl::string_view op = "BatchNormBackward";
  if (!training) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", x.device().ToString(),
                                                 ": eval-mode (frozen statistics) backward has no cuDNN kernel yet"));
  }
  ZS_ASSIGN_OR_RETURN(auto hw, Hw(op, x));
  ZS_RETURN_IF_ERROR(CheckStats(op, {&save_mean, &save_rstd}));
  const int64_t c = x.size(1);
  const DType dtype = x.dtype();
  ZS_ASSIGN_OR_RETURN(Tensor xc, ContiguousOnDevice(op, x, dtype));
  ZS_ASSIGN_OR_RETURN(Tensor dyc, ContiguousOnDevice(op, dy, dtype));
  ZS_ASSIGN_OR_RETURN(Tensor w, ParamOrFill(op, weight, x, c, 1.0));
  // cuDNN writes all three gradients (scratch for the ones not wanted) and
  // blends both parameter gradients with one beta: it adds into them itself
  // only when both are wanted as contiguous f32; otherwise they go through
  // scratch and are added or converted afterwards.
  auto f32_direct = [](const Tensor& t) { return t.defined() && t.dtype() == DType::kF32 && t.is_contiguous(); };
  const bool both_direct = f32_direct(dweight) && f32_direct(dbias);
  const bool blend = accumulate && both_direct;
  ZS_ASSIGN_OR_RETURN(Staged dxo, Staged::For(op, dx, dtype));
  Tensor dx_work = dxo.work;
  if (!dx_work.defined()) {
    ZS_ASSIGN_OR_RETURN(dx_work, DeviceEmpty(op, x, x.shape(), dtype));
  }
  Tensor dw_work = dweight, db_work = dbias;
  if (!(blend || (!accumulate && f32_direct(dweight)))) {
    ZS_ASSIGN_OR_RETURN(dw_work, DeviceEmpty(op, x, {c}, DType::kF32));
  }
  if (!(blend || (!accumulate && f32_direct(dbias)))) {
    ZS_ASSIGN_OR_RETURN(db_work, DeviceEmpty(op, x, {c}, DType::kF32));
  }
  ZS_ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(x.device().index));
  TensorDesc xd, pd;
  ZS_RETURN_IF_ERROR(xd.Set(dtype, x.size(0), c, hw.first, hw.second));
  ZS_RETURN_IF_ERROR(pd.Set(DType::kF32, 1, c, 1, 1));
  const float one = 1.0f, zero = 0.0f, beta_param = blend ? 1.0f : 0.0f;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationBackward(
      h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &beta_param, xd.d, xc.raw_data(), xd.d, dyc.raw_data(), xd.d,
      dx_work.raw_data(), pd.d, w.raw_data(), dw_work.raw_data(), db_work.raw_data(), CUDNN_BN_MIN_EPSILON,
      save_mean.raw_data(), save_rstd.raw_data()));
  if (dx.defined()) ZS_RETURN_IF_ERROR(dxo.Finish(op, false));
  for (const auto& [out, work] : {std::pair{&dweight, &dw_work}, std::pair{&dbias, &db_work}}) {
    if (!out->defined() || IsSameView(*out, *work)) continue;
    ZS_RETURN_IF_ERROR(accumulate ? Add(*out, *work, *out) : Cast(*work, *out));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::cuda
