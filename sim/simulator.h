// Simulate: one training step of the real runtime on a virtual cluster. The
// job's model (GPT or Llama, any size: no parameter is ever materialised),
// ShardedModel with its hooks and DeviceSchedule, the job's TrainStep
// (forward, backward, gradient reduction, clipping, AdamW) run for one
// representative rank on a virtual device (runtime/virtual_device.h) with a
// virtual communicator (collectives/virtual_communicator.h), both timed by a
// hardware profile (sim/profile.h, sim/cost_model.h). What comes out: the step
// time, throughput, MFU, how much communication the schedule failed to hide,
// the peak memory as the caching allocator would hold it, and a trace.
//
//   SimulateOptions o;
//   ZS_RETURN_IF_ERROR(ApplyModelPreset("llama-8b", /*seq_len=*/8192, &o.job));
//   ZS_ASSIGN_OR_RETURN(o.profile, LoadProfile("h100_dgx"));
//   o.world = 64;
//   o.job.batch_size = 1;                  // micro-batch per rank
//   o.seq_len = 8192;
//   o.job.sharding.strategy = ShardingStrategy::kFullShard;
//   ZS_ASSIGN_OR_RETURN(SimResult r, Simulate(o));
//   std::cout << r.ToJson();               // step_time_s, mfu, peak_bytes_per_rank, ...
//
// Note [What one simulated step is]
// - Two steps run: the first allocates what a job allocates once (optimizer
//   state, gathered buffers' first segments, the caching allocator's pools);
//   the clocks and peak memory are reset (Settle) and the second is measured,
//   as a steady-state step of a long job.
// - Step time: from the start of the second step until every stream and the
//   host are done. Compute: the union of compute spans on the compute stream;
//   copies: host transfers; communication: the union over communication
//   streams. Host: time a host kernel runs (CPU offload's optimizer step, the
//   adds of gradients into their host shards) while the device neither
//   computes nor copies. Exposed communication: time some collective runs
//   while neither compute, a copy nor a host kernel does; idle: time nothing
//   runs (the host is behind: launches, synchronising reads such as the loss).
// - MFU: the model's training FLOPs (CausalLm::TrainFlopsPerToken: 6 N plus
//   attention, as PaLM's appendix B counts them; recomputation not counted)
//   per token times the rank's tokens, over step time times the profile's
//   dense peak in the parameter dtype.
// - Memory: peak_bytes_per_rank is the caching allocator's peak reserved
//   bytes (what nvidia-smi shows), or the peak allocated bytes on a profile
//   without caching (the CPU). Parameters, gradients and optimizer state are
//   what the rank holds between steps, measured; activations and gathered
//   buffers the peak allocated beyond them; fragmentation reserved beyond
//   allocated at the peak.
// - CPU offload (strategy.cpu_offload with the optimizer: FSDP's CPUOffload,
//   ZeRO-Offload): the model's host allocator is the virtual device's host
//   side (Note [Virtual host]); the runtime's own copies and host kernels are
//   timed there. host_bytes_per_rank is its peak; `fits` is the device's.
#ifndef ZEROSHARD_SIM_SIMULATOR_H_
#define ZEROSHARD_SIM_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/autograd/nn/causal_lm.h"
#include "zeroshard/collectives/virtual_communicator.h"
#include "zeroshard/runtime/virtual_device.h"
#include "zeroshard/sim/cost_model.h"
#include "zeroshard/sim/profile.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard::sim {

// A profile's cost model as the virtual device and communicator take it.
class ProfileCost final : public VirtualCostModel, public VirtualNetwork {
 public:
  explicit ProfileCost(HardwareProfile profile) : profile_(std::move(profile)) {}
  const HardwareProfile& profile() const { return profile_; }

