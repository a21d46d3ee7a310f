// zs_simulate: one training step of the real runtime on a virtual cluster
// (sim/simulator.h): step time, tokens/s per device, MFU, exposed
// communication, peak memory per rank, and a Perfetto trace of the predicted
// timeline. Models of any size cost nothing: no parameter is materialised.
//
//   bazel-bin/sim/zs_simulate --model=llama-8b --world=64 --profile=h100_dgx
//       --micro_batch=1 --seq_len=8192 --sharding_strategy=FULL_SHARD --param_dtype=bf16 --json
//   bazel-bin/sim/zs_simulate --config=examples/configs/default.json --world=4 --profile=cpu
//
// The job's own flags and --config / --set (train_gpt's, docs/config.md) set
// the strategy, prefetch, limit_all_gathers, mixed precision, accumulation and
// optimizer; the flags below set what the simulator adds. --model and
// --micro_batch / --seq_len override the config's model and batch. --trace
// (the job's trace.path) writes the predicted timeline of the measured step.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/sim/profile.h"
#include "zeroshard/sim/simulator.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_flags.h"

ABSL_FLAG(std::string, config, "", "the job's JSON config (examples/configs/); flags and --set override it");
ABSL_FLAG(int, world, 8, "ranks (GPUs) in the job");
ABSL_FLAG(int, gpus_per_node, 0, "GPUs per node (0: the profile's)");
ABSL_FLAG(std::string, profile, "h100_dgx", "hardware profile: a name in sim/profiles/ or a .json path");
ABSL_FLAG(int64_t, micro_batch, 0, "sequences per rank per micro-step (0: the config's train.batch_size)");
ABSL_FLAG(int64_t, seq_len, 0, "tokens per sequence (0: the config's model.block_size; a preset's: GPT-2 1024, Llama 2048)");
ABSL_FLAG(double, straggler_ms, 0, "a slow peer: every collective starts this many milliseconds later");
ABSL_FLAG(double, jitter_ms, 0, "each peer arrives late by a random delay of this mean in milliseconds (exponential, seeded)");
ABSL_FLAG(double, wake_ms, 0,
          "ranks sharing cores: a wait after compute ends this many milliseconds after its collective "
          "(Note [Waking on shared cores]; sim_validate prints the calibrated value)");
ABSL_FLAG(int32_t, wake_group_size, 0,
          "the group size --wake_ms was measured at: a group of g ranks wakes in wake_ms (g - 1) / (this - 1); "
          "0: every group takes wake_ms");
ABSL_FLAG(bool, json, false, "print one JSON object instead of the report");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "zs_simulate: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zeroshard;
  absl::SetProgramUsageMessage(R"(one training step of the real runtime on a virtual cluster (docs/simulator.md).
  --model=gpt2-124m|gpt2-1.5b|llama-8b|llama-70b|llama-405b|<config.json>  (default: the config's model)
  plus the flags below and every train_gpt config flag (--sharding_strategy, --param_dtype,
  --activation_checkpointing, ...; train_gpt --help lists them), --config and --set.)");
  absl::StatusOr<sim::SimCommandLine> line = sim::ReadSimCommandLine(
      argc, argv, [] { return absl::GetFlag(FLAGS_config); }, [] { return absl::GetFlag(FLAGS_seq_len); });
  if (!line.ok()) return Fail(line.status());
  const RunConfig* config = &line->config;

  sim::SimulateOptions o;
  o.job = config->train;
  o.world = absl::GetFlag(FLAGS_world);
  o.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  o.straggler_seconds = 1e-3 * absl::GetFlag(FLAGS_straggler_ms);
  o.jitter_seconds = 1e-3 * absl::GetFlag(FLAGS_jitter_ms);
  o.wake_seconds = 1e-3 * absl::GetFlag(FLAGS_wake_ms);
  o.wake_group_size = absl::GetFlag(FLAGS_wake_group_size);
  // The job's --trace (trace.path): here the predicted timeline of the measured step.
  const std::string trace_path = o.job.trace;
  o.record_spans = !trace_path.empty();
  absl::StatusOr<sim::HardwareProfile> profile = sim::LoadProfile(absl::GetFlag(FLAGS_profile));
  if (!profile.ok()) return Fail(profile.status());
  o.profile = *profile;
  o.seq_len = line->seq_len;
  o.model_name = line->model_name;
  if (absl::GetFlag(FLAGS_micro_batch) > 0) o.job.batch_size = absl::GetFlag(FLAGS_micro_batch);

  absl::StatusOr<sim::SimResult> r = sim::Simulate(o);
  if (!r.ok()) return Fail(r.status());
  if (!trace_path.empty()) {
    if (absl::Status s = sim::WriteTrace(*r, trace_path); !s.ok()) return Fail(s);
  }
  std::fputs(absl::GetFlag(FLAGS_json) ? (r->ToJson() + "\n").c_str() : r->ToText().c_str(), stdout);
  return 0;
}
