// CublasLtGemm over cuBLASLt (built only with the CUDA toolkit).
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/kernels/cuda/cublaslt_desc.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/cuda_status.h"
#include "zeroshard/runtime/cuda/library_status.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::cuda {

namespace {

// Owner of the preference of one heuristic query.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

absl::Status MakeLayout(cublasLtMatrixLayout_t* layout, DType dtype, int64_t rows, int64_t cols,
                        int64_t ld, int64_t batch, int64_t stride) {
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(layout, CublasLtDataType(dtype),
                                                       static_cast<uint64_t>(rows),
                                                       static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return absl::OkStatus();
}

// The largest power of two (up to 256) dividing the address.
uint32_t Alignment(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

// What decides the algorithm: the call's shape, types, epilogue and alignments.
std::string CacheKey(const GemmCall& c) {
  const RowMajorGemm& g = c.shape;
  auto align = [](const void* p) { return p == nullptr ? 0u : Alignment(p); };
  return absl::StrCat(g.m, ",", g.n, ",", g.k, ",", g.transpose_a, g.transpose_b, ",", g.lda, ",",
                      g.ldb, ",", g.ldc, ",", g.batch, ",", g.stride_a, ",", g.stride_b, ",",
                      g.stride_c, ";", static_cast<int>(c.ab_dtype), static_cast<int>(c.c_dtype),
                      ";", c.bias != nullptr, c.gelu, c.allow_tf32, c.beta != 0.0f,
                      c.bias_grad != nullptr, c.gelu_aux != nullptr, c.dgelu_aux != nullptr, ";",
                      static_cast<int>(c.bias_dtype.value_or(c.c_dtype)), ";", align(c.a), ",",
                      align(c.b), ",", align(c.c), ",", align(c.bias), ",", align(c.bias_grad), ",",
                      align(c.gelu_aux), ",", align(c.dgelu_aux), ",", c.aux_ld);
}

}  // namespace

cudaDataType_t CublasLtDataType(DType d) {
  switch (d) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

absl::Status CheckGemmCall(const GemmCall& c) {
  if (const char* bad = CheckRowMajorGemm(c.shape); bad != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM: ", bad));
  }
  const bool half_in = c.ab_dtype == DType::kBF16 || c.ab_dtype == DType::kF16;
  const bool ok_types = c.ab_dtype == DType::kF32 ? c.c_dtype == DType::kF32
                                                  : half_in && (c.c_dtype == c.ab_dtype ||
                                                                c.c_dtype == DType::kF32);
  if (!ok_types) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuBLASLt GEMM: inputs ", DTypeName(c.ab_dtype), " with output ", DTypeName(c.c_dtype),
        " is not supported (bf16/f16 inputs write their own dtype or f32; f32 inputs write f32)"));
  }
  if (c.allow_tf32 && c.ab_dtype != DType::kF32) {
    return absl::InvalidArgumentError("cuBLASLt GEMM: allow_tf32 applies to f32 inputs only");
  }
  if (c.a == nullptr || c.b == nullptr || c.c == nullptr) {
    return absl::InvalidArgumentError("cuBLASLt GEMM: null operand");
  }
  if (c.bias_grad != nullptr) {
    if (c.bias != nullptr || c.gelu) {
      return absl::InvalidArgumentError(
          "cuBLASLt GEMM: the bias-gradient epilogue takes no bias and no GELU");
    }
    if (c.shape.batch != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuBLASLt GEMM: the bias-gradient epilogue needs batch 1, got ", c.shape.batch));
    }
  }
  // Note [GELU in the GEMM]: the aux epilogues.
  if (c.gelu_aux != nullptr && !c.gelu) {
    return absl::InvalidArgumentError("cuBLASLt GEMM: gelu_aux is written by the GELU epilogue only (gelu = true)");
  }
  if (c.dgelu_aux != nullptr && (c.gelu || c.bias != nullptr || c.bias_grad != nullptr)) {
    return absl::InvalidArgumentError("cuBLASLt GEMM: the GELU-gradient epilogue takes no bias, GELU or bias gradient");
  }
  if (c.gelu_aux != nullptr || c.dgelu_aux != nullptr) {
    if (c.shape.batch != 1 || c.beta != 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuBLASLt GEMM: the GELU aux epilogues need batch 1 and beta 0, got batch ", c.shape.batch, ", beta ",
          c.beta));
    }
    if (c.aux_ld < c.shape.n || c.aux_ld % 8 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM: aux_ld must be a multiple of 8 and at least N = ",
                                                     c.shape.n, ", got ", c.aux_ld));
    }
  }
  return absl::OkStatus();
}

