#include "zeroshard/kernels/embedding.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/embedding.h"
#include "zeroshard/kernels/cuda/cast_launch.h"
#include "zeroshard/kernels/cuda/embedding_launch.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/deferred_checks.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

// weight or dweight: a float [V, C].
absl::Status CheckTable(absl::string_view op, absl::string_view name, const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (t.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()),
                                                   ", expected [V, C]"));
  }
  return absl::OkStatus();
}

absl::Status CheckIds(absl::string_view op, const Tensor& ids) {
  if (!ids.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ids is undefined"));
  if (ids.dtype() != DType::kI32 && ids.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ids has dtype ", DTypeName(ids.dtype()),
                                                   ", expected i32 or i64"));
  }
  return absl::OkStatus();
}

// out or dout: float, of shape ids.shape + [C].
absl::Status CheckRowsOfIds(absl::string_view op, absl::string_view name, const Tensor& t,
                            const Tensor& ids, int64_t c) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  if (!IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  Shape want = ids.shape();
  want.push_back(c);
  if (t.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()),
                                                   ", expected ", ShapeToString(want), " (the shape of ids ",
                                                   ShapeToString(ids.shape()), ", then C = ", c, ")"));
  }
  return absl::OkStatus();
}

std::string OutOfRange(absl::string_view op, const Shape& shape, int64_t p, int64_t value, int64_t vocab) {
  return absl::StrCat(op, ": ids", IndexToString(shape, p), " = ", value, " is out of range [0, ", vocab,
                      ") (V, the rows of the embedding table)");
}

// The ids as int64 in row-major order, each checked to be in [0, vocab).
absl::StatusOr<std::vector<int64_t>> ReadIds(absl::string_view op, const Tensor& ids, int64_t vocab) {
  ZS_ASSIGN_OR_RETURN(std::vector<int64_t> v, ids.ToVector<int64_t>());
  for (size_t p = 0; p < v.size(); ++p) {
    if (v[p] >= 0 && v[p] < vocab) continue;
    return absl::InvalidArgumentError(OutOfRange(op, ids.shape(), static_cast<int64_t>(p), v[p], vocab));
  }
  return v;
}

// The CUDA range check of the ids: on the device into the thread's
// DeferredIdChecks when one is installed (nothing read back), else read back
// and checked here at once.
absl::Status CheckIdsOnCuda(absl::string_view op, const Tensor& idc, int64_t vocab) {
  DeferredIdChecks* checks = DeferredIdChecks::Active(idc.device());
  if (checks == nullptr) return ReadIds(op, idc, vocab).status();
  const int64_t check = checks->Add([op = std::string(op), shape = idc.shape(), vocab](int64_t p, int64_t v) {
    return OutOfRange(op, shape, p, v, vocab);
  });
  return cuda::CudaLaunchStatus(
      cuda::LaunchCheckIds(static_cast<int>(idc.dtype()), idc.raw_data(), idc.numel(), vocab,
                           /*allow_ignore=*/false, 0, check, checks->slot(), nullptr, cuda::kOpStream),
      cuda::LaunchWhat(op, idc));
}

}  // namespace

absl::Status Embedding(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  constexpr absl::string_view op = "Embedding";
  ZS_RETURN_IF_ERROR(CheckTable(op, "weight", weight));
  ZS_RETURN_IF_ERROR(CheckIds(op, ids));
  ZS_RETURN_IF_ERROR(CheckRowsOfIds(op, "out", out, ids, weight.size(1)));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "out", out, {&weight, &ids}, false));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&weight, &ids, &out}, op));
  switch (out.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&out}, {&ids, &out}, 0);  // gathered rows
    case DeviceType::kCpu: {
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> v, ReadIds(op, ids, weight.size(0)));
      if (out.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor w, RowMajorInput(weight, weight.dtype()));
      ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(out));
      cpu::Embedding(w, v.data(), o.tensor());
      return o.Finish();
    }
    case DeviceType::kCuda: {
      ZS_ASSIGN_OR_RETURN(Tensor idc, ids.Contiguous());
      ZS_RETURN_IF_ERROR(CheckIdsOnCuda(op, idc, weight.size(0)));
      if (out.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(const int64_t os, cuda::UniformRowStride(op, "out", out));
      ZS_ASSIGN_OR_RETURN(Tensor w, RowMajorInput(weight, weight.dtype()));
      return cuda::CudaLaunchStatus(
          cuda::LaunchEmbeddingForward(static_cast<int>(w.dtype()), static_cast<int>(out.dtype()),
                                       w.raw_data(), w.stride(0), static_cast<int>(idc.dtype()),
                                       idc.raw_data(), weight.size(0), out.raw_data(), os, idc.numel(),
                                       weight.size(1), cuda::kOpStream),
          cuda::LaunchWhat(op, out));
    }
  }
  return NoDeviceKernel(op, out.device());
}

