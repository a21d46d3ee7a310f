// nccl_communicator.h in a build without the CUDA toolkit: no communicator
// can be created, so the members below are never reached.
#include "zeroshard/collectives/nccl_communicator.h"

#include "zeroshard/runtime/check.h"

namespace zeroshard {

struct NcclCommunicator::Impl {};

namespace {

absl::Status NotBuilt() {
  return absl::UnimplementedError(
      "the NCCL backend is not built in: this binary was built without CUDA "
      "(ZEROSHARD_CUDA=0 or no toolkit at $ZEROSHARD_CUDA_PATH)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Communicator&, Device, const NcclOptions&) {
  return NotBuilt();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateFromFile(
    const std::string&, int, int, Device, const NcclOptions&, const std::string&) {
  return NotBuilt();
}

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() { return NotBuilt(); }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateWithId(
    const std::string&, int, int, Device, const NcclOptions&) {
  return NotBuilt();
}

NcclCommunicator::NcclCommunicator(int rank, int size, Device device, const NcclOptions& options,
                                   std::unique_ptr<Impl> impl)
    : Communicator(rank, size, device, options.comm),
      nccl_options_(options),
      impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() = default;

const Stream& NcclCommunicator::stream() const {
  ZS_CHECK(false, "NcclCommunicator without CUDA cannot exist");
  __builtin_unreachable();
}

absl::Status NcclCommunicator::GroupStart() { return NotBuilt(); }
absl::Status NcclCommunicator::GroupEnd() { return NotBuilt(); }

absl::StatusOr<std::shared_ptr<Work>> NcclCommunicator::Launch(CollectiveCall) {
  return NotBuilt();
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::DoSplit(const CollectiveDesc&) {
  return NotBuilt();
}

void NcclCommunicator::AbortBackend(const absl::Status&) {}
bool NcclCommunicator::IsCollectiveComplete(int64_t) const { return false; }

}  // namespace zeroshard