CublasLtDescriptors::~CublasLtDescriptors() {
  if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
  if (second != nullptr) cublasLtMatrixLayoutDestroy(second);
  if (first != nullptr) cublasLtMatrixLayoutDestroy(first);
  if (op != nullptr) cublasLtMatmulDescDestroy(op);
}

absl::Status MakeCublasLtDescriptors(const GemmCall& call, CublasLtDescriptors& desc) {
  ZS_RETURN_IF_ERROR(CheckGemmCall(call));
  const ColumnMajorGemm cm = ToColumnMajor(call.shape);
  const cublasComputeType_t compute =
      call.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc.op, compute, CUDA_R_32F));
  const cublasOperation_t op_first = cm.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = cm.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                           &op_first, sizeof(op_first)));
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                           &op_second, sizeof(op_second)));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const bool aux = call.gelu_aux != nullptr;
  if (call.bias != nullptr) {
    epilogue = !call.gelu ? CUBLASLT_EPILOGUE_BIAS : aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
  } else if (call.gelu) {
    epilogue = aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU;
  }
  // Our A is cuBLASLt's B: the sums over K of op(A) are BGRADB's (Note [Bias
  // gradient in the GEMM]).
  if (call.bias_grad != nullptr) epilogue = CUBLASLT_EPILOGUE_BGRADB;
  if (call.dgelu_aux != nullptr) epilogue = CUBLASLT_EPILOGUE_DGELU;
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                           &epilogue, sizeof(epilogue)));
  if (call.bias != nullptr || call.bias_grad != nullptr) {
    const void* vector = call.bias != nullptr ? call.bias : call.bias_grad;
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector)));
    const cudaDataType_t bias_type = CublasLtDataType(call.bias_dtype.value_or(call.c_dtype));
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  if (aux || call.dgelu_aux != nullptr) {
    // The aux matrix is laid out as D: column-major [N, M] with ld aux_ld
    // (Note [Row-major GEMM on cuBLAS]); its type is D's (the attribute's default).
    const void* pointer = aux ? call.gelu_aux : call.dgelu_aux;
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pointer, sizeof(pointer)));
    const int64_t ld = call.aux_ld;
    ZS_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  ZS_RETURN_IF_ERROR(MakeLayout(&desc.first, call.ab_dtype, cm.first_rows, cm.first_cols,
                                cm.ld_first, cm.batch, cm.stride_first));
  ZS_RETURN_IF_ERROR(MakeLayout(&desc.second, call.ab_dtype, cm.second_rows, cm.second_cols,
                                cm.ld_second, cm.batch, cm.stride_second));
  ZS_RETURN_IF_ERROR(
      MakeLayout(&desc.d, call.c_dtype, cm.d_rows, cm.d_cols, cm.ld_d, cm.batch, cm.stride_d));
  return absl::OkStatus();
}

struct CublasLtGemm::Impl {
  int device = 0;
  cublasLtHandle_t handle = nullptr;
  Allocator* allocator = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  absl::Mutex mu;
  absl::flat_hash_map<std::string, cublasLtMatmulAlgo_t> algos ABSL_GUARDED_BY(mu);
  // Keys whose bias-gradient or GELU aux epilogue cuBLASLt took no algorithm for.
  absl::flat_hash_map<std::string, std::string> refused ABSL_GUARDED_BY(mu);
  int64_t queries ABSL_GUARDED_BY(mu) = 0;

  ~Impl() {
    if (workspace != nullptr) allocator->Deallocate(workspace, workspace_bytes);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtGemm::~CublasLtGemm() = default;

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(int device,
                                                                   Allocator* workspace_allocator,
                                                                   size_t workspace_bytes) {
  if (workspace_allocator == nullptr) {
    return absl::InvalidArgumentError("CublasLtGemm: no workspace allocator");
  }
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->allocator = workspace_allocator;
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&impl->handle));
  if (workspace_bytes > 0) {
    ZS_ASSIGN_OR_RETURN(impl->workspace, workspace_allocator->Allocate(workspace_bytes));
    impl->workspace_bytes = workspace_bytes;
  }
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(impl)));
}

int64_t CublasLtGemm::heuristic_queries() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->queries;
}

