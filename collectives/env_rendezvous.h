// The launch without MPI (issue 20): the torchrun / Kubernetes environment
// convention, and the TCP rendezvous that hands rank 0's NCCL unique id to
// the other processes of the job.
//
//   // Each process, started by torchrun, a Kubernetes Job or a script:
//   //   RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=node0 MASTER_PORT=29500
//   //   ZEROSHARD_JOB_TOKEN=<a secret the launcher made for this job> train_gpt --backend=nccl ...
//   ZS_ASSIGN_OR_RETURN(std::optional<EnvLaunch> env, EnvLaunchFromEnvironment());
//   if (env) {
//     std::string id = env->rank == 0 ? MakeId() : "";
//     ZS_ASSIGN_OR_RETURN(id, TcpRendezvous(*env, id, absl::Minutes(10)));  // rank 0's, everywhere
//   }
//
// The variables: RANK and WORLD_SIZE (both, or neither: then this is no env
// launch) or Slurm's SLURM_PROCID / SLURM_NTASKS; LOCAL_RANK (or
// SLURM_LOCALID; the GPU this process drives) and LOCAL_WORLD_SIZE (or
// SLURM_NTASKS_PER_NODE, optional: the processes on this node); MASTER_ADDR
// and MASTER_PORT, where rank 0 listens; ZEROSHARD_JOB_TOKEN, the secret
// every process presents (required: the id lets whoever holds it join the
// group). Or ZEROSHARD_RENDEZVOUS_FILE instead of MASTER_ADDR/PORT: a file
// on a filesystem every process sees (NcclCommunicator::CreateFromFile),
// tagged with ZEROSHARD_JOB_ID (or TORCHELASTIC_RUN_ID, or SLURM_JOB_ID and
// SLURM_STEP_ID) and its creation time.
//
// TcpRendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT only while the
// group forms. Each other rank connects (retrying while rank 0 is not up
// yet) and presents its rank and the token; rank 0 answers a wrong token
// with a refusal (PermissionDenied on that process; rank 0 keeps waiting for
// the real one), and holds the good connections until every rank has come.
// Then every rank gets the payload and rank 0 closes the port. All waits end
// at `timeout`: a rank that never came is named in a DeadlineExceeded on
// rank 0 and on every rank that came (rank 0 tells them before it gives
// up); rank 0 never answering is a DeadlineExceeded on the others naming
// rank 0 and the address.
#ifndef ZEROSHARD_COLLECTIVES_ENV_RENDEZVOUS_H_
#define ZEROSHARD_COLLECTIVES_ENV_RENDEZVOUS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zeroshard {

struct EnvLaunch {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = -1;  // -1: not given
  std::string master_addr;    // empty with a rendezvous file
  int master_port = 0;
  std::string token;
  std::string rendezvous_file;  // ZEROSHARD_RENDEZVOUS_FILE
  std::string job_id;           // tags the rendezvous file

  // "rank 1 of 2 (local rank 1), rendezvous node0:29500".
  std::string ToString() const;
};

// nullopt when neither RANK/WORLD_SIZE nor SLURM_PROCID/SLURM_NTASKS is set;
// InvalidArgument naming the variable that is missing or malformed.
absl::StatusOr<std::optional<EnvLaunch>> EnvLaunchFromEnvironment();

// Rank 0's `payload` on every rank (see the top). `payload` is ignored on
// the other ranks; it may be at most 1 MiB.
absl::StatusOr<std::string> TcpRendezvous(const EnvLaunch& env, const std::string& payload, absl::Duration timeout);

}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_ENV_RENDEZVOUS_H_
