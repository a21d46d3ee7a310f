#include "zeroshard/kernels/cross_entropy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/cross_entropy.h"
#include "zeroshard/kernels/cuda/cross_entropy_launch.h"
#include "zeroshard/kernels/cuda/embedding_launch.h"
#include "zeroshard/kernels/deferred_checks.h"
#include "zeroshard/kernels/device_scalar.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Status CheckLogits(absl::string_view op, absl::string_view name, const Tensor& t) {
  ZS_RETURN_IF_ERROR(CheckFloatRows(op, name, t));
  if (t.size(-1) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape()),
                                                   ", expected a last dimension V >= 1"));
  }
  return absl::OkStatus();
}

absl::Status CheckTargets(absl::string_view op, const Tensor& targets, const Tensor& logits) {
  if (!targets.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": targets is undefined"));
  if (targets.dtype() != DType::kI32 && targets.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": targets has dtype ", DTypeName(targets.dtype()),
                                                   ", expected i32 or i64"));
  }
  return CheckPerRowShape(op, "targets", targets, logits);
}

// An optional per-row output (losses: any float dtype; lse: f32).
absl::Status CheckPerRowOutput(absl::string_view op, absl::string_view name, const Tensor& t,
                               const Tensor& logits, bool f32_only,
                               std::initializer_list<const Tensor*> inputs) {
  if (!t.defined()) return absl::OkStatus();
  if (f32_only ? t.dtype() != DType::kF32 : !IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has dtype ", DTypeName(t.dtype()),
                                                   f32_only ? ", expected f32" : ", expected f32, bf16 or f16"));
  }
  ZS_RETURN_IF_ERROR(CheckPerRowShape(op, name, t, logits));
  return CheckRowOutput(op, name, t, inputs, false);
}

std::string BadTarget(absl::string_view op, const Shape& shape, int64_t r, int64_t value, int64_t vocab,
                      int64_t ignore_index) {
  return absl::StrCat(op, ": targets", IndexToString(shape, r), " = ", value, " (row ", r,
                      ") is out of range [0, ", vocab, ") and is not ignore_index ", ignore_index);
}

// The targets as int64 in row order, each checked to be in [0, V) or ignore_index.
absl::StatusOr<std::vector<int64_t>> ReadTargets(absl::string_view op, const Tensor& targets,
                                                 int64_t vocab, int64_t ignore_index) {
  ZS_ASSIGN_OR_RETURN(std::vector<int64_t> t, targets.ToVector<int64_t>());
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore_index || (t[r] >= 0 && t[r] < vocab)) continue;
    return absl::InvalidArgumentError(
        BadTarget(op, targets.shape(), static_cast<int64_t>(r), t[r], vocab, ignore_index));
  }
  return t;
}

// Writes `values` (one f32 per row) into the per-row tensor `t`.
absl::Status WriteRows(std::vector<float>& values, const Tensor& t) {
  if (!t.defined()) return absl::OkStatus();
  return t.CopyFrom(Tensor::Wrap(values.data(), t.shape(), DType::kF32));
}

}  // namespace