  double OpSeconds(const OpCost& cost) const override;
  double LaunchSeconds() const override { return profile_.launch_overhead_s; }
  double HostCopySeconds(int64_t bytes) const override;
  // Every host kernel streams its bytes at host_adam_bytes_per_s (HostAdamSeconds).
  double HostOpSeconds(const OpCost& cost) const override;
  // NvmeSeconds of the profile (sim/cost_model.h).
  double NvmeSeconds(bool write, int64_t bytes) const override;
  double CollectiveSeconds(CollectiveOp op, int64_t bytes, const VirtualGroup& group) const override;
  double BytesSent(CollectiveOp op, int64_t bytes, const VirtualGroup& group) const override;

 private:
  HardwareProfile profile_;
};

// Sets the job's model to "gpt2-124m", "gpt2-1.5b", "llama-8b", "llama-70b",
// "llama-405b" (Llama 3.1's shapes) or the LlamaForCausalLM of a Hugging Face
// config.json path: model.type and the model keys a config file would hold,
// so the job (and a config the planner writes) builds the same model.
// `seq_len` becomes model.block_size for a Llama (a GPT keeps its position table).
absl::Status ApplyModelPreset(const std::string& name_or_path, int64_t seq_len, TrainOptions* job);
std::vector<std::string> ModelPresetNames();

// The command line of a simulator program (zs_simulate, zs_plan): --model (a
// preset or a config.json) is taken out of argv, the rest is read as train_gpt
// reads it (ConfigFromCommandLine), as an MPI job's config - the simulated
// world is the program's own flag, checked by the simulator against the
// strategy - and the preset is applied with the sequence length
// `seq_len_flag()` gives (read after parsing; 0: the config's block_size, or a
// preset's: GPT-2 1024, Llama 2048).
struct SimCommandLine {
  RunConfig config;
  std::string model_name;
  int64_t seq_len = 0;
};
absl::StatusOr<SimCommandLine> ReadSimCommandLine(int argc, char** argv,
                                                  const std::function<std::string()>& config_path,
                                                  const std::function<int64_t()>& seq_len_flag);

struct SimulateOptions {
  // The job: sharding (strategy, prefetch, limit_all_gathers, mixed
  // precision), optimizer, grad_accum_steps, batch_size (micro-batch rows per
  // rank), model.activation_checkpointing, and the model (MakeJobModel).
  TrainOptions job;
  std::string model_name;  // for the report
  int64_t seq_len = 0;  // 0: job.model.block_size
  HardwareProfile profile;
  int world = 8;
  int gpus_per_node = 0;         // 0: the profile's
  double straggler_seconds = 0;  // a slow peer: every collective starts this much later
  double jitter_seconds = 0;     // peers arrive up to this much late at random (seeded)
  double wake_seconds = 0;       // a wait's wake on shared cores (Note [Waking on shared cores])
  int wake_group_size = 0;       // the group size wake_seconds was measured at (0: every group)
  bool record_spans = true;      // return the timeline in SimResult::spans (traces)
};

struct MemoryBreakdown {
  int64_t parameters = 0;       // f32 master shards on the device (0 with CPU offload)
  int64_t gradients = 0;        // gradient shards (and buffers: the rest of what lives between steps)
  int64_t optimizer_state = 0;  // Adam's moments
  int64_t activations = 0;      // peak allocated beyond the model state: activations, gathered buffers
  int64_t fragmentation = 0;    // reserved beyond allocated at the peak
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
};

// What CPU offload keeps in host memory (Note [Virtual host] in
// runtime/virtual_device.h: counted, never allocated), between steps and at
// the measured step's peak. All 0 without offload.
struct HostMemory {
  int64_t parameters = 0;       // f32 master shards
  int64_t gradients = 0;        // gradient shards (and whatever else stays on the host)
  int64_t optimizer_state = 0;  // Adam's moments (none with NVMe offload of the optimizer: in the swap file)
  int64_t swap_buffers = 0;     // NVMe offload: the swap spaces' buffers
  int64_t staging = 0;          // peak beyond them: gradients copied down before their add
  int64_t peak = 0;             // the peak: host_bytes_per_rank
};

