// zs_plan: the fastest sharding plans that fit, for a model on a cluster, by
// simulating each candidate (sim/planner.h, Note [What the planner searches]).
//
//   bazel-bin/sim/zs_plan --model=llama-70b --profile=h100_dgx --nodes=8 \
//       --global_batch=512 --seq_len=8192 --param_dtype=bf16 --top=5
//
// Prints the plans with their simulated step time, throughput, MFU and peak
// memory, and the job config (JSON) of the best, for train_gpt --config. The
// job's --config / --set / flags give the base (optimizer, dtypes).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/sim/planner.h"
#include "zeroshard/sim/profile.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_flags.h"

ABSL_FLAG(std::string, config, "", "the job's JSON config; flags and --set override it");
ABSL_FLAG(std::string, profile, "h100_dgx", "hardware profile: a name in sim/profiles/ or a .json path");
ABSL_FLAG(int, nodes, 1, "nodes in the cluster");
ABSL_FLAG(int, gpus_per_node, 0, "GPUs per node (0: the profile's)");
ABSL_FLAG(int64_t, global_batch, 0, "sequences per optimizer step over all ranks (0: one per rank)");
ABSL_FLAG(int64_t, seq_len, 0, "tokens per sequence (0: the config's; a preset's: GPT-2 1024, Llama 2048)");
ABSL_FLAG(double, memory_cap_gb, 0, "memory per rank in GiB (0: the profile's device memory)");
ABSL_FLAG(double, host_memory_cap_gb, 0,
          "host memory per rank in GiB (0: not capped); past it CPU offload does not fit and NVMe offload is "
          "searched, its swap files under the job's --nvme_path (default /local_nvme)");
ABSL_FLAG(int, top, 5, "plans to print");
ABSL_FLAG(bool, json, false, "print one JSON object instead of the table");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "zs_plan: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zeroshard;
  absl::SetProgramUsageMessage(R"(the fastest sharding plans that fit, by simulating each (docs/simulator.md).
  --model=gpt2-124m|gpt2-1.5b|llama-8b|llama-70b|llama-405b|<config.json>  (default: the config's model)
  plus the flags below and every train_gpt config flag (--param_dtype, --reduce_dtype, ...;
  train_gpt --help lists them), --config and --set.)");
  absl::StatusOr<sim::SimCommandLine> line = sim::ReadSimCommandLine(
      argc, argv, [] { return absl::GetFlag(FLAGS_config); }, [] { return absl::GetFlag(FLAGS_seq_len); });
  if (!line.ok()) return Fail(line.status());

  sim::PlanOptions p;
  p.base = line->config;
  p.nodes = absl::GetFlag(FLAGS_nodes);
  p.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  p.global_batch = absl::GetFlag(FLAGS_global_batch);
  p.seq_len = line->seq_len;
  p.model_name = line->model_name;
  p.memory_cap_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_memory_cap_gb) * (int64_t{1} << 30));
  p.host_memory_cap_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_host_memory_cap_gb) * (int64_t{1} << 30));
  absl::StatusOr<sim::HardwareProfile> profile = sim::LoadProfile(absl::GetFlag(FLAGS_profile));
  if (!profile.ok()) return Fail(profile.status());
  p.profile = *profile;
  absl::StatusOr<sim::PlanResult> r = sim::Plan(p);
  if (!r.ok()) return Fail(r.status());
  const int top = absl::GetFlag(FLAGS_top);
  std::fputs(absl::GetFlag(FLAGS_json) ? (r->ToJson(top) + "\n").c_str() : r->ToText(top).c_str(), stdout);
  return 0;
}