absl::StatusOr<CrossEntropyStats> CrossEntropyForward(const Tensor& logits, const Tensor& targets,
                                                      const Tensor& losses, const Tensor& lse,
                                                      const CrossEntropyOptions& options) {
  constexpr absl::string_view op = "CrossEntropyForward";
  ZS_RETURN_IF_ERROR(CheckLogits(op, "logits", logits));
  ZS_RETURN_IF_ERROR(CheckTargets(op, targets, logits));
  ZS_RETURN_IF_ERROR(CheckPerRowOutput(op, "losses", losses, logits, false, {&logits, &targets}));
  ZS_RETURN_IF_ERROR(CheckPerRowOutput(op, "lse", lse, logits, true, {&logits, &targets, &losses}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&logits, &targets, &losses, &lse}, op));
  switch (logits.device().type) {
    case DeviceType::kVirtual: {  // max, sum of exp and the target's logit per row; the loss reads 0
      ZS_RETURN_IF_ERROR(ChargeMemoryBound(op, {&losses, &lse}, {&logits, &targets}, 0));
      CrossEntropyStats stats;
      stats.valid_rows = targets.numel();
      return stats;
    }
    case DeviceType::kCpu: {
      const int64_t vocab = logits.size(-1);
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> t, ReadTargets(op, targets, vocab, options.ignore_index));
      const size_t rows = t.size();
      CrossEntropyStats stats;
      if (rows > 0) {
        ZS_ASSIGN_OR_RETURN(Tensor x, RowMajorInput(logits, logits.dtype()));
        std::vector<float> row_loss(rows), row_lse(rows);
        cpu::CrossEntropyForward(x, t.data(), options.ignore_index, row_loss.data(), row_lse.data());
        for (size_t r = 0; r < rows; ++r) {
          if (t[r] == options.ignore_index) continue;
          ++stats.valid_rows;
          stats.sum_loss += row_loss[r];
        }
        ZS_RETURN_IF_ERROR(WriteRows(row_loss, losses));
        ZS_RETURN_IF_ERROR(WriteRows(row_lse, lse));
      }
      stats.mean_loss = stats.valid_rows > 0 ? stats.sum_loss / static_cast<double>(stats.valid_rows)
                                             : std::numeric_limits<double>::quiet_NaN();
      return stats;
    }
    case DeviceType::kCuda: {
      // The targets are checked on the host (as on the CPU) and the per-row
      // losses come back for the stats: two small copies, one sync.
      const int64_t vocab = logits.size(-1);
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> t, ReadTargets(op, targets, vocab, options.ignore_index));
      const int64_t rows = static_cast<int64_t>(t.size());
      CrossEntropyStats stats;
      if (rows > 0) {
        ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "logits", logits));
        ZS_ASSIGN_OR_RETURN(Tensor tc, targets.Contiguous());
        ZS_ASSIGN_OR_RETURN(Tensor row_loss, cuda::DeviceEmpty(op, logits, {rows}, DType::kF32));
        Tensor row_lse = lse;
        if (!lse.defined() || !lse.is_contiguous()) {
          ZS_ASSIGN_OR_RETURN(row_lse, cuda::DeviceEmpty(op, logits, {rows}, DType::kF32));
        }
        ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
            cuda::LaunchCrossEntropyForward(
                static_cast<int>(logits.dtype()), logits.raw_data(), xs,
                static_cast<int>(tc.dtype()), tc.raw_data(), options.ignore_index,
                static_cast<float*>(row_loss.raw_data()), static_cast<float*>(row_lse.raw_data()),
                rows, vocab, cuda::kOpStream),
            cuda::LaunchWhat(op, logits)));
        ZS_ASSIGN_OR_RETURN(std::vector<float> host_loss, row_loss.ToVector<float>());
        for (int64_t r = 0; r < rows; ++r) {
          if (t[r] == options.ignore_index) continue;
          ++stats.valid_rows;
          stats.sum_loss += host_loss[r];
        }
        if (losses.defined()) ZS_RETURN_IF_ERROR(cuda::CastInto(op, row_loss, losses));
        if (lse.defined() && !IsSameView(lse, row_lse)) {
          ZS_RETURN_IF_ERROR(cuda::CastInto(op, row_lse, lse));
        }
      }
      stats.mean_loss = stats.valid_rows > 0 ? stats.sum_loss / static_cast<double>(stats.valid_rows)
                                             : std::numeric_limits<double>::quiet_NaN();
      return stats;
    }
  }
  return NoDeviceKernel(op, logits.device());
}