// One unit's share of the measured step on the compute stream, from the
// sharding hooks' own spans (recorded on the compute stream's clock): forward
// and backward from its pre- to its post-hook (waits included), and the time
// the stream waited for its collectives (exposed communication).
struct UnitTime {
  std::string name;
  double forward_s = 0, backward_s = 0, exposed_s = 0;
};

struct SimResult {
  std::string model;
  std::string profile;
  int world = 0;
  int gpus_per_node = 0;
  int64_t parameters = 0;
  int64_t tokens_per_step = 0;  // per rank
  double model_flops_per_step = 0;  // per rank
  double step_time_s = 0;
  double tokens_per_s_per_device = 0;
  double mfu = 0;
  // The partition of the step (Note [What one simulated step is]): compute,
  // copies not under compute, host kernels under neither (host_s), exposed
  // communication, idle; comm_s is all communication.
  double compute_s = 0, copy_s = 0, comm_s = 0, exposed_comm_s = 0, host_s = 0, idle_s = 0;
  // CPU offload's own figures, overlapped or not: every host <-> device
  // transfer (HostCopySeconds each; the batch and the loss read included),
  // and the host optimizer step (HostAdamSeconds of its bytes).
  double host_copy_s = 0, host_copy_bytes = 0, host_optimizer_s = 0;
  // NVMe offload (Note [Virtual NVMe] in runtime/nvme/virtual_swap_store.h):
  // the "nvme" track's busy time, the part of it nothing else covers (the
  // host waiting for a read; the step's last writes: the next step's forward
  // could run under those, so the step time is an upper bound by at most
  // them), and the bytes read and written in the step.
  double nvme_s = 0, exposed_nvme_s = 0, nvme_read_bytes = 0, nvme_write_bytes = 0;
  // Part of idle_s: collectives waiting for late peers (SimulateOptions'
  // straggler and jitter) while nothing else runs. The rest of a collective
  // (the transfer) is communication; tools/trace_summary splits a traced
  // job's waits the same way (Note [Communication spans]).
  double peer_wait_s = 0;
  double exposed_comm_fraction = 0;
  double comm_bytes_per_step = 0;  // sent by this rank
  int64_t peak_bytes_per_rank = 0;
  int64_t memory_capacity_bytes = 0;  // the profile's device memory
  bool fits = true;                   // peak_bytes_per_rank <= memory_capacity_bytes
  MemoryBreakdown memory;
  int64_t host_bytes_per_rank = 0;  // CPU offload: the host memory's peak (host_memory.peak)
  HostMemory host_memory;
  int64_t nvme_bytes_per_rank = 0;  // NVMe offload: the swap files' size
  std::string config;  // the sharding options, as ShardingOptions::ToString
  std::vector<UnitTime> units;  // in forward order
  // The measured step's timeline (when recorded) and the device's stream names.
  std::vector<VirtualSpan> spans;
  std::vector<std::string> streams;

  // One JSON object: every figure above, "breakdown" and "memory" objects.
  std::string ToJson() const;
  // A human-readable report.
  std::string ToText() const;
};

absl::StatusOr<SimResult> Simulate(const SimulateOptions& options);

// Interval arithmetic over [start, end) spans (the breakdown's, and
// sim_validate's over a measured trace): the length of the union of `v`, and
// the length of the union of `a` not covered by the union of `b`.
double UnionLength(std::vector<std::pair<double, double>> v);
double UncoveredLength(const std::vector<std::pair<double, double>>& a, const std::vector<std::pair<double, double>>& b);

// The measured step as a Chrome/Perfetto trace (JSON): one process, a track per stream.
absl::Status WriteTrace(const SimResult& result, const std::string& path);

}  // namespace zeroshard::sim

#endif  // ZEROSHARD_SIM_SIMULATOR_H_
