// CPU offload in the simulator (sim/simulator.h; Note [Virtual host] in
// runtime/virtual_device.h): the runtime's own offload path - master shards,
// gradient shards and Adam's state in host memory, the shard copied up before
// each all-gather and the reduced gradient copied down after each
// reduction, the optimizer step on the host - on a virtual host that counts
// bytes without holding them. Closed forms, exactly:
//
//   Psi = the padded flat parameters, N = the world, per rank Psi / N elements.
//   Host memory at rest: 4 (f32 master) + 4 (f32 gradient) + 8 (two f32
//     moments) = 16 Psi / N bytes (ZeRO-Offload's 12 Psi / N of master and
//     moments, plus the gradient shard the host step reads); the device holds
//     none of it. Host peak: that plus the largest unit's f32 gradient shard,
//     staged on the host before its add.
//   Host <-> device bytes per step (FULL_SHARD): each all-gather copies the
//     f32 shard up first, forward and backward (2 Psi - root: the root stays
//     gathered between them), and each reduction copies the f32 shard down:
//     4 (2 Psi - root) / N + 4 Psi / N.
//   The optimizer step: AdamW reads and writes the master and both moments and
//     reads the gradient, 3 x 2 x 4 + 4 = 28 bytes per element, at
//     host_adam_bytes_per_s: HostAdamSeconds(28 Psi / N).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "zeroshard/sim/cost_model.h"
#include "zeroshard/sim/planner.h"
#include "zeroshard/sim/profile.h"
#include "zeroshard/sim/simulator.h"
#include "zeroshard/tests/sim/small_gpt.h"

