// The NCCL backend: one rank per GPU; collectives run on the communicator's
// own CUDA stream, ordered against the caller's streams with events.
//
//   // Bootstrap through any host communicator (MPI across processes, or the
//   // in-process backend for threads): rank 0 makes the NCCL unique id and
//   // broadcasts it.
//   ZS_ASSIGN_OR_RETURN(auto mpi, MpiCommunicator::Create(MPI_COMM_WORLD));
//   ZS_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::Create(*mpi, Device::Cuda(local_rank)));
//   ZS_ASSIGN_OR_RETURN(auto gather,
//                       nccl->AllGatherAsync(shard, full, {.stream = &compute}));
//   ZS_RETURN_IF_ERROR(gather->Block(compute));   // compute waits on the GPU, not the host
//
//   // A bucket of gradients as one NCCL launch:
//   ZS_RETURN_IF_ERROR(nccl->GroupStart());
//   for (const Tensor& g : bucket) ZS_RETURN_IF_ERROR(nccl->AllReduceAsync(g, g, ReduceOp::kAvg).status());
//   ZS_RETURN_IF_ERROR(nccl->GroupEnd());
//
// Ordering: a collective given CollectiveOptions::stream starts after the
// work enqueued on that stream so far (an event the communication stream
// waits on); its Work's Block(stream) makes a stream wait for it, Wait()
// waits on the host. Buffers must stay alive until then.
//
// Numerics: SUM and AVG of bf16/f16 accumulate in fp32 as Note [Reduction
// numerics] requires: the inputs are widened to fp32 on the GPU (the same
// ZS_HOST_DEVICE conversions as the CPU), reduced by NCCL in fp32, and
// rounded once (NcclOptions::fp32_accumulation, on by default; off, NCCL
// reduces in the 16-bit type, rounding at every step, with half the bytes on
// the wire). NCCL's MAX ignores NaN (fmaxf) where the host backends
// propagate it.
//
// AllToAll is one ncclSend and one ncclRecv per rank inside an NCCL group.
//
// Errors: the argument checks are the base class's. A timeout is detected by
// Work::Wait() polling the done event and ncclCommGetAsyncError; it aborts
// the communicator (ncclCommAbort). NCCL cannot tell which rank is missing,
// so without check mode the message cannot name it; in check mode every
// collective starts with an all-gather of the ranks' descriptors, which
// names ranks that disagree (and, as a host round trip, costs latency).
//
// Built only with the CUDA toolkit; a CPU-only build links a stand-in whose
// Create() returns Unimplemented.
#ifndef ZEROSHARD_COLLECTIVES_NCCL_COMMUNICATOR_H_
#define ZEROSHARD_COLLECTIVES_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/stream.h"

namespace zeroshard {

struct NcclOptions {
  CommunicatorOptions comm;
  // Widen 16-bit SUM/AVG reductions to fp32 (see Numerics above).
  bool fp32_accumulation = true;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (a host communicator; this one gets its rank
  // and size). `device` is this rank's GPU.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      Communicator& bootstrap, Device device, const NcclOptions& options = {});
  // Without a host communicator: rank 0 writes the unique id to `path`
  // (a 0600 file of an unpredictable temporary name, renamed into place),
  // the others wait for the file (up to the timeout). The file is tagged
  // with `job_id` and its creation time: a waiting rank takes only a file of
  // its own job created no earlier than the timeout before it began to wait,
  // so a file an earlier run left is not read as this one's (it waits for
  // rank 0 to replace it). With an empty `job_id` only the time is checked:
  // a rerun within the timeout of the last one may then read the old id.
  // Clocks of the processes' hosts must agree within the timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateFromFile(
      const std::string& path, int rank, int size, Device device, const NcclOptions& options = {},
      const std::string& job_id = "");
  // A new unique id as bytes, for a launcher that hands it out itself
  // (collectives/env_rendezvous.h), and the group of such an id.
  static absl::StatusOr<std::string> NewUniqueId();
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateWithId(
      const std::string& unique_id, int rank, int size, Device device, const NcclOptions& options = {});

  ~NcclCommunicator() override;

  absl::string_view backend() const override { return "nccl"; }
  // The communication stream every collective of this communicator runs on.
  const Stream& stream() const;

  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;

  struct Impl;  // NCCL and CUDA state (nccl_communicator.cc)
  // Used by the factories.
  NcclCommunicator(int rank, int size, Device device, const NcclOptions& options,
                   std::unique_ptr<Impl> impl);

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override;
  // The watchdog: ncclCommAbort.
  void AbortBackend(const absl::Status& why) override;
  // The ring learns of completions at the next launch; the watchdog asks the
  // collective's event.
  bool IsCollectiveComplete(int64_t seq) const override;

 private:
  const NcclOptions nccl_options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_NCCL_COMMUNICATOR_H_