absl::Status CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                  const Tensor& dlosses, const Tensor& dlogits,
                                  const CrossEntropyOptions& options) {
  constexpr absl::string_view op = "CrossEntropyBackward";
  ZS_RETURN_IF_ERROR(CheckLogits(op, "logits", logits));
  ZS_RETURN_IF_ERROR(CheckTargets(op, targets, logits));
  if (!lse.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": lse is undefined; expected the one CrossEntropyForward saved"));
  }
  if (lse.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": lse has dtype ", DTypeName(lse.dtype()), ", expected f32"));
  }
  ZS_RETURN_IF_ERROR(CheckPerRowShape(op, "lse", lse, logits));
  if (!dlosses.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": dlosses is undefined"));
  if (!IsFloatingPoint(dlosses.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dlosses has dtype ", DTypeName(dlosses.dtype()),
                                                   ", expected f32, bf16 or f16"));
  }
  if (dlosses.numel() != 1 || dlosses.dim() > 1) {
    const absl::Status per_row = CheckPerRowShape(op, "dlosses", dlosses, logits);
    if (!per_row.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(per_row.message(), ", or a single value [] or [1]"));
    }
  }
  ZS_RETURN_IF_ERROR(CheckLogits(op, "dlogits", dlogits));
  if (dlogits.shape() != logits.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dlogits has shape ", ShapeToString(dlogits.shape()),
                                                   ", expected ", ShapeToString(logits.shape()),
                                                   " (the shape of logits)"));
  }
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dlogits", dlogits, {&logits}, /*allow_in_place=*/true));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dlogits", dlogits, {&targets, &lse, &dlosses}, false));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&logits, &targets, &lse, &dlosses, &dlogits}, op));
  switch (logits.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dlogits}, {&logits, &targets, &lse, &dlosses}, 4);
    case DeviceType::kCpu: {
      const int64_t vocab = logits.size(-1);
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> t, ReadTargets(op, targets, vocab, options.ignore_index));
      if (t.empty()) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(std::vector<float> s, lse.ToVector<float>());
      ZS_ASSIGN_OR_RETURN(std::vector<float> g, dlosses.ToVector<float>());
      if (g.size() != t.size()) g.assign(t.size(), g[0]);  // one value for every row
      ZS_ASSIGN_OR_RETURN(Tensor x, RowMajorInput(logits, logits.dtype()));
      ZS_ASSIGN_OR_RETURN(RowOutput o, RowOutput::For(dlogits));
      cpu::CrossEntropyBackward(x, t.data(), options.ignore_index, s.data(), g.data(), o.tensor());
      return o.Finish();
    }
    case DeviceType::kCuda: {
      const int64_t vocab = logits.size(-1);
      // Deferred checks: the forward checked these targets on the device
      // (CrossEntropyMeanOnDevice hands the backward its sanitized copy).
      if (DeferredIdChecks::Active(targets.device()) == nullptr) {
        ZS_RETURN_IF_ERROR(ReadTargets(op, targets, vocab, options.ignore_index).status());
      }
      const int64_t rows = targets.numel();
      if (rows == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "logits", logits));
      ZS_ASSIGN_OR_RETURN(const int64_t ds, cuda::UniformRowStride(op, "dlogits", dlogits));
      ZS_ASSIGN_OR_RETURN(Tensor tc, targets.Contiguous());
      ZS_ASSIGN_OR_RETURN(Tensor s, cuda::ContiguousOnDevice(op, lse, DType::kF32));
      ZS_ASSIGN_OR_RETURN(Tensor g, cuda::ContiguousOnDevice(op, dlosses, DType::kF32));
      const int64_t g_stride = g.numel() == rows ? 1 : 0;  // else one value for every row
      return cuda::CudaLaunchStatus(
          cuda::LaunchCrossEntropyBackward(
              static_cast<int>(logits.dtype()), static_cast<int>(dlogits.dtype()),
              logits.raw_data(), xs, static_cast<int>(tc.dtype()), tc.raw_data(),
              options.ignore_index, static_cast<const float*>(s.raw_data()),
              static_cast<const float*>(g.raw_data()), g_stride, dlogits.raw_data(), ds, rows,
              vocab, cuda::kOpStream),
          cuda::LaunchWhat(op, logits));
    }
  }
  return NoDeviceKernel(op, logits.device());
}

