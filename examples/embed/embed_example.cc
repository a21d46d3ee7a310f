// The embedding example's command line: trains examples/embed/spiral.cc's
// residual MLP over in-process ranks.
//
//   bazel run -c opt //examples/embed:embed_example -- --world_size=4 --sharding_strategy=FULL_SHARD
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/examples/embed/spiral.h"

ABSL_FLAG(int, world_size, 4, "in-process ranks");
ABSL_FLAG(std::string, sharding_strategy, "FULL_SHARD", "FULL_SHARD | SHARD_GRAD_OP | SHARD_OPTIMIZER | NO_SHARD | HYBRID_SHARD");
ABSL_FLAG(int64_t, steps, 300, "optimizer steps");
ABSL_FLAG(int64_t, accumulation, 1, "micro-batches per step");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace zeroshard;
  example::SpiralOptions o;
  o.steps = absl::GetFlag(FLAGS_steps);
  o.accumulation = absl::GetFlag(FLAGS_accumulation);
  o.log_every = 50;
  absl::StatusOr<ShardingStrategy> strategy = ParseShardingStrategy(absl::GetFlag(FLAGS_sharding_strategy));
  if (!strategy.ok()) {
    std::fprintf(stderr, "%s\n", strategy.status().ToString().c_str());
    return 2;
  }
  o.sharding.strategy = *strategy;
  int failed = 0;
  std::vector<absl::Status> statuses = RunRanks(absl::GetFlag(FLAGS_world_size), [&](Communicator& comm) {
    return example::RunSpiral(o, comm).status();
  });
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      std::fprintf(stderr, "rank %zu: %s\n", r, statuses[r].ToString().c_str());
      failed = 1;
    }
  }
  return failed;
}
