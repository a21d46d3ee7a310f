#include "zeroshard/kernels/flat_buffer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/flat_buffer_launch.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

absl::Status CheckLayout(absl::string_view op, absl::Span<const Tensor> pieces,
                         absl::Span<const int64_t> offsets, const Tensor& flat) {
  if (!flat.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": flat is undefined"));
  if (flat.dim() != 1 || !flat.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": flat ", flat.DebugString(),
                                                   " must be a contiguous 1-D tensor"));
  }
  if (pieces.size() != offsets.size()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", pieces.size(), " pieces but ",
                                                   offsets.size(), " offsets"));
  }
  std::vector<std::pair<int64_t, size_t>> ranges;  // (offset, piece index)
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor& p = pieces[i];
    if (!p.defined()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": piece ", i, " is undefined"));
    }
    if (p.dtype() != flat.dtype() || p.device() != flat.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": piece ", i, " is ", DTypeName(p.dtype()), " on ", p.device().ToString(),
          ", expected ", DTypeName(flat.dtype()), " on ", flat.device().ToString(),
          " (flat's dtype and device)"));
    }
    if (!p.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": piece ", i, " ", p.DebugString(), " must be contiguous"));
    }
    if (offsets[i] < 0 || offsets[i] + p.numel() > flat.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": piece ", i, " of ", p.numel(), " elements at offset ", offsets[i],
          " does not fit in flat of ", flat.numel(), " elements"));
    }
    if (p.numel() > 0 && MemoryOverlaps(p, flat)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": piece ", i, " shares memory with flat"));
    }
    if (p.numel() > 0) ranges.push_back({offsets[i], i});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) {
    const size_t a = ranges[k - 1].second, b = ranges[k].second;
    if (offsets[a] + pieces[a].numel() > offsets[b]) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": pieces ", a, " [", offsets[a], ", ", offsets[a] + pieces[a].numel(), ") and ", b,
          " [", offsets[b], ", ", offsets[b] + pieces[b].numel(), ") overlap in flat"));
    }
  }
  return absl::OkStatus();
}

// Moves every piece to (pack) or from (unpack) its range of flat.
absl::Status Move(absl::string_view op, absl::Span<const Tensor> pieces,
                  absl::Span<const int64_t> offsets, const Tensor& flat, bool pack) {
  ZS_RETURN_IF_ERROR(CheckLayout(op, pieces, offsets, flat));
  const size_t item = flat.itemsize();
  char* const base = static_cast<char*>(flat.raw_data());
  switch (flat.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&flat}, {&flat}, 0);  // every piece read and written once
    case DeviceType::kCpu: {
      const int64_t n = static_cast<int64_t>(pieces.size());
#pragma omp parallel for schedule(dynamic, 1) if (flat.numel() >= (int64_t{1} << 20) && n > 1)
      for (int64_t i = 0; i < n; ++i) {
        const Tensor& p = pieces[i];
        char* slot = base + offsets[i] * item;
        if (p.numel() == 0) continue;
        if (pack) {
          std::memcpy(slot, p.raw_data(), p.nbytes());
        } else {
          std::memcpy(p.raw_data(), slot, p.nbytes());
        }
      }
      return absl::OkStatus();
    }
    case DeviceType::kCuda: {
      ZS_RETURN_IF_ERROR(CheckCurrentDevice(flat, op));
      // The table of copies as int64 triples (src, dst, bytes): cuda::FlatCopy's layout.
      static_assert(sizeof(cuda::FlatCopy) == 3 * sizeof(int64_t));
      std::vector<int64_t> table;
      int64_t max_bytes = 0;
      for (size_t i = 0; i < pieces.size(); ++i) {
        const Tensor& p = pieces[i];
        if (p.numel() == 0) continue;
        char* slot = base + offsets[i] * item;
        const void* src = pack ? p.raw_data() : slot;
        void* dst = pack ? static_cast<void*>(slot) : p.raw_data();
        table.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(src)));
        table.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst)));
        table.push_back(static_cast<int64_t>(p.nbytes()));
        max_bytes = std::max(max_bytes, static_cast<int64_t>(p.nbytes()));
      }
      if (table.empty()) return absl::OkStatus();
      if (flat.allocator() == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            op, ": flat wraps external ", flat.device().ToString(),
            " memory; the copy table needs an allocator of that device"));
      }
      ZS_ASSIGN_OR_RETURN(Tensor dev_table,
                          Tensor::FromVector(table, {static_cast<int64_t>(table.size())},
                                             DType::kI64, flat.allocator()));
      return cuda::CudaLaunchStatus(
          cuda::LaunchFlatCopies(static_cast<const cuda::FlatCopy*>(dev_table.raw_data()),
                                 static_cast<int64_t>(table.size() / 3), max_bytes,
                                 cuda::kOpStream),
          cuda::LaunchWhat(op, flat));
    }
  }
  return NoDeviceKernel(op, flat.device());
}

}  // namespace

absl::Status PackFlat(absl::Span<const Tensor> pieces, absl::Span<const int64_t> offsets,
                      const Tensor& flat) {
  return Move("PackFlat", pieces, offsets, flat, /*pack=*/true);
}

absl::Status UnpackFlat(const Tensor& flat, absl::Span<const int64_t> offsets,
                        absl::Span<const Tensor> pieces) {
  return Move("UnpackFlat", pieces, offsets, flat, /*pack=*/false);
}

}  // namespace zeroshard