absl::StatusOr<CrossEntropyOnDevice> CrossEntropyMeanOnDevice(const Tensor& logits, const Tensor& targets,
                                                              const Tensor& lse,
                                                              const CrossEntropyOptions& options) {
  constexpr absl::string_view op = "CrossEntropyForward";
  ZS_RETURN_IF_ERROR(CheckLogits(op, "logits", logits));
  ZS_RETURN_IF_ERROR(CheckTargets(op, targets, logits));
  ZS_RETURN_IF_ERROR(CheckPerRowOutput(op, "lse", lse, logits, true, {&logits, &targets}));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&logits, &targets, &lse}, op));
  if (!logits.device().is_cuda() || !lse.defined() || !lse.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("CrossEntropyMeanOnDevice: expected CUDA logits and a contiguous "
                                                   "lse, found ", logits.DebugString(), " and ",
                                                   lse.defined() ? lse.DebugString() : "no lse"));
  }
  const int64_t vocab = logits.size(-1);
  const int64_t rows = targets.numel();
  CrossEntropyOnDevice r;
  ZS_ASSIGN_OR_RETURN(r.targets, targets.Contiguous());
  if (DeferredIdChecks* checks = DeferredIdChecks::Active(targets.device()); checks != nullptr) {
    const int64_t check = checks->Add(
        [shape = targets.shape(), vocab, ignore = options.ignore_index](int64_t p, int64_t v) {
          return BadTarget("CrossEntropyForward", shape, p, v, vocab, ignore);
        });
    ZS_ASSIGN_OR_RETURN(Tensor clean, cuda::DeviceEmpty(op, logits, targets.shape(), DType::kI64));
    ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
        cuda::LaunchCheckIds(static_cast<int>(r.targets.dtype()), r.targets.raw_data(), rows, vocab,
                             /*allow_ignore=*/true, options.ignore_index, check, checks->slot(),
                             static_cast<int64_t*>(clean.raw_data()), cuda::kOpStream),
        cuda::LaunchWhat(op, targets)));
    r.targets = clean;
  } else {
    ZS_RETURN_IF_ERROR(ReadTargets(op, targets, vocab, options.ignore_index).status());
  }
  ZS_ASSIGN_OR_RETURN(r.loss, cuda::DeviceEmpty(op, logits, {}, DType::kF32));
  ZS_ASSIGN_OR_RETURN(r.weight, cuda::DeviceEmpty(op, logits, {}, DType::kF32));
  ZS_ASSIGN_OR_RETURN(Tensor row_loss, cuda::DeviceEmpty(op, logits, {rows}, DType::kF32));
  if (rows > 0) {
    ZS_ASSIGN_OR_RETURN(const int64_t xs, cuda::UniformRowStride(op, "logits", logits));
    ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
        cuda::LaunchCrossEntropyForward(
            static_cast<int>(logits.dtype()), logits.raw_data(), xs, static_cast<int>(r.targets.dtype()),
            r.targets.raw_data(), options.ignore_index, static_cast<float*>(row_loss.raw_data()),
            static_cast<float*>(lse.raw_data()), rows, vocab, cuda::kOpStream),
        cuda::LaunchWhat(op, logits)));
  }
  ZS_RETURN_IF_ERROR(MeanOfValidRows(row_loss, r.targets, options.ignore_index, r.loss, r.weight));
  return r;
}

absl::StatusOr<CrossEntropyResult> CrossEntropy(const Tensor& logits, const Tensor& targets,
                                                const CrossEntropyOptions& options) {
  if (!targets.defined()) return absl::InvalidArgumentError("CrossEntropy: targets is undefined");
  if (!logits.defined()) return absl::InvalidArgumentError("CrossEntropy: logits is undefined");
  CrossEntropyResult r;
  ZS_ASSIGN_OR_RETURN(r.losses, Tensor::Empty(targets.shape(), DType::kF32, logits.allocator()));
  ZS_ASSIGN_OR_RETURN(r.lse, Tensor::Empty(targets.shape(), DType::kF32, logits.allocator()));
  ZS_ASSIGN_OR_RETURN(r.stats, CrossEntropyForward(logits, targets, r.losses, r.lse, options));
  return r;
}

}  // namespace zeroshard