absl::Status CublasLtGemm::Run(const GemmCall& call, void* stream) {
  ZS_RETURN_IF_ERROR(CheckGemmCall(call));
  const RowMajorGemm& g = call.shape;
  if (g.m == 0 || g.n == 0) return absl::OkStatus();

  if (call.bias_grad != nullptr && !BiasGradEpilogueEnabled()) {
    return absl::UnimplementedError(
        "cuBLASLt GEMM: the bias-gradient epilogue is switched off (SetBiasGradEpilogue(false))");
  }
  const bool gelu_aux = call.gelu_aux != nullptr || call.dgelu_aux != nullptr;
  if (gelu_aux && !EpilogueEnabled(FusedEpilogue::kGelu)) {
    return absl::UnimplementedError(
        "cuBLASLt GEMM: the GELU aux epilogues are switched off (SetEpilogueEnabled(kGelu, false))");
  }
  CublasLtDescriptors desc;
  ZS_RETURN_IF_ERROR(MakeCublasLtDescriptors(call, desc));
  Preference pref;

  const std::string key = CacheKey(call);
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    absl::MutexLock lock(&impl_->mu);
    auto it = impl_->algos.find(key);
    if (it != impl_->algos.end()) {
      algo = it->second;
      cached = true;
    } else if (auto r = impl_->refused.find(key); r != impl_->refused.end()) {
      return absl::UnimplementedError(r->second);
    }
  }
  if (!cached) {
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref.pref));
    const uint64_t ws = impl_->workspace_bytes;
    ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // The heuristic assumes 256-byte aligned buffers unless told otherwise:
    // views and per-batch offsets are often less aligned. (cuBLASLt's A is our
    // B, its B our A: Note [Row-major GEMM on cuBLAS].)
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, call.b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, call.a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, call.c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, call.c}};
    for (const auto& [attribute, ptr] : aligned) {
      const uint32_t bytes = Alignment(ptr);
      ZS_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulPreferenceSetAttribute(pref.pref, attribute, &bytes, sizeof(bytes)));
    }
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof(result));
    int found = 0;
    const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
        impl_->handle, desc.op, desc.first, desc.second, desc.d, desc.d, pref.pref, 1, &result,
        &found);
    if ((call.bias_grad != nullptr || gelu_aux) && (heuristic == CUBLAS_STATUS_NOT_SUPPORTED ||
                                                    (heuristic == CUBLAS_STATUS_SUCCESS && found == 0))) {
      // Note [Bias gradient in the GEMM], Note [GELU in the GEMM]: the caller
      // runs our kernel after the plain GEMM.
      const std::string why = absl::StrCat(
          "cuBLASLt GEMM: no algorithm takes the ",
          call.bias_grad != nullptr ? "bias-gradient epilogue (BGRADB)"
          : call.gelu_aux != nullptr ? "GELU aux epilogue (GELU_AUX)" : "GELU-gradient epilogue (DGELU)",
          " for ", key, heuristic == CUBLAS_STATUS_NOT_SUPPORTED ? " (CUBLAS_STATUS_NOT_SUPPORTED)" : "");
      absl::MutexLock lock(&impl_->mu);
      impl_->refused[key] = why;
      ++impl_->queries;
      return absl::UnimplementedError(why);
    }
    ZS_CUBLAS_RETURN_IF_ERROR(heuristic);
    if (found == 0) {
      return absl::InternalError(absl::StrCat("cuBLASLt GEMM: no algorithm for ", key));
    }
    algo = result.algo;
    absl::MutexLock lock(&impl_->mu);
    impl_->algos[key] = algo;
    ++impl_->queries;
  }
  ZS_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      impl_->handle, desc.op, &call.alpha, call.b, desc.first, call.a, desc.second, &call.beta,
      call.c, desc.d, call.c, desc.d, &algo, impl_->workspace, impl_->workspace_bytes,
      static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::StatusOr<CublasLtGemm*> DefaultCublasLtGemm(int device) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* gemms = new absl::flat_hash_map<int, CublasLtGemm*>();
  absl::MutexLock lock(&mu);
  auto it = gemms->find(device);
  if (it != gemms->end()) return it->second;
  auto allocator = std::make_unique<CudaAllocator>(device);
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<CublasLtGemm> gemm,
                      CublasLtGemm::Create(device, allocator.get()));
  allocator.release();  // both live as long as the process
  CublasLtGemm* raw = gemm.release();
  (*gemms)[device] = raw;
  return raw;
}

}  // namespace zeroshard::cuda
