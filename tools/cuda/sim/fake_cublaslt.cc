// The cuBLASLt calls of kernels/cuda/gemm_cublaslt.cc answered on the CPU, for
// the simulated device (--define=cuda_sim=1; see fake_cudart.cc): linked
// instead of libcublasLt there (fake_cublas.cc answers libcublas's legacy
// calls, with the same loop: reference_gemm.h). A reference GEMM, not a fast one:
// D = epilogue(alpha op(A) op(B) + beta C [+ bias]) in cuBLAS's column-major
// terms, fp32 accumulation in k order, the GELU of the epilogues the CPU's
// tanh form (kernels/math/fast_math.h), results rounded to D's type once. What
// it takes is what this project asks of cuBLASLt: f32 / bf16 / f16 operands,
// 32F or 32F_FAST_TF32 compute (TF32 is computed as fp32), the DEFAULT, BIAS,
// GELU and GELU_BIAS epilogues, GELU_AUX and GELU_AUX_BIAS (GELU's input, in
// fp32, also stored to the aux matrix in D's type) and DGELU (the product times
// GeluTanhGrad of the aux matrix; Note [GELU in the GEMM]), with cuBLASLt's
// rules for them (aux ld a multiple of 8 and at least D's rows; batch 1),
// BGRADB (batch 1: the sums over k of op(B), Note [Bias gradient in the GEMM]),
// strided batches (a zero stride shares an operand), column-major layouts;
// anything else is CUBLAS_STATUS_NOT_SUPPORTED.
#include <cublasLt.h>

#include <cstdint>
#include <cstring>
#include <new>

#include "zeroshard/kernels/math/fast_math.h"
#include "zeroshard/tools/cuda/sim/reference_gemm.h"

namespace {

using ::zs_cuda_sim::GemmOperand;
using ::zs_cuda_sim::GemmTypeSize;
using ::zs_cuda_sim::GemmTypeSupported;

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
  bool bias_type_set = false;
  const void* aux = nullptr;  // GELU's input: written by GELU_AUX*, read by DGELU
  int64_t aux_ld = 0;
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t batch_stride = 0;
  int32_t order = CUBLASLT_ORDER_COL;
};
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));

Desc* D(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc*>(d->data); }
Layout* L(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l->data); }

// An attribute's value, which must be exactly a State.
template <typename State>
cublasStatus_t SetField(const void* buf, size_t bytes, State* field) {
  if (buf == nullptr || bytes != sizeof(State)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(State));
  return CUBLAS_STATUS_SUCCESS;
}

// An enum attribute passed as the integer type `Wire` (cublasLt.h says which).
template <typename Wire, typename Enum>
cublasStatus_t SetEnum(const void* buf, size_t bytes, Enum* field) {
  Wire v = 0;
  if (cublasStatus_t s = SetField(buf, bytes, &v); s != CUBLAS_STATUS_SUCCESS) return s;
  *field = static_cast<Enum>(v);
  return CUBLAS_STATUS_SUCCESS;
}

// What an epilogue asks for; `known` false for one this stand-in does not take.
struct Epilogue {
  bool known = true, bias = false, gelu = false, gelu_aux = false, dgelu = false, bgradb = false;
};

Epilogue Classify(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: return {};
    case CUBLASLT_EPILOGUE_BIAS: return {.bias = true};
    case CUBLASLT_EPILOGUE_GELU: return {.gelu = true};
    case CUBLASLT_EPILOGUE_GELU_BIAS: return {.bias = true, .gelu = true};
    case CUBLASLT_EPILOGUE_GELU_AUX: return {.gelu = true, .gelu_aux = true};
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return {.bias = true, .gelu = true, .gelu_aux = true};
    case CUBLASLT_EPILOGUE_DGELU: return {.dgelu = true};
    case CUBLASLT_EPILOGUE_BGRADB: return {.bgradb = true};
    default: return {.known = false};
  }
}

// The aux matrix as cuBLASLt requires it: set, ld a multiple of 8 and at least
// D's rows, batch 1 (this project never asks for the aux batch stride).
bool AuxUsable(const Desc& op, const Layout& d) {
  return op.aux != nullptr && op.aux_ld % 8 == 0 && op.aux_ld >= static_cast<int64_t>(d.rows) && d.batch == 1;
}

}  // namespace

