// StagedCommunicator: a host-memory communicator over a device one. Each
// collective copies its (host) input into device memory, runs on the device
// communicator, and copies the result back; blocking, one at a time.
//
//   // A launch without MPI has no host communicator of its own: the run's
//   // numbers (losses, checkpoint agreement) go through NCCL.
//   ZS_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::CreateWithId(id, rank, size, Device::Cuda(local_rank)));
//   CudaAllocator staging(local_rank);
//   ZS_ASSIGN_OR_RETURN(auto host, StagedCommunicator::Create(*nccl, &staging));
//   ZS_RETURN_IF_ERROR(host->AllReduce(loss_on_the_host, ReduceOp::kAvg));
//
// Meant for small tensors (scalars, status words, file checksums): two
// copies and a device round trip per call. The staging buffers are kept and
// only grow, so a step reuses them (no cudaMalloc once warm). Numerics are
// the device communicator's (Note [Reduction numerics] holds for NCCL too).
// Check mode (CommunicatorOptions::check_mode) compares every rank's call
// first, through the device communicator: ranks that disagree, or one whose
// arguments failed its checks, fail every rank with InvalidArgument. Without
// it, as on NCCL, a rank whose arguments fail does not join and its peers
// time out.
#ifndef ZEROSHARD_COLLECTIVES_STAGED_COMMUNICATOR_H_
#define ZEROSHARD_COLLECTIVES_STAGED_COMMUNICATOR_H_

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/allocator.h"

namespace zeroshard {

class StagedCommunicator final : public Communicator {
 public:
  // Over `device_comm` (not owned; it must outlive this one), staging in
  // `device_memory` (device_comm's device; not owned).
  static absl::StatusOr<std::unique_ptr<StagedCommunicator>> Create(Communicator& device_comm,
                                                                    Allocator* device_memory);
  ~StagedCommunicator() override;

  absl::string_view backend() const override { return "staged"; }

  StagedCommunicator(Communicator& device_comm, std::unique_ptr<Communicator> owned, Allocator* device_memory);

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override;

 private:
  // A device buffer of at least `numel` elements of `dtype` (slots 0-1: data,
  // 2-3: check mode's descriptors).
  absl::StatusOr<Tensor> Stage(int slot, DType dtype, int64_t numel);
  absl::Status Run(const CollectiveCall& call);

  Communicator& device_comm_;
  std::unique_ptr<Communicator> owned_;  // a split's device communicator
  Allocator* const device_memory_;
  std::map<std::pair<int, DType>, Tensor> staging_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_STAGED_COMMUNICATOR_H_
