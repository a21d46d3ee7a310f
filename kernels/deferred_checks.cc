#include "zeroshard/kernels/deferred_checks.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {
thread_local DeferredIdChecks* installed = nullptr;
}  // namespace

absl::StatusOr<std::unique_ptr<DeferredIdChecks>> DeferredIdChecks::Install(Allocator* device) {
  if (device == nullptr || !device->device().is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeferredIdChecks: expected a CUDA allocator, found ",
        device == nullptr ? std::string("none") : device->device().ToString()));
  }
  if (installed != nullptr) {
    return absl::FailedPreconditionError("DeferredIdChecks: this thread already has a scope installed");
  }
  ZS_ASSIGN_OR_RETURN(Tensor slot, Tensor::Empty({3}, DType::kI64, device));
  const int64_t zeros[3] = {0, 0, 0};
  ZS_RETURN_IF_ERROR(device->CopyFromHost(slot.raw_data(), zeros, sizeof(zeros)));
  std::unique_ptr<DeferredIdChecks> checks(new DeferredIdChecks(std::move(slot)));
  installed = checks.get();
  return checks;
}

DeferredIdChecks::~DeferredIdChecks() {
  if (installed == this) installed = nullptr;
}

DeferredIdChecks* DeferredIdChecks::Active(Device device) {
  if (installed == nullptr || installed->slot_.device() != device) return nullptr;
  return installed;
}

int64_t DeferredIdChecks::Add(std::function<std::string(int64_t, int64_t)> describe) {
  describe_.push_back(std::move(describe));
  return static_cast<int64_t>(describe_.size()) - 1;
}

int64_t* DeferredIdChecks::slot() const { return static_cast<int64_t*>(slot_.raw_data()); }

absl::Status DeferredIdChecks::Resolve() {
  if (describe_.empty()) return absl::OkStatus();
  int64_t got[3] = {0, 0, 0};
  ZS_RETURN_IF_ERROR(slot_.allocator()->CopyToHost(got, slot_.raw_data(), sizeof(got)));
  std::vector<std::function<std::string(int64_t, int64_t)>> describe = std::move(describe_);
  describe_.clear();
  if (got[0] == 0) return absl::OkStatus();
  const int64_t zeros[3] = {0, 0, 0};
  ZS_RETURN_IF_ERROR(slot_.allocator()->CopyFromHost(slot_.raw_data(), zeros, sizeof(zeros)));
  const int64_t index = got[0] - 1;
  if (index < 0 || index >= static_cast<int64_t>(describe.size())) {
    return absl::InternalError(absl::StrCat("DeferredIdChecks: the device slot names check ", index, " of ",
                                            describe.size()));
  }
  return absl::InvalidArgumentError(absl::StrCat(describe[index](got[1], got[2]),
                                                 " (found by the device check, reported at the next read)"));
}

}  // namespace zeroshard
