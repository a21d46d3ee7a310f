// The MPI backend: one rank per process, started by mpirun; works across
// machines as MPI does.
//
//   int provided;
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
//   {
//     ZS_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> comm,
//                         MpiCommunicator::Create(MPI_COMM_WORLD));
//     ZS_RETURN_IF_ERROR(comm->AllReduce(grads, ReduceOp::kAvg));
//   }   // destroy communicators before MPI_Finalize
//   MPI_Finalize();
//
// Note [MPI algorithms]
//   Collectives are our own, built from nonblocking point-to-point messages
//   and progressed by polling (MPI_Testsome) with a deadline, on the
//   communicator's thread for asynchronous calls - so the caller's compute
//   never stalls on MPI - or on the caller's thread for blocking calls that
//   find the queue empty. Every rank moves data directly with every peer:
//   - AllGather: send my input to each peer, receive each peer's into place.
//   - ReduceScatter: each peer sends me its block `rank`, in chunks of
//     MpiOptions::chunk_bytes, double-buffered, so receiving chunk c+1
//     overlaps reducing chunk c; the reduction combines all ranks at once in
//     rank order with fp32 accumulation (collectives/cpu_reduce.h), so the
//     result is bitwise the in-process backend's. (OpenMPI's own
//     MPI_Reduce_scatter_block is several times slower on one node.)
//   - AllReduce: the ReduceScatter above on 1/size of the elements per rank,
//     each reduced chunk sent on to every peer at once (the all-gather half);
//     up to 32 KiB, one exchange of whole inputs and a local reduction in
//     rank order (one message round instead of two).
//   - Broadcast: the root sends to every peer; from 256 KiB among 3+ ranks,
//     it scatters 1/size to each rank, which passes its piece on to the
//     other non-roots (the root sends 2(n-1)/n of the tensor, not n-1 copies).
//   - AllToAll: send my input's block p to each peer p, receive each peer's
//     block for me into place (every message at once, as AllGather).
//   - Barrier: the handshake below alone.
//   Each collective starts with a handshake: every rank sends its
//   CollectiveDesc to every peer (small AllGather / AllReduce without check
//   mode put it in front of their single data message instead, which saves
//   a message round; a mismatch then shows up as a timeout or a truncation
//   error rather than a named mismatch). It is what names the rank that never
//   arrived on a timeout, and what check mode compares before any data moves
//   (without check mode it is compared as it arrives, and a mismatch aborts
//   the communicator since data may already be in flight). Data messages are
//   tagged with the sequence number, so a rank that skipped a collective
//   cannot feed data into the wrong one.
//
// Requirements: MPI initialised with MPI_THREAD_MULTIPLE (the communication
// thread and the caller may both call MPI); CPU tensors. Create() and
// Split() are collective over the MPI communicator.
#ifndef ZEROSHARD_COLLECTIVES_MPI_COMMUNICATOR_H_
#define ZEROSHARD_COLLECTIVES_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/collectives/communicator.h"

namespace zeroshard {

struct MpiOptions {
  CommunicatorOptions comm;
  // Pipeline chunk of the reductions. Scratch is 2 x (size - 1) x chunk.
  int64_t chunk_bytes = int64_t{1} << 20;

  std::string ToString() const;
};

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` (a collective call over it), so that our messages never
  // mix with the caller's.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(MPI_Comm comm,
                                                                 const MpiOptions& options = {});
  // Drains queued collectives, then frees the MPI communicator - unless the
  // communicator was aborted, in which case the MPI communicator is left
  // allocated so that messages still in flight can never match a later one.
  ~MpiCommunicator() override;

  absl::string_view backend() const override { return "mpi"; }
  // The duplicated communicator this one owns.
  MPI_Comm mpi_comm() const { return comm_; }

  // Used by Create and Split; takes ownership of `comm`.
  MpiCommunicator(MPI_Comm comm, int rank, int size, const MpiOptions& options);

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override;
  absl::Status RunBlocking(CollectiveCall call) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override;

 private:
  class Exchange;  // one collective's requests (mpi_communicator.cc)

  absl::Status Execute(const CollectiveCall& call);
  absl::Status RunCollective(const CollectiveCall& call);
  absl::Status AllGatherData(Exchange& ex, const CollectiveCall& call);
  absl::Status ReduceScatterData(Exchange& ex, const CollectiveCall& call);
  absl::Status AllReduceData(Exchange& ex, const CollectiveCall& call);
  absl::Status BroadcastData(Exchange& ex, const CollectiveCall& call);
  absl::Status AllToAllData(Exchange& ex, const CollectiveCall& call);
  absl::Status SmallData(Exchange& ex, const CollectiveCall& call);
  absl::Status FinishSmall(const CollectiveCall& call);
  // Scratch for `bytes` in each of 2 x (size - 1) receive slots.
  char* Scratch(int slot, int peer, int64_t bytes);

  MPI_Comm comm_;
  const MpiOptions mpi_options_;
  int data_tag_modulus_ = 1;  // data tags are 2 + seq % modulus
  std::unique_ptr<char[]> scratch_;
  std::shared_ptr<std::vector<char>> stage_;  // outgoing [desc | payload] of small collectives
  int64_t scratch_slot_bytes_ = 0;
  // Buffers that sends of a failed collective may still read.
  std::vector<std::shared_ptr<const void>> orphans_;
  CommThread comm_thread_;  // last: destroyed (drained) first
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_MPI_COMMUNICATOR_H_
