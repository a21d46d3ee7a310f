// The cuDNN path of the image ops (built only with the CUDA toolkit); see
// kernels/cuda/cudnn_ops.h. Legacy descriptor API: convolutions take the
// first algorithm of cuDNN's heuristic ranking (cudnnGet*Algorithm_v7) whose
// workspace fits kMaxWorkspaceBytes, the workspace a scratch tensor from the
// operands' allocator; BatchNorm in CUDNN_BATCHNORM_SPATIAL mode. Operands are
// made contiguous and of one dtype on the device first (x and weight of
// different dtypes meet in f32); f32 data runs with FMA math (no TF32), so the
// results follow the CPU twins within sum-order rounding.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cudnn_ops.h"
#include "kernels/cuda/op_util.h"
#include "kernels/elementwise.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/device_api.h"
#include "runtime/cuda/library_status.h"
#include "runtime/status.h"

// cuDNN 9 marks the legacy convolution and BatchNorm calls deprecated in
// favour of the graph API; they remain supported and are what this file uses.
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
  static absl::StatusOr<Staged> For(absl::string_view op, const Tensor& out, DType dtype) {
    Staged s{out, out};
    if (out.defined() && (out.dtype() != dtype || !out.is_contiguous())) {
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

}  // namespace

absl::Status CudnnConv2dForward(const Conv2dGeometry& g, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const Tensor& y) {
  constexpr absl::string_view op = "Conv2dForward";
  if (y.numel() == 0) return absl::OkStatus();
  const DType dtype = x.dtype() == weight.dtype() ? x.dtype() : DType::kF32;
  ZS_ASSIGN_OR_RETURN(Tensor xc, ContiguousOnDevice(op, x, dtype));
  ZS_ASSIGN_OR_RETURN(Tensor wc, ContiguousOnDevice(op, weight, dtype));
  ZS_ASSIGN_OR_RETURN(Staged yo, Staged::For(op, y, dtype));
  ZS_ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(x.device().index));
  ConvSetup s;
  ZS_RETURN_IF_ERROR(Setup(g, dtype, s));
  int count = 0;
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  ZS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(h, s.x.d, s.w.d, s.conv.d, s.y.d,
                                                                  static_cast<int>(perf.size()), &count, perf.data()));
  ZS_ASSIGN_OR_RETURN(cudnnConvolutionFwdAlgoPerf_t algo, Pick(perf, count, "forward"));
  ZS_ASSIGN_OR_RETURN(Tensor ws, Workspace(x, algo.memory));
  const float one = 1.0f, zero = 0.0f;
  ZS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(h, &one, s.x.d, xc.raw_data(), s.w.d, wc.raw_data(), s.conv.d,
                                                   algo.algo, Ptr(ws), algo.memory, &zero, s.y.d,
                                                   yo.work.raw_data()));
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
  ZS_ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(x.device().index));
  ConvSetup s;
  ZS_RETURN_IF_ERROR(Setup(g, dtype, s));
  ZS_ASSIGN_OR_RETURN(Tensor dyc, ContiguousOnDevice(op, dy, dtype));
  const float one = 1.0f, zero = 0.0f;
  if (dx.defined() && dx.numel() > 0) {
    ZS_ASSIGN_OR_RETURN(Tensor wc, ContiguousOnDevice(op, weight, dtype));
    ZS_ASSIGN_OR_RETURN(Staged o, Staged::For(op, dx, dtype));
    int count = 0;
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    ZS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, s.w.d, s.y.d, s.conv.d, s.x.d, static_cast<int>(perf.size()), &count, perf.data()));
    ZS_ASSIGN_OR_RETURN(cudnnConvolutionBwdDataAlgoPerf_t algo, Pick(perf, count, "backward-data"));
    ZS_ASSIGN_OR_RETURN(Tensor ws, Workspace(x, algo.memory));
    ZS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(h, &one, s.w.d, wc.raw_data(), s.y.d, dyc.raw_data(),
                                                          s.conv.d, algo.algo, Ptr(ws), algo.memory, &zero, s.x.d,
                                                          o.work.raw_data()));
    ZS_RETURN_IF_ERROR(o.Finish(op, false));
  }
  if (dweight.defined()) {
    ZS_ASSIGN_OR_RETURN(Tensor xc, ContiguousOnDevice(op, x, dtype));
    ZS_ASSIGN_OR_RETURN(Staged o, Staged::For(op, dweight, dtype));
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
    ZS_RETURN_IF_ERROR(o.Finish(op, accumulate));
  }
  if (dbias.defined()) {
    ZS_ASSIGN_OR_RETURN(Staged o, Staged::For(op, dbias, dtype));
    TensorDesc bd;
    ZS_RETURN_IF_ERROR(bd.Set(dtype, 1, g.o, 1, 1));
    const float beta = accumulate && o.direct() ? 1.0f : 0.0f;
    ZS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardBias(h, &one, s.y.d, dyc.raw_data(), &beta, bd.d,
                                                          o.work.raw_data()));
    ZS_RETURN_IF_ERROR(o.Finish(op, accumulate));
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

absl::StatusOr<std::pair<int64_t, int64_t>> Hw(absl::string_view op, const Tensor& x) {
  if (x.dim() != 4) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", x.device().ToString(), ": cuDNN BatchNorm takes [N, C, H, W], got ",
                                                 ShapeToString(x.shape())));
  }
  return std::pair<int64_t, int64_t>{x.size(2), x.size(3)};
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