absl::StatusOr<Tensor> Embedding(const Tensor& weight, const Tensor& ids) {
  ZS_RETURN_IF_ERROR(CheckTable("Embedding", "weight", weight));
  ZS_RETURN_IF_ERROR(CheckIds("Embedding", ids));
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, weight.dtype(), weight.allocator()));
  ZS_RETURN_IF_ERROR(Embedding(weight, ids, out));
  return out;
}

absl::Status EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dweight, GradMode mode) {
  constexpr absl::string_view op = "EmbeddingBackward";
  ZS_RETURN_IF_ERROR(CheckTable(op, "dweight", dweight));
  ZS_RETURN_IF_ERROR(CheckIds(op, ids));
  ZS_RETURN_IF_ERROR(CheckRowsOfIds(op, "dout", dout, ids, dweight.size(1)));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dweight", dweight, {&dout, &ids}, false));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dout, &ids, &dweight}, op));
  switch (dweight.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dweight}, {&ids, &dout, &dweight}, 1);
    case DeviceType::kCpu: {
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> v, ReadIds(op, ids, dweight.size(0)));
      // dweight's rows must have a unit stride: otherwise work on a contiguous
      // copy (holding its values when they are accumulated into).
      Tensor work = dweight;
      if (!HasContiguousRows(dweight)) {
        ZS_ASSIGN_OR_RETURN(work, mode == GradMode::kAccumulate
                                      ? dweight.Clone(DefaultCpuAllocator())
                                      : Tensor::Empty(dweight.shape(), dweight.dtype(), DefaultCpuAllocator()));
      }
      if (mode == GradMode::kOverwrite) ZS_RETURN_IF_ERROR(work.Fill(0.0));
      ZS_ASSIGN_OR_RETURN(Tensor d, RowMajorInput(dout, dout.dtype()));
      cpu::EmbeddingBackward(d, v.data(), work);
      return IsSameView(work, dweight) ? absl::OkStatus() : dweight.CopyFrom(work);
    }
    case DeviceType::kCuda: {
      // Deferred: the forward's check of the same ids reports a bad one; the
      // kernels skip it here.
      ZS_ASSIGN_OR_RETURN(Tensor idc, ids.Contiguous());
      if (DeferredIdChecks::Active(idc.device()) == nullptr) {
        ZS_RETURN_IF_ERROR(ReadIds(op, idc, dweight.size(0)).status());
      }
      if (!HasContiguousRows(dweight)) {
        return absl::UnimplementedError(absl::StrCat(op, " on ", dweight.device().ToString(),
                                                     ": dweight ", dweight.DebugString(),
                                                     " needs contiguous rows for the CUDA kernel"));
      }
      if (mode == GradMode::kOverwrite) {
        if (!dweight.is_contiguous()) {
          return absl::UnimplementedError(absl::StrCat(
              op, " on ", dweight.device().ToString(), ": kOverwrite needs a contiguous dweight"));
        }
        ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
            cuda::LaunchFill(static_cast<int>(dweight.dtype()), dweight.raw_data(),
                             dweight.numel(), 0.0f, cuda::kOpStream),
            cuda::LaunchWhat(op, dweight)));
      }
      const int64_t n = idc.numel();
      if (n == 0 || dweight.size(1) == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(const int64_t ds, cuda::UniformRowStride(op, "dout", dout));
      // Scratch for the sort's keys (uint64, stored as i64).
      ZS_ASSIGN_OR_RETURN(Tensor keys, cuda::DeviceEmpty(op, dweight, {cuda::EmbeddingSortKeys(n)}, DType::kI64));
      return cuda::CudaLaunchStatus(
          cuda::LaunchEmbeddingBackward(static_cast<int>(dout.dtype()),
                                        static_cast<int>(dweight.dtype()), dout.raw_data(), ds,
                                        static_cast<int>(idc.dtype()), idc.raw_data(), n, dweight.size(0),
                                        static_cast<uint64_t*>(keys.raw_data()), dweight.raw_data(),
                                        dweight.stride(0), dweight.size(1), cuda::kOpStream),
          cuda::LaunchWhat(op, dweight));
    }
  }
  return NoDeviceKernel(op, dweight.device());
}

}  // namespace zeroshard
