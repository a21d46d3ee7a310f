#include "zeroshard/sim/planner.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::sim {

namespace {

// The shard-group sizes HYBRID_SHARD is tried with (Note [What the planner searches]).
std::vector<int> HybridGroups(int world, int gpus_per_node) {
  std::set<int> sizes;
  for (int s : {gpus_per_node / 4, gpus_per_node / 2}) {
    if (s >= 2) sizes.insert(s);
  }
  for (int s = gpus_per_node; s < world; s *= 2) sizes.insert(s);
  std::vector<int> out;
  for (int s : sizes) {
    if (s > 1 && s < world && world % s == 0) out.push_back(s);
  }
  return out;
}

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

absl::StatusOr<PlanCandidate> Evaluate(const PlanOptions& p, int world, int gpus_per_node, int64_t seq_len,
                                       int64_t cap, PlanCandidate c) {
  SimulateOptions o;
  o.job = p.base.train;
  o.job.sharding.strategy = c.strategy;
  o.job.sharding.hybrid_shard_size = c.shard_group;
  o.job.sharding.backward_prefetch = c.backward_prefetch;
  o.job.sharding.forward_prefetch = c.forward_prefetch;
  o.job.sharding.limit_all_gathers = c.limit_all_gathers;
  o.job.model.activation_checkpointing = c.activation_checkpointing;
  o.job.batch_size = c.micro_batch;
  o.job.grad_accum_steps = c.grad_accum_steps;
  if (c.cpu_offload) o.job.sharding.offload = OffloadPolicy{.params = true, .grads = true, .optimizer = true};
  if (c.nvme_optimizer) {
    OffloadPolicy off = OffloadPolicy{.nvme_optimizer = true, .nvme_params = c.nvme_params};
    const OffloadPolicy& base = p.base.train.sharding.offload;
    const std::string& base_path = !base.optimizer_nvme.path.empty() ? base.optimizer_nvme.path : base.param_nvme.path;
    off.optimizer_nvme.path = off.param_nvme.path =
        !p.nvme_path.empty() ? p.nvme_path : !base_path.empty() ? base_path : "/local_nvme";
    o.job.sharding.offload = off;
  }
  o.model_name = p.model_name;
  o.profile = p.profile;
  o.world = world;
  o.gpus_per_node = gpus_per_node;
  o.seq_len = seq_len;
  o.record_spans = false;
  ZS_ASSIGN_OR_RETURN(c.result, Simulate(o));
  c.fits = c.result.peak_bytes_per_rank <= cap &&
           (p.host_memory_cap_bytes <= 0 || c.result.host_bytes_per_rank <= p.host_memory_cap_bytes);
  RunConfig config = p.base;
  config.train = o.job;
  config.model_type = o.job.model_type;  // model.type: a preset's Llama is not the base config's GPT
  config.world_size = world;
  config.backend = "nccl";
  c.config_json = ResolvedConfigJson(config);
  return c;
}

}  // namespace

std::string PlanCandidate::Describe() const {
  std::string s(ShardingStrategyName(strategy));
  if (strategy == ShardingStrategy::kHybridShard) absl::StrAppend(&s, "(", shard_group, ")");
  absl::StrAppend(&s, activation_checkpointing ? " +AC" : "", " micro ", micro_batch, " x", grad_accum_steps, " ",
                  BackwardPrefetchName(backward_prefetch), forward_prefetch ? " +fwd_prefetch" : "", " limit ",
                  limit_all_gathers, cpu_offload ? " +cpu_offload" : "",
                  nvme_params ? " +nvme_params_and_optimizer" : nvme_optimizer ? " +nvme_optimizer" : "");
  return s;
}

