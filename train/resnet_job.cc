#include "zeroshard/train/resnet_job.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

int ThreadsPerRank(int configured, int world_size) {
  if (configured != 0) return configured;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world_size);
}

absl::StatusOr<ResNetTrainResult> RunResNetConfig(const RunConfig& config) {
  if (config.model_type != "resnet") {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", config.source, ": expected model.type \"resnet\", found \"", config.model_type, "\""));
  }
  const int world = config.world_size;
  ResNetTrainOptions options = config.resnet;
  ZS_RETURN_IF_ERROR(options.sharding.Validate(world));
  options.threads_per_rank = ThreadsPerRank(options.threads_per_rank, world);
  std::mutex mu;
  ResNetTrainResult result;
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(ResNetTrainResult r, RunResNetTraining(options, comm));
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = std::move(r);
    }
    return absl::OkStatus();
  }, LocalOptions{.comm = CommunicatorOptionsOf(config)});  // distributed.timeout_s
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(), absl::StrCat("rank ", r, ": ", statuses[r].message()));
    }
  }
  return result;
}

}  // namespace zeroshard
