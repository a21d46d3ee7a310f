#include "zeroshard/collectives/staged_communicator.h"

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<StagedCommunicator>> StagedCommunicator::Create(Communicator& device_comm,
                                                                               Allocator* device_memory) {
  if (device_memory == nullptr || device_memory->device() != device_comm.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StagedCommunicator: expected staging memory on ", device_comm.device().ToString(), ", found ",
        device_memory == nullptr ? std::string("none") : device_memory->device().ToString()));
  }
  return std::make_unique<StagedCommunicator>(device_comm, nullptr, device_memory);
}

StagedCommunicator::StagedCommunicator(Communicator& device_comm, std::unique_ptr<Communicator> owned,
                                       Allocator* device_memory)
    : Communicator(device_comm.rank(), device_comm.size(), Device::Cpu(), device_comm.options()),
      device_comm_(device_comm),
      owned_(std::move(owned)),
      device_memory_(device_memory) {}

StagedCommunicator::~StagedCommunicator() {
  StopWatchdog();
  staging_.clear();  // before the split's device communicator goes
}

absl::StatusOr<Tensor> StagedCommunicator::Stage(int slot, DType dtype, int64_t numel) {
  Tensor& t = staging_[{slot, dtype}];
  if (!t.defined() || t.numel() < numel) {
    // Grown to the next power of two, so a run's sizes settle after a few calls.
    int64_t n = 1;
    while (n < numel) n *= 2;
    ZS_ASSIGN_OR_RETURN(t, Tensor::Empty({n}, dtype, device_memory_));
  }
  return t.Narrow(0, 0, numel);
}

absl::Status StagedCommunicator::Run(const CollectiveCall& call) {
  const CollectiveDesc& d = call.desc;
  const std::string prefix = ErrorPrefix(d, rank(), size());
  if (options().check_mode) {
    // Every rank's descriptor (bytes as i8) through the device communicator,
    // compared on the host: disagreeing ranks and failed argument checks
    // fail every rank here, before any data moves.
    static_assert(std::is_trivially_copyable_v<CollectiveDesc>);
    ZS_ASSIGN_OR_RETURN(Tensor mine, Stage(2, DType::kI8, sizeof(CollectiveDesc)));
    ZS_ASSIGN_OR_RETURN(Tensor all, Stage(3, DType::kI8, sizeof(CollectiveDesc) * size()));
    ZS_ASSIGN_OR_RETURN(Tensor host_mine, Tensor::Empty({static_cast<int64_t>(sizeof(CollectiveDesc))}, DType::kI8));
    std::memcpy(host_mine.raw_data(), &d, sizeof(d));
    ZS_RETURN_IF_ERROR(mine.CopyFrom(host_mine));
    ZS_RETURN_IF_ERROR(device_comm_.AllGather(mine, all));
    ZS_ASSIGN_OR_RETURN(Tensor host_all, all.To(DefaultCpuAllocator()));
    std::vector<CollectiveDesc> descs(size());
    std::memcpy(descs.data(), host_all.raw_data(), sizeof(CollectiveDesc) * size());
    if (absl::Status c = CheckSameCollective(descs); !c.ok()) {
      return absl::Status(c.code(), absl::StrCat(prefix, c.message()));
    }
  }
  if (d.invalid_args) {
    // Without check mode a rank that failed its checks does not join (as on
    // NCCL): its peers time out.
    return absl::InvalidArgumentError(absl::StrCat(prefix, "this rank failed the argument check"));
  }
  switch (d.op) {
    case CollectiveOp::kBarrier:
      return device_comm_.Barrier();
    case CollectiveOp::kSplit:
      return absl::InternalError("Split does not go through Launch");
    case CollectiveOp::kBroadcast: {
      ZS_ASSIGN_OR_RETURN(Tensor t, Stage(0, d.dtype, call.input.numel()));
      ZS_ASSIGN_OR_RETURN(Tensor flat, call.input.Flatten());
      ZS_RETURN_IF_ERROR(t.CopyFrom(flat));
      ZS_RETURN_IF_ERROR(device_comm_.Broadcast(t, d.root));
      return flat.CopyFrom(t);
    }
    default:
      break;
  }
  ZS_ASSIGN_OR_RETURN(Tensor in, Stage(0, d.dtype, call.input.numel()));
  ZS_ASSIGN_OR_RETURN(Tensor out, Stage(1, d.dtype, call.output.numel()));
  ZS_ASSIGN_OR_RETURN(Tensor flat_in, call.input.Flatten());
  ZS_RETURN_IF_ERROR(in.CopyFrom(flat_in));
  switch (d.op) {
    case CollectiveOp::kAllGather:
      ZS_RETURN_IF_ERROR(device_comm_.AllGather(in, out));
      break;
    case CollectiveOp::kReduceScatter:
      ZS_RETURN_IF_ERROR(device_comm_.ReduceScatter(in, out, d.reduce_op));
      break;
    case CollectiveOp::kAllReduce:
      ZS_RETURN_IF_ERROR(device_comm_.AllReduce(in, out, d.reduce_op));
      break;
    case CollectiveOp::kAllToAll:
      ZS_RETURN_IF_ERROR(device_comm_.AllToAll(in, out));
      break;
    default:
      return absl::InternalError("StagedCommunicator: unexpected collective");
  }
  ZS_ASSIGN_OR_RETURN(Tensor flat_out, call.output.Flatten());
  return flat_out.CopyFrom(out);
}

absl::StatusOr<std::shared_ptr<Work>> StagedCommunicator::Launch(CollectiveCall call) {
  MarkRunning(call.desc);
  if (absl::Status h = health(); !h.ok()) {
    return std::shared_ptr<Work>(HostWork::Done(
        MarkDone(call.desc, absl::AbortedError(absl::StrCat(ErrorPrefix(call.desc, rank(), size()), h.message())))));
  }
  // A failure of the device communicator is its own to handle (NCCL aborts
  // itself when the group is broken, and later calls fail through it).
  absl::Status s = Run(call);
  return std::shared_ptr<Work>(HostWork::Done(MarkDone(call.desc, std::move(s))));
}

absl::StatusOr<std::unique_ptr<Communicator>> StagedCommunicator::DoSplit(const CollectiveDesc& desc) {
  MarkRunning(desc);
  absl::StatusOr<std::unique_ptr<Communicator>> sub = device_comm_.Split(desc.color, desc.key);
  if (!sub.ok()) return MarkDone(desc, sub.status());
  (void)MarkDone(desc, absl::OkStatus());
  if (*sub == nullptr) return std::unique_ptr<Communicator>();
  Communicator& inner = **sub;
  return std::unique_ptr<Communicator>(new StagedCommunicator(inner, *std::move(sub), device_memory_));
}

}  // namespace zeroshard