namespace zeroshard::sim {
namespace {

// strategy.cpu_offload true: master shards, gradients and the optimizer step on the host.
OffloadPolicy CpuOffload() { return OffloadPolicy{.params = true, .grads = true, .optimizer = true}; }

// The small GPT of simulator_test.cc (4 Block units and the root), FULL_SHARD.
SimulateOptions Small(int world) { return testing::SmallGpt(ShardingStrategy::kFullShard, world); }

// Its units padded to a multiple of `world` (as simulator_test.cc lays them out):
// Psi, the root's share, and the largest unit (a Block).
struct Flats {
  int64_t psi = 0, root = 0, largest = 0;
};
Flats GptFlats(int world) {
  const int64_t C = 64, V = 512, T = 64;
  auto pad = [world](int64_t n) { return (n + world - 1) / world * world; };
  const int64_t block = pad(12 * C * C + 13 * C), root = pad(V * C + T * C + 2 * C);
  return {.psi = 4 * block + root, .root = root, .largest = std::max(block, root)};
}

TEST(SimulatorOffload, TheStateMovesToTheHostToTheByte) {
  constexpr int kWorld = 8;
  const Flats f = GptFlats(kWorld);
  const int64_t per_rank = f.psi / kWorld;
  SimulateOptions o = Small(kWorld);
  absl::StatusOr<SimResult> base = Simulate(o);
  o.job.sharding.offload = CpuOffload();
  absl::StatusOr<SimResult> off = Simulate(o);
  ASSERT_TRUE(base.ok() && off.ok()) << base.status() << off.status();

  // The device keeps nothing between steps: no master shard, no gradient
  // shard, no moments (the GPT has no buffers).
  EXPECT_EQ(off->memory.parameters, 0);
  EXPECT_EQ(off->memory.optimizer_state, 0);
  EXPECT_EQ(off->memory.gradients, 0);
  EXPECT_EQ(base->memory.parameters + base->memory.gradients + base->memory.optimizer_state, 16 * per_rank);
  // The host holds all of it: master and moments 12 Psi / N, the gradient 4 Psi / N.
  EXPECT_EQ(off->host_memory.parameters, 4 * per_rank);
  EXPECT_EQ(off->host_memory.optimizer_state, 8 * per_rank);
  EXPECT_EQ(off->host_memory.gradients, 4 * per_rank);
  EXPECT_EQ(off->host_memory.staging, 4 * f.largest / kWorld);
  EXPECT_EQ(off->host_bytes_per_rank, 16 * per_rank + 4 * f.largest / kWorld);
  EXPECT_EQ(base->host_bytes_per_rank, 0);
  // The device's peak loses the state and keeps the step's transients.
  EXPECT_LT(off->memory.peak_allocated, base->memory.peak_allocated);

  // Host <-> device bytes: the batch and the loss move in both runs; offload
  // adds the shards, copied up before each all-gather and down after each
  // reduction (exact: integer byte counts summed in double far below 2^53).
  const double moved = 4.0 * (2 * f.psi - f.root) / kWorld + 4.0 * f.psi / kWorld;
  EXPECT_EQ(off->host_copy_bytes - base->host_copy_bytes, moved);
  // HostCopySeconds is linear (bytes / host_link_bytes_per_s), so the copies'
  // times add up to the moved bytes' time, to the rounding of a few hundred
  // double sums (relative 1e-12; 1e-9 leaves room).
  const double copy_s = HostCopySeconds(o.profile, static_cast<int64_t>(moved));
  EXPECT_NEAR(off->host_copy_s - base->host_copy_s, copy_s, 1e-9 * copy_s);
  // The optimizer step on the host: rank 0's shards hold only real elements
  // (the padding is at the end of each flat buffer, in the last rank's shard),
  // so AdamW steps Psi / N elements of 28 bytes; none of it on the device.
  const double adam_s = HostAdamSeconds(o.profile, 28.0 * per_rank);
  EXPECT_NEAR(off->host_optimizer_s, adam_s, 1e-9 * adam_s);
  EXPECT_EQ(base->host_optimizer_s, 0);
  // A lower bound on the step from the schedule: every offload copy runs on
  // the schedule's one copy stream (so the copies never overlap one another),
  // and the last of them - the last reduction's copy down - is waited for by
  // the host before backward returns, so all of them end before the host's
  // first AdamW span starts; the host runs its AdamW spans one after another.
  // Disjoint intervals inside the step: it is at least their sum (1e-9 for
  // the rounding of the sums, as above).
  EXPECT_GE(off->step_time_s, (copy_s + adam_s) * (1 - 1e-9));
  // The partition still adds up: compute, copies, host kernels under
  // neither, exposed communication, idle (6e-9: simulator_test.cc's bound for
  // printing; here the doubles themselves, far closer).
  EXPECT_NEAR(off->compute_s + off->copy_s + off->exposed_comm_s + off->host_s + off->idle_s, off->step_time_s,
              6e-9 * off->step_time_s);
  // The host's AdamW runs after backward, when the device has nothing queued
  // (the host waited for the last copy, which waited for compute): all of it
  // is host time in the partition.
  EXPECT_GE(off->host_s, off->host_optimizer_s * (1 - 1e-9));
  // The same collectives either way: offload changes where bytes rest, not what is sent.
  EXPECT_EQ(off->comm_bytes_per_step, base->comm_bytes_per_step);

  const nlohmann::json j = nlohmann::json::parse(off->ToJson());
  EXPECT_EQ(j["host_bytes_per_rank"].get<int64_t>(), off->host_bytes_per_rank);
  EXPECT_EQ(j["host_memory"]["optimizer_state"].get<int64_t>(), 8 * per_rank);
  for (const char* key : {"host_s", "host_copy_s", "host_copy_bytes", "host_optimizer_s"}) {
    EXPECT_TRUE(j["breakdown"].contains(key)) << key;
  }
  EXPECT_NE(off->ToText().find("host memory"), std::string::npos) << off->ToText();
}

// keep_low_precision_grads with a bf16 reduce: the host gradient shard is bf16
// (2 bytes), and AdamW reads 2 bytes of gradient: 26 bytes per element.
TEST(SimulatorOffload, LowPrecisionGradientsHalveTheHostGradient) {
  constexpr int kWorld = 4;
  const int64_t per_rank = GptFlats(kWorld).psi / kWorld;
  SimulateOptions o = Small(kWorld);
  o.job.sharding.offload = CpuOffload();
  o.job.sharding.mixed_precision.reduce_dtype = DType::kBF16;
  o.job.sharding.mixed_precision.keep_low_precision_grads = true;
  absl::StatusOr<SimResult> r = Simulate(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host_memory.gradients, 2 * per_rank);
  EXPECT_EQ(r->host_memory.parameters + r->host_memory.optimizer_state, 12 * per_rank);
  const double adam_s = HostAdamSeconds(o.profile, 26.0 * per_rank);
  EXPECT_NEAR(r->host_optimizer_s, adam_s, 1e-9 * adam_s);
}

TEST(SimulatorOffload, RefusesWhatAGpuJobCannotRun) {
  // Master shards or gradients on the host with the optimizer on the device:
  // AdamWStep refuses the mix on a GPU, so the simulator says so up front.
  for (const OffloadPolicy& partial : {OffloadPolicy{.params = true}, OffloadPolicy{.grads = true}}) {
    SimulateOptions o = Small(8);
    o.job.sharding.offload = partial;
    const absl::Status s = Simulate(o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("\"optimizer\": true"), std::string::npos) << s;
  }
}

// NVMe offload (ZeRO-Infinity) on the simulated drives (Note [Virtual NVMe]
// in runtime/nvme/virtual_swap_store.h): the runtime's swap spaces keep their
// regions there, no file is made (the nvme_path does not exist) and no byte
// is touched. Closed forms, exactly:
//   the swap files: a region per unit, 4096-aligned: the optimizer's holds
//     both moments (2 slots of AlignUp(4 n, 4096)), the parameters' one f32
//     master shard (AlignUp(4 n, 4096)), n = the unit's shard;
//   host memory: what the files hold leaves it; it holds the swap buffers,
//     min(buffer_count, regions) of the largest region each, plus 4096 bytes
//     of alignment slack each;
//   every region is stepped, so written back, once per step; a region is
//     read unless a buffer still holds it, so at least the file less the
//     buffers is read;
//   each transfer takes NvmeSeconds on one track, one after another.
int64_t Align4096(int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

TEST(SimulatorOffload, NvmeOffloadSwapsThroughTheSimulatedDrives) {
  constexpr int kWorld = 4;
  const Flats f = GptFlats(kWorld);
  const int64_t per_rank = f.psi / kWorld;
  const int64_t block = (f.psi - f.root) / 4 / kWorld, root = f.root / kWorld;  // shard elements
  SimulateOptions o = Small(kWorld);
  o.job.sharding.offload = CpuOffload();
  absl::StatusOr<SimResult> cpu = Simulate(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();

  for (bool params : {false, true}) {
    SCOPED_TRACE(params ? "nvme_params_and_optimizer" : "nvme_optimizer");
    OffloadPolicy& off = o.job.sharding.offload;
    off = OffloadPolicy{.nvme_optimizer = true, .nvme_params = params};
    off.optimizer_nvme.path = off.param_nvme.path = "/nonexistent";  // never opened
    off.param_nvme.max_in_cpu = 0;  // every master shard on NVMe
    absl::StatusOr<SimResult> r = Simulate(o);
    ASSERT_TRUE(r.ok()) << r.status();

    const int64_t opt_regions = 4 * 2 * Align4096(4 * block) + 2 * Align4096(4 * root);
    const int64_t opt_buffer = std::max(2 * Align4096(4 * block), 2 * Align4096(4 * root));
    const int64_t par_regions = params ? 4 * Align4096(4 * block) + Align4096(4 * root) : 0;
    const int64_t par_buffer = params ? std::max(Align4096(4 * block), Align4096(4 * root)) : 0;
    EXPECT_EQ(r->nvme_bytes_per_rank, opt_regions + par_regions);
    // 5 regions each: the optimizer's 4 buffers, the parameters' 5 (DeepSpeed's
    // defaults), each with 4096 bytes of alignment slack.
    EXPECT_EQ(r->host_memory.swap_buffers, 4 * (opt_buffer + 4096) + (params ? 5 * (par_buffer + 4096) : 0));
    EXPECT_EQ(r->host_memory.optimizer_state, 0);
    EXPECT_EQ(r->host_memory.parameters, params ? 0 : 4 * per_rank);
    EXPECT_EQ(r->host_memory.gradients, 4 * per_rank);
    EXPECT_EQ(r->memory.parameters + r->memory.optimizer_state, 0);

    // Written: every region once. Read: all but what the buffers kept.
    EXPECT_EQ(r->nvme_write_bytes, static_cast<double>(opt_regions + par_regions));
    EXPECT_LE(r->nvme_read_bytes, (params ? 3.0 : 1.0) * static_cast<double>(opt_regions + par_regions));
    EXPECT_GE(r->nvme_read_bytes, static_cast<double>(opt_regions - 4 * opt_buffer));

    // Each transfer is NvmeSeconds of its bytes, on one track, in turn. A
    // span's end is start + seconds in double, so end - start recovers the
    // seconds within an ulp of the clock (< 1e-15 s below 10 s), far below
    // 1e-9 of a transfer (at least the 100 us latency).
    double busy = 0;
    int transfers = 0;
    double last_end = 0;
    for (const VirtualSpan& sp : r->spans) {
      if (sp.category != "nvme") continue;
      ++transfers;
      const double want = NvmeSeconds(o.profile, sp.name == "NvmeWrite", static_cast<int64_t>(sp.bytes));
      EXPECT_NEAR(sp.end - sp.start, want, 1e-9 * want) << sp.name;
      EXPECT_GE(sp.start, last_end - 1e-15);  // one at a time
      last_end = sp.end;
      busy += sp.end - sp.start;
    }
    EXPECT_GT(transfers, 0);
    EXPECT_NEAR(r->nvme_s, busy, 1e-9 * busy);
    // The swaps only ever hold the host back: the same schedule as CPU
    // offload plus waits (every start is a max of clocks), and the partition
    // still adds up (the bounds of the test above).
    EXPECT_GE(r->step_time_s, cpu->step_time_s * (1 - 1e-9));
    EXPECT_NEAR(r->compute_s + r->copy_s + r->exposed_comm_s + r->host_s + r->exposed_nvme_s + r->idle_s,
                r->step_time_s, 6e-9 * r->step_time_s);
    EXPECT_EQ(r->comm_bytes_per_step, cpu->comm_bytes_per_step);

    const nlohmann::json j = nlohmann::json::parse(r->ToJson());
    EXPECT_EQ(j["nvme_bytes_per_rank"].get<int64_t>(), r->nvme_bytes_per_rank);
    EXPECT_EQ(j["host_memory"]["swap_buffers"].get<int64_t>(), r->host_memory.swap_buffers);
    for (const char* key : {"nvme_s", "exposed_nvme_s", "nvme_read_bytes", "nvme_write_bytes"}) {
      EXPECT_TRUE(j["breakdown"].contains(key)) << key;
    }
    EXPECT_NE(r->ToText().find("NVMe swap"), std::string::npos) << r->ToText();
  }
}

// Drives with no cost (infinite bandwidth, no latency): NVMe offload takes the
// time CPU offload takes. The same ops are charged the same seconds; only the
// optimizer's unit order alternates with NVMe (Note [Swap buffers]'s reuse),
// which reorders a few hundred double additions on the host clock (relative
// error < 1e-13; 1e-9 leaves room).
TEST(SimulatorOffload, FreeDrivesCostNothingOverCpuOffload) {
  SimulateOptions o = Small(4);
  o.job.sharding.offload = CpuOffload();
  absl::StatusOr<SimResult> cpu = Simulate(o);
  o.profile.nvme_read_bytes_per_s = o.profile.nvme_write_bytes_per_s = 1e300;
  o.profile.nvme_latency_s = 0;
  o.job.sharding.offload = OffloadPolicy{.nvme_optimizer = true, .nvme_params = true};
  o.job.sharding.offload.optimizer_nvme.path = o.job.sharding.offload.param_nvme.path = "/nonexistent";
  absl::StatusOr<SimResult> nvme = Simulate(o);
  ASSERT_TRUE(cpu.ok() && nvme.ok()) << cpu.status() << nvme.status();
  EXPECT_NEAR(nvme->step_time_s, cpu->step_time_s, 1e-9 * cpu->step_time_s);
  EXPECT_GT(nvme->nvme_write_bytes, 0);
}

// Peak resident memory of this process (Linux), or -1 where /proc says nothing.
int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kb = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb * 1024;
  }
  return -1;
}

// Llama 3 70B with its optimizer on the host at world 64: 16.4 GiB of host
// state per rank that exists only as counts. Every unit's numel is a multiple
// of 64 (the layers' 855,654,400 and the root's 2,101,354,496), so Psi is the
// parameter count itself.
TEST(SimulatorOffload, Llama70BAtWorld64SimulatesQuicklyWithoutTheMemory) {
  SimulateOptions o;
  ASSERT_TRUE(ApplyModelPreset("llama-70b", 8192, &o.job).ok());
  absl::StatusOr<HardwareProfile> p = LoadProfile("h100_dgx");
  ASSERT_TRUE(p.ok()) << p.status();
  o.profile = *p;
  o.world = 64;
  o.seq_len = 8192;
  o.job.batch_size = 1;
  o.job.model.activation_checkpointing = true;
  // The job config's unit (a bare TrainOptions has none: one unit, the root).
  o.job.sharding.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
  o.job.sharding.mixed_precision.param_dtype = DType::kBF16;
  o.job.sharding.mixed_precision.reduce_dtype = DType::kF32;
  o.job.sharding.offload = CpuOffload();
  o.record_spans = false;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<SimResult> r = Simulate(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t psi = r->parameters;
  ASSERT_EQ(psi, 80 * int64_t{855654400} + 2101354496);
  ASSERT_EQ(psi % 64, 0);
  const int64_t per_rank = psi / 64;
  EXPECT_EQ(r->host_memory.parameters + r->host_memory.optimizer_state, 12 * per_rank);
  EXPECT_EQ(r->host_memory.gradients, 4 * per_rank);
  // The largest unit is the root (embedding and head): its f32 gradient shard is staged.
  EXPECT_EQ(r->host_bytes_per_rank, 16 * per_rank + 4 * (2101354496 / 64)) << r->ToText();
  EXPECT_EQ(r->memory.parameters, 0);
  EXPECT_EQ(r->memory.optimizer_state, 0);
  const double adam_s = HostAdamSeconds(o.profile, 28.0 * per_rank);
  EXPECT_NEAR(r->host_optimizer_s, adam_s, 1e-9 * adam_s);
  // Quickly: about 0.1 s optimised, a few seconds unoptimised on a loaded
  // 2-core box; 60 s fails only if the host side did real work per element.
  EXPECT_LT(seconds, 60.0);
  // Without the memory: the host state is 16.4 GiB; this process, every
  // test before this one included, stays far below it (a real host side
  // would have touched all of it: AdamW writes every element).
  const int64_t rss = PeakRssBytes();
  if (rss >= 0) {
    EXPECT_LT(rss, int64_t{2} << 30) << "peak RSS " << rss << " bytes";
  }
}

// The small GPT (width 256) on one GPU with a device cap just below the
// smallest peak of every plan without offload.
PlanOptions PlanThatMustOffload() {
  PlanOptions p;
  p.base.train = Small(1).job;
  p.base.train.model.n_embd = 256;
  absl::StatusOr<HardwareProfile> profile = LoadProfile("h100_dgx");
  EXPECT_TRUE(profile.ok()) << profile.status();
  p.profile = *profile;
  p.nodes = 1;
  p.gpus_per_node = 1;
  p.global_batch = 1;
  p.seq_len = 64;
  p.refine = 1;
  // The smallest peak of the first stage without offload: every strategy
  // (HYBRID_SHARD has no group at world 1), checkpointing on and off, micro 1.
  int64_t smallest = -1;
  for (ShardingStrategy strategy :
       {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
    for (bool ac : {false, true}) {
      SimulateOptions o;
      o.job = p.base.train;
      o.job.sharding.strategy = strategy;
      o.job.model.activation_checkpointing = ac;
      o.job.batch_size = 1;
      o.profile = *profile;
      o.world = 1;
      o.gpus_per_node = 1;
      o.seq_len = 64;
      absl::StatusOr<SimResult> r = Simulate(o);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) continue;
      if (smallest < 0 || r->peak_bytes_per_rank < smallest) smallest = r->peak_bytes_per_rank;
    }
  }
  p.memory_cap_bytes = smallest - 1;
  return p;
}

// A plan's config, read back, simulates (one GPU) to the plan's own step and host memory.
void ExpectSameStep(const RunConfig& config, const HardwareProfile& profile, int64_t seq_len,
                    const PlanCandidate& plan) {
  SimulateOptions o;
  o.job = config.train;
  o.profile = profile;
  o.world = config.world_size;
  o.gpus_per_node = 1;
  o.seq_len = seq_len;
  absl::StatusOr<SimResult> again = Simulate(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step_time_s, plan.result.step_time_s);
  EXPECT_EQ(again->host_bytes_per_rank, plan.result.host_bytes_per_rank);
}

// zs_plan with a cap no on-device plan meets: it searches CPU offload, and its
// best plan's config runs it. World 1 (1 node of 1 GPU), so the 16 Psi bytes of
// state (30 MiB for this GPT) dwarf the caching allocator's segment rounding.
TEST(SimulatorOffload, ThePlannerOffloadsWhenNothingElseFits) {
  PlanOptions p = PlanThatMustOffload();
  const HardwareProfile* profile = &p.profile;
  absl::StatusOr<PlanResult> r = Plan(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->searched_offload);
  ASSERT_FALSE(r->fitting.empty()) << r->ToText(5);
  for (const PlanCandidate& c : r->fitting) {
    EXPECT_TRUE(c.cpu_offload) << c.Describe();
    EXPECT_LE(c.result.peak_bytes_per_rank, p.memory_cap_bytes) << c.Describe();
    EXPECT_GT(c.result.host_bytes_per_rank, 0) << c.Describe();
  }
  EXPECT_NE(r->ToText(1).find("+cpu_offload"), std::string::npos) << r->ToText(1);
  // The best plan's config turns offload on, and simulates to the same step.
  const PlanCandidate& best = r->fitting[0];
  absl::StatusOr<RunConfig> c = ConfigFromText(best.config_json, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->train.sharding.offload.optimizer_on_host());
  ExpectSameStep(*c, *profile, 64, best);
}

// With a host cap below every CPU-offload plan's host memory too, the planner
// searches NVMe offload (Note [What the planner searches]); its plans keep
// under both caps, and the best one's config - NVMe on, the swap files under
// the given nvme_path - reads back and simulates to the same step.
TEST(SimulatorOffload, ThePlannerGoesToNvmeWhenTheHostIsFullToo) {
  PlanOptions p = PlanThatMustOffload();
  absl::StatusOr<PlanResult> cpu = Plan(p);
  ASSERT_TRUE(cpu.ok() && !cpu->fitting.empty()) << cpu.status();
  int64_t least_host = -1;
  for (const PlanCandidate& c : cpu->fitting) {
    if (least_host < 0 || c.result.host_bytes_per_rank < least_host) least_host = c.result.host_bytes_per_rank;
  }
  p.host_memory_cap_bytes = least_host - 1;
  p.nvme_path = "/mnt/local_nvme";
  absl::StatusOr<PlanResult> r = Plan(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->searched_offload);
  EXPECT_TRUE(r->searched_nvme);
  ASSERT_FALSE(r->fitting.empty()) << r->ToText(5);
  for (const PlanCandidate& c : r->fitting) {
    EXPECT_TRUE(c.nvme_optimizer) << c.Describe();
    EXPECT_FALSE(c.cpu_offload) << c.Describe();
    EXPECT_LE(c.result.peak_bytes_per_rank, p.memory_cap_bytes) << c.Describe();
    EXPECT_LE(c.result.host_bytes_per_rank, p.host_memory_cap_bytes) << c.Describe();
    EXPECT_GT(c.result.nvme_bytes_per_rank, 0) << c.Describe();
  }
  EXPECT_NE(r->ToText(1).find("NVMe offload searched"), std::string::npos) << r->ToText(1);
  EXPECT_NE(r->ToJson(1).find("\"searched_nvme\": true"), std::string::npos);
  const PlanCandidate& best = r->fitting[0];
  absl::StatusOr<RunConfig> c = ConfigFromText(best.config_json, {});
  ASSERT_TRUE(c.ok()) << c.status() << best.config_json;
  EXPECT_TRUE(c->train.sharding.offload.nvme_optimizer);
  EXPECT_EQ(c->train.sharding.offload.optimizer_nvme.path, "/mnt/local_nvme");
  ExpectSameStep(*c, p.profile, 64, best);

  // Below what even NVMe offload needs on the host: nothing fits, and the
  // message says how much the least-hungry plan needed.
  p.host_memory_cap_bytes = 1;
  absl::StatusOr<PlanResult> none = Plan(p);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->fitting.empty());
  EXPECT_NE(none->ToText(1).find("the least host memory was"), std::string::npos) << none->ToText(1);
}

// A preset's plan: Llama 3 8B on one GPU needs its state (16 x 8B bytes) on
// the host, and the best plan's config - model.type llama, its decoder layer
// as the unit, CPU offload on - reads back and simulates to the same step.
TEST(SimulatorOffload, APresetsOffloadPlanReadsBackAndRuns) {
  PlanOptions p;
  ASSERT_TRUE(ApplyModelPreset("llama-8b", 256, &p.base.train).ok());
  p.base.train.sharding.mixed_precision.param_dtype = DType::kBF16;
  absl::StatusOr<HardwareProfile> profile = LoadProfile("h100_dgx");
  ASSERT_TRUE(profile.ok());
  p.profile = *profile;
  p.nodes = 1;
  p.gpus_per_node = 1;
  p.global_batch = 1;
  p.seq_len = 256;
  p.refine = 1;
  absl::StatusOr<PlanResult> r = Plan(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->searched_offload);
  ASSERT_FALSE(r->fitting.empty());
  const PlanCandidate& best = r->fitting[0];
  EXPECT_TRUE(best.cpu_offload);
  absl::StatusOr<RunConfig> c = ConfigFromText(best.config_json, {});
  ASSERT_TRUE(c.ok()) << c.status() << best.config_json;
  EXPECT_EQ(c->model_type, "llama");
  ExpectSameStep(*c, *profile, 256, best);
}

}  // namespace
}  // namespace zeroshard::sim