absl::StatusOr<PlanResult> Plan(const PlanOptions& p) {
  const int gpus_per_node = p.gpus_per_node > 0 ? p.gpus_per_node : p.profile.gpus_per_node;
  if (p.nodes < 1 || gpus_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a cluster of ", p.nodes, " nodes x ", gpus_per_node,
                                                   " GPUs: expected at least one of each"));
  }
  const int world = p.nodes * gpus_per_node;
  const int64_t global = p.global_batch > 0 ? p.global_batch : world;
  if (global % world != 0) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", global, " over ", world,
                                                   " ranks: expected a multiple of the world size"));
  }
  const int64_t per_device = global / world;
  const int64_t seq_len = p.seq_len > 0 ? p.seq_len : p.base.train.model.block_size;
  const int64_t cap = p.memory_cap_bytes > 0 ? p.memory_cap_bytes : p.profile.memory_bytes;

  PlanResult r;
  r.world = world;
  r.memory_cap_bytes = cap;
  r.host_memory_cap_bytes = p.host_memory_cap_bytes;
  r.smallest_peak_bytes = -1;
  std::vector<PlanCandidate> all;
  auto consider = [&](const PlanCandidate& c) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(PlanCandidate done, Evaluate(p, world, gpus_per_node, seq_len, cap, c));
    ++r.simulated;
    if (r.smallest_peak_bytes < 0 || done.result.peak_bytes_per_rank < r.smallest_peak_bytes) {
      r.smallest_peak_bytes = done.result.peak_bytes_per_rank;
    }
    if (done.result.peak_bytes_per_rank <= cap &&
        (r.smallest_host_bytes < 0 || done.result.host_bytes_per_rank < r.smallest_host_bytes)) {
      r.smallest_host_bytes = done.result.host_bytes_per_rank;
    }
    if (done.fits) all.push_back(std::move(done));
    return absl::OkStatus();
  };

  // Stage 1: strategy x activation checkpointing x micro-batch, default schedule.
  std::vector<std::pair<ShardingStrategy, int>> strategies = {{ShardingStrategy::kFullShard, 0},
                                                              {ShardingStrategy::kShardGradOp, 0},
                                                              {ShardingStrategy::kNoShard, 0}};
  for (int s : HybridGroups(world, gpus_per_node)) strategies.emplace_back(ShardingStrategy::kHybridShard, s);
  const BackwardPrefetch bp = p.base.train.sharding.backward_prefetch;
  // offload: 0 none, 1 CPU, 2 NVMe optimizer state, 3 NVMe parameters and optimizer state.
  auto first_stage = [&](int offload) -> absl::Status {
    for (const auto& [strategy, group] : strategies) {
      for (bool ac : {false, true}) {
        for (int64_t micro : Divisors(per_device)) {
          PlanCandidate c;
          c.strategy = strategy;
          c.shard_group = group;
          c.activation_checkpointing = ac;
          c.micro_batch = micro;
          c.grad_accum_steps = per_device / micro;
          c.backward_prefetch = bp;
          c.forward_prefetch = p.base.train.sharding.forward_prefetch;
          c.limit_all_gathers = p.base.train.sharding.limit_all_gathers;
          c.cpu_offload = offload == 1;
          c.nvme_optimizer = offload >= 2;
          c.nvme_params = offload == 3;
          ZS_RETURN_IF_ERROR(consider(c));
        }
      }
    }
    return absl::OkStatus();
  };
  ZS_RETURN_IF_ERROR(first_stage(0));
  if (all.empty() && !p.base.train.sharding.offload.any()) {
    // Nothing fits on the devices alone: the same candidates with CPU offload.
    r.searched_offload = true;
    ZS_RETURN_IF_ERROR(first_stage(1));
    // Nor in the host's memory: the optimizer state to NVMe, then the master shards too.
    for (int nvme : {2, 3}) {
      if (!all.empty() || p.host_memory_cap_bytes <= 0) break;
      r.searched_nvme = true;
      ZS_RETURN_IF_ERROR(first_stage(nvme));
    }
  }
  auto by_time = [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.result.step_time_s < b.result.step_time_s;
  };
  std::sort(all.begin(), all.end(), by_time);

  // Stage 2: the schedule options of the best few.
  const int refine = std::min<int>(p.refine, static_cast<int>(all.size()));
  std::vector<PlanCandidate> best(all.begin(), all.begin() + refine);
  for (const PlanCandidate& b : best) {
    for (BackwardPrefetch prefetch : {BackwardPrefetch::kBackwardPre, BackwardPrefetch::kBackwardPost}) {
      for (bool forward : {false, true}) {
        for (int limit : {1, 2, 4}) {
          if (prefetch == b.backward_prefetch && forward == b.forward_prefetch && limit == b.limit_all_gathers) {
            continue;
          }
          PlanCandidate c = b;
          c.backward_prefetch = prefetch;
          c.forward_prefetch = forward;
          c.limit_all_gathers = limit;
          ZS_RETURN_IF_ERROR(consider(c));
        }
      }
    }
  }
  std::sort(all.begin(), all.end(), by_time);
  r.fitting = std::move(all);
  return r;
}