extern "C" {

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    default:
      return "CUBLAS_STATUS (cuda_sim)";
  }
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  return cublasGetStatusName(status);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new char(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if ((compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) ||
      scale != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *desc = new cublasLtMatmulDescOpaque_t{};
  Desc* d = new ((*desc)->data) Desc();
  d->compute = compute;
  d->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc* d = D(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return SetEnum<int32_t>(buf, bytes, &d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return SetEnum<int32_t>(buf, bytes, &d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return SetEnum<uint32_t>(buf, bytes, &d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return SetField(buf, bytes, &d->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return SetField(buf, bytes, &d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return SetField(buf, bytes, &d->aux_ld);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
      const cublasStatus_t s = SetEnum<int32_t>(buf, bytes, &d->bias_type);
      if (s == CUBLAS_STATUS_SUCCESS) d->bias_type_set = true;
      return s;
    }
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (!GemmTypeSupported(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  Layout* l = new ((*layout)->data) Layout();
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t bytes) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Layout* l = L(layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return SetField(buf, bytes, &l->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return SetField(buf, bytes, &l->batch_stride);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return SetField(buf, bytes, &l->order);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t, const void* buf,
    size_t) {
  // Workspace and alignment preferences: the reference GEMM needs neither.
  return pref == nullptr || buf == nullptr ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  if (handle == nullptr || desc == nullptr || a == nullptr || b == nullptr || c == nullptr ||
      d == nullptr || returned == nullptr || (requested > 0 && results == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_SUCCESS;
  // cuBLASLt's rules for the epilogues (cublasLt.h): what it would find no algorithm for.
  const Epilogue e = Classify(D(desc)->epilogue);
  if (!e.known) return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((e.gelu_aux || e.dgelu) && !AuxUsable(*D(desc), *L(d))) return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha_ptr, const void* a,
    cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc,
    const void* beta_ptr, const void* c, cublasLtMatrixLayout_t c_desc, void* d,
    cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  if (handle == nullptr || desc == nullptr || a_desc == nullptr || b_desc == nullptr ||
      c_desc == nullptr || d_desc == nullptr || alpha_ptr == nullptr || beta_ptr == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Desc& op = *D(desc);
  const Layout &la = *L(a_desc), &lb = *L(b_desc), &lc = *L(c_desc), &ld = *L(d_desc);
  for (const Layout* l : {&la, &lb, &lc, &ld}) {
    if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = op.transa == CUBLAS_OP_T, tb = op.transb == CUBLAS_OP_T;
  const int64_t m = static_cast<int64_t>(ld.rows), n = static_cast<int64_t>(ld.cols);
  const int64_t k = static_cast<int64_t>(ta ? la.rows : la.cols);
  if (static_cast<int64_t>(ta ? la.cols : la.rows) != m ||
      static_cast<int64_t>(tb ? lb.rows : lb.cols) != n ||
      static_cast<int64_t>(tb ? lb.cols : lb.rows) != k || lc.rows != ld.rows ||
      lc.cols != ld.cols) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Epilogue e = Classify(op.epilogue);
  if (!e.known) return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((e.bias || e.bgradb) && op.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if ((e.gelu_aux || e.dgelu) && !AuxUsable(op, ld)) return CUBLAS_STATUS_INVALID_VALUE;
  if (e.bgradb && ld.batch != 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  const cudaDataType_t bias_type = op.bias_type_set ? op.bias_type : ld.type;
  const float alpha = *static_cast<const float*>(alpha_ptr);
  const float beta = *static_cast<const float*>(beta_ptr);
  // The aux matrix is laid out as D, in D's type (batch 1).
  const auto epilogue = [&](int64_t i, int64_t j, float v) {
    if (e.bias) v += ::zs_cuda_sim::GemmLoad(op.bias, bias_type, i);
    if (e.gelu_aux) ::zs_cuda_sim::GemmStore(const_cast<void*>(op.aux), ld.type, i + j * op.aux_ld, v);
    if (e.dgelu) return v * ::zeroshard::GeluTanhGrad(::zs_cuda_sim::GemmLoad(op.aux, ld.type, i + j * op.aux_ld));
    return e.gelu ? ::zeroshard::GeluTanh(v) : v;
  };
  if (e.bgradb) {
    // The bias gradient of B: column j of op(B) summed over k, in fp32 in k
    // order, rounded to the bias type once (written, not accumulated).
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t q = 0; q < k; ++q) {
        acc += ::zs_cuda_sim::GemmLoad(b, lb.type, tb ? j + q * lb.ld : q + j * lb.ld);
      }
      ::zs_cuda_sim::GemmStore(const_cast<void*>(op.bias), bias_type, j, acc);
    }
  }
  for (int64_t p = 0; p < ld.batch; ++p) {
    const char* ap = static_cast<const char*>(a) + p * la.batch_stride * GemmTypeSize(la.type);
    const char* bp = static_cast<const char*>(b) + p * lb.batch_stride * GemmTypeSize(lb.type);
    const char* cp = static_cast<const char*>(c) + p * lc.batch_stride * GemmTypeSize(lc.type);
    char* dp = static_cast<char*>(d) + p * ld.batch_stride * GemmTypeSize(ld.type);
    ::zs_cuda_sim::ReferenceGemm(m, n, k, alpha, GemmOperand{ap, la.type, la.ld, ta},
                                 GemmOperand{bp, lb.type, lb.ld, tb}, beta, cp, lc.type, lc.ld, dp,
                                 ld.type, ld.ld, epilogue);
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
