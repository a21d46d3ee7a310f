// Sharded-vs-unsharded training parity, shared by the in-process test and
// the MPI test binary: a tiny GPT on a learnable token stream, the unsharded
// single-rank reference (plain module, one AdamW state per parameter), and one
// rank's part of a sharded run of the same global batch.
#ifndef ZEROSHARD_TESTS_RUNTIME_SHARDING_PARITY_H_
#define ZEROSHARD_TESTS_RUNTIME_SHARDING_PARITY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "autograd/nn/gpt.h"
#include "collectives/communicator.h"
#include "examples/token_data.h"
#include "runtime/sharding/sharding_options.h"

namespace zeroshard::testing {

nn::GptConfig TinyConfig();
TokenData TinyData();

struct Result {
  std::vector<double> losses;                        // global mean loss per step
  std::map<std::string, std::vector<float>> params;  // final parameters by name
};

struct ShardedRun {
  int world = 1;
  ShardingOptions options;
  // The rank's device memory (unset: a CpuAllocator of its own). A CUDA
  // allocator puts the batches on the GPU too (tests/runtime/sharding/cuda_sharded_model_test.cc).
  std::function<Allocator*(int rank)> device;
  Allocator* host = nullptr;  // the offload policy's host memory (nullptr: the default CPU allocator)
  int accum = 1;         // micro-batches per step
  bool no_sync = false;  // accumulate unsharded (no_sync) instead of reduce-scattering each micro-batch
  bool checkpoint = false;
};

// The reference run.
Result TrainUnsharded(int steps, int global_batch);
// One rank's part of a sharded run; rank 0 fills *rank0.
absl::Status TrainShardedRank(Communicator& comm, const ShardedRun& run, int steps, int global_batch,
                              Result* rank0);
// All ranks in-process (RunRanks).
Result TrainSharded(const ShardedRun& run, int steps, int global_batch);
// Losses within 1e-5 relative; parameters within 5e-5 + 1e-5 relative (see the .cc).
void ExpectMatches(const Result& got, const Result& want, const std::string& what);
ShardingOptions BlockOptions(ShardingStrategy s, BackwardPrefetch bp = BackwardPrefetch::kBackwardPre,
                             bool forward_prefetch = false);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_RUNTIME_SHARDING_PARITY_H_
