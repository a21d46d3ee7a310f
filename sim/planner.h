// Plan: the fastest ways to train a model on a cluster that fit in memory,
// found by simulating each candidate (sim/simulator.h) - the real runtime's
// schedule, not a formula.
//
//   PlanOptions p;
//   p.base = config.train;                                    // the job: optimizer, dtypes, ...
//   ZS_RETURN_IF_ERROR(ApplyModelPreset("llama-70b", 8192, &p.base));
//   ZS_ASSIGN_OR_RETURN(p.profile, LoadProfile("h100_dgx"));
//   p.nodes = 8;  p.global_batch = 512;  p.seq_len = 8192;
//   ZS_ASSIGN_OR_RETURN(PlanResult r, Plan(p));
//   r.ToText(5);                                              // the five fastest, with their configs
//
// Note [What the planner searches]
// - Strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD with a shard
//   group of each power-of-two multiple of a node's GPUs that divides the world
//   (and of half and a quarter of a node).
// - Activation checkpointing on or off; the micro-batch: each divisor of the
//   per-device batch (global_batch / world), with gradient accumulation
//   making up the rest.
// - Then, for the best candidates that fit, the schedule: backward prefetch
//   (BACKWARD_PRE, BACKWARD_POST), forward prefetch, limit_all_gathers 1, 2, 4.
// - Fits: peak memory per rank (the caching allocator's reserved peak) at most
//   `memory_cap_bytes`.
// - CPU offload (master shards, gradients and the optimizer step on the host:
//   strategy.cpu_offload true) when no candidate of the first stage fits and
//   the job does not offload already: the first stage again with offload, so a
//   model too large for the devices still gets the fastest plan that runs.
//   Host memory is reported (host_bytes_per_rank), and capped only with
//   `host_memory_cap_bytes`.
// - NVMe offload (ZeRO-Infinity, on the simulated drives: Note [Virtual NVMe]
//   in runtime/nvme/virtual_swap_store.h) when a host cap is given and no CPU
//   offload candidate fits under it: the first stage again with the optimizer
//   state on NVMe (master shards and gradients on the host), then with the
//   master shards on NVMe too. The swap files go to `nvme_path`.
// - Fits: the device cap and, when given, the host cap.
// Candidates are ranked by step time; each comes with the job config (JSON)
// that runs it (train_gpt --config=...).
#ifndef ZEROSHARD_SIM_PLANNER_H_
#define ZEROSHARD_SIM_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/sim/simulator.h"
#include "zeroshard/train/config.h"

namespace zeroshard::sim {

struct PlanOptions {
  RunConfig base;  // the job; its model, optimizer, dtypes and base strategy
  std::string model_name;
  HardwareProfile profile;
  int nodes = 1;
  int gpus_per_node = 0;          // 0: the profile's
  int64_t global_batch = 0;       // sequences per optimizer step, all ranks
  int64_t seq_len = 0;            // 0: base.train.model.block_size
  int64_t memory_cap_bytes = 0;   // 0: the profile's memory_bytes
  int64_t host_memory_cap_bytes = 0;  // host memory per rank; 0: not capped (NVMe offload is then never needed)
  // Where an NVMe plan's swap files go (its config's nvme_path); "": the
  // base job's, else /local_nvme.
  std::string nvme_path;
  int refine = 4;                 // candidates whose schedule options are searched
};

struct PlanCandidate {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  int shard_group = 0;  // HYBRID_SHARD's hybrid_shard_size; 0 otherwise
  bool activation_checkpointing = false;
  int64_t micro_batch = 1;
  int64_t grad_accum_steps = 1;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  bool forward_prefetch = false;
  int limit_all_gathers = 2;
  bool cpu_offload = false;  // strategy.cpu_offload true (on top of the job's own offload, if any)
  // NVMe offload instead: the optimizer state (and with nvme_params the master
  // shards) in swap files: --offload=nvme_optimizer / nvme_params_and_optimizer.
  bool nvme_optimizer = false, nvme_params = false;
  SimResult result;
  bool fits = false;
  std::string config_json;  // the job's config that runs it (ResolvedConfigJson)
  std::string Describe() const;
};

struct PlanResult {
  int world = 0;
  int64_t memory_cap_bytes = 0;
  int simulated = 0;
  bool searched_offload = false;       // nothing fit without CPU offload, so it was tried
  bool searched_nvme = false;          // nothing fit the host cap with CPU offload, so NVMe was tried
  int64_t host_memory_cap_bytes = 0;
  std::vector<PlanCandidate> fitting;  // fastest first
  int64_t smallest_peak_bytes = 0;     // over all candidates (when none fits: how far off)
  // With a host cap: the least host memory of a candidate under the device cap (-1: none was).
  int64_t smallest_host_bytes = -1;
  std::string ToText(int top) const;
  std::string ToJson(int top) const;
};

absl::StatusOr<PlanResult> Plan(const PlanOptions& options);

}  // namespace zeroshard::sim

#endif  // ZEROSHARD_SIM_PLANNER_H_