std::string PlanResult::ToText(int top) const {
  std::string t = absl::StrFormat("%d ranks, memory cap %s per rank: %d candidates simulated, %d fit\n", world,
                                  FormatBytes(memory_cap_bytes), simulated, static_cast<int>(fitting.size()));
  if (searched_offload) absl::StrAppend(&t, "nothing fit on the devices alone: CPU offload searched too\n");
  if (searched_nvme) {
    absl::StrAppendFormat(&t, "nothing fit the host's %s per rank with CPU offload: NVMe offload searched too\n",
                          FormatBytes(host_memory_cap_bytes));
  }
  if (fitting.empty()) {
    absl::StrAppendFormat(&t, "nothing fits: the smallest peak was %s per rank", FormatBytes(smallest_peak_bytes));
    if (host_memory_cap_bytes > 0 && smallest_host_bytes >= 0) {
      absl::StrAppendFormat(&t, "; under the device cap, the least host memory was %s per rank",
                            FormatBytes(smallest_host_bytes));
    }
    absl::StrAppend(&t, "\n");
    return t;
  }
  absl::StrAppendFormat(&t, "%-4s %-76s %12s %14s %7s %12s%s\n", "#", "plan", "step (ms)", "tokens/s/dev", "MFU",
                        "peak/rank", searched_offload ? "    host/rank" : "");
  const int n = std::min<int>(top, static_cast<int>(fitting.size()));
  for (int i = 0; i < n; ++i) {
    const PlanCandidate& c = fitting[i];
    absl::StrAppendFormat(&t, "%-4d %-76s %12.2f %14.0f %6.1f%% %12s%s\n", i + 1, c.Describe(),
                          1e3 * c.result.step_time_s, c.result.tokens_per_s_per_device, 100 * c.result.mfu,
                          FormatBytes(c.result.peak_bytes_per_rank),
                          searched_offload ? absl::StrFormat(" %12s", FormatBytes(c.result.host_bytes_per_rank)) : "");
  }
  absl::StrAppend(&t, "\nthe config of #1 (train_gpt --config=FILE):\n", fitting[0].config_json);
  return t;
}

std::string PlanResult::ToJson(int top) const {
  std::string j = absl::StrFormat(
      "{\"world\": %d, \"memory_cap_bytes\": %d, \"host_memory_cap_bytes\": %d, \"simulated\": %d, "
      "\"searched_offload\": %s, \"searched_nvme\": %s, \"plans\": [",
      world, memory_cap_bytes, host_memory_cap_bytes, simulated, searched_offload ? "true" : "false",
      searched_nvme ? "true" : "false");
  const int n = std::min<int>(top, static_cast<int>(fitting.size()));
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&j, i ? ", " : "", "{\"plan\": \"", fitting[i].Describe(), "\", \"result\": ",
                    fitting[i].result.ToJson(), ", \"config\": ", fitting[i].config_json, "}");
  }
  absl::StrAppend(&j, "]}");
  return j;
}

}  // namespace zeroshard::sim
