// DeferredIdChecks: the id range checks of Embedding and CrossEntropy on a GPU
// without a host synchronisation. While one is installed on a thread, those
// ops on CUDA tensors of its device check their ids (tokens, targets) with a
// kernel that records the first failure in a small device slot, and the host
// reads the slot only when the caller says (Resolve: at a step that reads
// its loss anyway). Without one (the default), the ops read the ids back and
// fail at once, as on the CPU.
//
//   ZS_ASSIGN_OR_RETURN(auto checks, DeferredIdChecks::Install(&device_allocator));
//   for (step ...) {
//     ... forward and backward: Embedding / CrossEntropy launch their checks ...
//     if (log_step) ZS_RETURN_IF_ERROR(checks->Resolve());   // one device-to-host copy
//   }
//
// The error is the op's own message (what range was expected, the value found,
// its position), with " (found by the device check, reported at the next
// read)". A failing id does not make a kernel read or write outside its
// tables: the embedding gathers a zero row for it and skips it in the
// backward; cross-entropy treats it as ignore_index. Values computed after
// the failure are wrong until Resolve reports it; the caller stops there.
// One scope per thread at a time (in-process ranks each install their own).
#ifndef ZEROSHARD_KERNELS_DEFERRED_CHECKS_H_
#define ZEROSHARD_KERNELS_DEFERRED_CHECKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

class DeferredIdChecks {
 public:
  // Installs a scope on the calling thread for tensors of `device`'s device
  // (a CUDA allocator; its slot is allocated from it). FailedPrecondition if
  // the thread already has one.
  static absl::StatusOr<std::unique_ptr<DeferredIdChecks>> Install(Allocator* device);
  ~DeferredIdChecks();  // uninstalls (pending checks are dropped unread)
  DeferredIdChecks(const DeferredIdChecks&) = delete;
  DeferredIdChecks& operator=(const DeferredIdChecks&) = delete;

  // Reads the slot (one device-to-host copy, i.e. one host synchronisation):
  // the first check that failed since the last Resolve, as its op's error;
  // OK when none did or no check ran (then nothing is read).
  absl::Status Resolve();

  // For op entries: the scope installed on this thread for `device`, or null.
  static DeferredIdChecks* Active(Device device);
  // Registers a check; `describe(position, value)` is the error message of a
  // failure. Returns the check's index for LaunchCheckIds.
  int64_t Add(std::function<std::string(int64_t position, int64_t value)> describe);
  // The device slot (three int64) the check kernels write.
  int64_t* slot() const;
  int64_t pending() const { return static_cast<int64_t>(describe_.size()); }

 private:
  explicit DeferredIdChecks(Tensor slot) : slot_(std::move(slot)) {}

  Tensor slot_;
  std::vector<std::function<std::string(int64_t, int64_t)>> describe_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_DEFERRED_CHECKS_H_
