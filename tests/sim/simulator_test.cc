// zs_simulate's engine (sim/simulator.h) and the planner (sim/planner.h):
// the figures the checks read, the model state and the bytes each strategy
// moves against the ZeRO paper's closed forms, exactly, and the planner's
// answers against the simulations they come from. And the virtual
// communicator's AllToAll under a profile.
//
// Exactness: bytes are integers summed in double far below 2^53, so the
// closed forms hold to the last bit; FULL_SHARD's all-gathers are
// (2 Psi - root) elements (the root unit stays gathered between forward and
// backward, FSDP's rule) and its reduce-scatters Psi, where Psi counts the
// padded flat parameters (a multiple of the group per unit).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "zeroshard/collectives/virtual_communicator.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/runtime/virtual_device.h"
#include "zeroshard/sim/cost_model.h"
#include "zeroshard/sim/planner.h"
#include "zeroshard/sim/profile.h"
#include "zeroshard/sim/simulator.h"
#include "zeroshard/tests/sim/small_gpt.h"

namespace zeroshard::sim {
namespace {

// A small GPT: 4 units of Blocks plus the root (embeddings, head).
SimulateOptions Small(ShardingStrategy strategy, int world) { return testing::SmallGpt(strategy, world); }

// Psi (padded) and the root unit's padded size, as ShardedModel lays them out
// for `world` (each unit padded to a multiple of the group).
struct Flats {
  double psi = 0, root = 0;
};

// The GPT's units: 4 Blocks of 12 C^2 + 13 C parameters (attention qkv and
// projection, MLP, two LayerNorms, biases) and the root (token and position
// embeddings, final LayerNorm; the head is tied to the token embedding).
Flats GptFlats(int world) {
  const int64_t C = 64, V = 512, T = 64;
  auto pad = [world](int64_t n) { return static_cast<double>((n + world - 1) / world * world); };
  const int64_t block = 12 * C * C + 13 * C;
  const int64_t root = V * C + T * C + 2 * C;
  return {.psi = 4 * pad(block) + pad(root), .root = pad(root)};
}

TEST(Simulator, PrintsTheFiguresTheChecksRead) {
  absl::StatusOr<SimResult> r = Simulate(Small(ShardingStrategy::kFullShard, 8));
  ASSERT_TRUE(r.ok()) << r.status();
  const nlohmann::json j = nlohmann::json::parse(r->ToJson());
  for (const char* key : {"step_time_s", "tokens_per_s_per_device", "mfu", "exposed_comm_fraction",
                          "peak_bytes_per_rank", "breakdown", "memory", "comm_bytes_per_step"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LE(j["mfu"].get<double>(), 1);
  EXPECT_GE(j["exposed_comm_fraction"].get<double>(), 0);
  EXPECT_LE(j["exposed_comm_fraction"].get<double>(), 1);
  // The breakdown partitions the step: compute, copies not under compute,
  // host kernels (none here: no offload), exposed communication and idle add
  // up to it (each a union of intervals).
  // Bound, from how the parts reach this test: each is computed in double
  // from at most a few thousand interval lengths below the step (rounding
  // under 1e-12 of the step in all), then printed with %.9g, which rounds each
  // part to within 5e-9 of itself. The parts add up to the step, so their
  // printing errors add up to at most 5e-9 of it: 6e-9 covers both.
  const auto& b = j["breakdown"];
  EXPECT_NEAR(b["compute_s"].get<double>() + b["copy_s"].get<double>() + b["exposed_comm_s"].get<double>() +
                  b["host_s"].get<double>() + b["idle_s"].get<double>(),
              r->step_time_s, 6e-9 * r->step_time_s);
  EXPECT_EQ(b["host_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(r->tokens_per_s_per_device, 2.0 * 64 / r->step_time_s);
  // Per unit: every unit (4 Blocks and the root) ran forward and backward.
  ASSERT_EQ(r->units.size(), 5u);
  for (const UnitTime& u : r->units) {
    EXPECT_GT(u.forward_s, 0) << u.name;
    EXPECT_GT(u.backward_s, 0) << u.name;
    EXPECT_LE(u.forward_s + u.backward_s, r->step_time_s) << u.name;
  }
  EXPECT_EQ(j["units"].size(), 5u);
}

TEST(Simulator, ModelStateIsTheZeroPapersSixteenBytesPerParameterOverN) {
  // Mixed-precision Adam under FULL_SHARD: ZeRO's (2 + 2 + 12) Psi / N. Here
  // the 16 bytes are an f32 master shard (4), an f32 gradient shard (4) and
  // Adam's two f32 moments (8); the bf16 parameters exist only gathered.
  for (int world : {1, 4, 64}) {
    absl::StatusOr<SimResult> r = Simulate(Small(ShardingStrategy::kFullShard, world));
    ASSERT_TRUE(r.ok()) << r.status();
    const double per_rank = GptFlats(world).psi / world;
    EXPECT_EQ(r->memory.parameters, 4 * per_rank) << world;
    EXPECT_EQ(r->memory.optimizer_state, 8 * per_rank) << world;
    EXPECT_EQ(r->memory.gradients, 4 * per_rank) << world;
  }
  // keep_low_precision_grads: the gradient shard stays bf16, 2 bytes.
  SimulateOptions o = Small(ShardingStrategy::kFullShard, 8);
  o.job.sharding.mixed_precision.reduce_dtype = DType::kBF16;
  o.job.sharding.mixed_precision.keep_low_precision_grads = true;
  absl::StatusOr<SimResult> r = Simulate(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->memory.gradients, 2 * GptFlats(8).psi / 8);
}

TEST(Simulator, EachStrategyMovesItsClosedFormBytes) {
  constexpr int kWorld = 8;
  const Flats f = GptFlats(kWorld);
  const double ring = (kWorld - 1.0) / kWorld;
  struct Case {
    ShardingStrategy strategy;
    double bytes;
  };
  // bf16 gathers (2 bytes), f32 reductions (4 bytes).
  for (const Case& c : {
           // forward and backward gathers, one reduce-scatter
           Case{ShardingStrategy::kFullShard, ring * (2 * (2 * f.psi - f.root) + 4 * f.psi)},
           // one gather per step (kept through backward), one reduce-scatter
           Case{ShardingStrategy::kShardGradOp, ring * (2 * f.psi + 4 * f.psi)},
           // DDP: one all-reduce of the gradients, 2 (n-1)/n of the buffer
           Case{ShardingStrategy::kNoShard, 2 * ring * 4 * f.psi},
       }) {
    absl::StatusOr<SimResult> r = Simulate(Small(c.strategy, kWorld));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_DOUBLE_EQ(r->comm_bytes_per_step, c.bytes) << ShardingStrategyName(c.strategy);
  }
}

TEST(Simulator, OneRankMovesNothingAndStragglersAndJitterSlowTheStep) {
  absl::StatusOr<SimResult> one = Simulate(Small(ShardingStrategy::kFullShard, 1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->comm_bytes_per_step, 0);
  SimulateOptions o = Small(ShardingStrategy::kFullShard, 8);
  absl::StatusOr<SimResult> fast = Simulate(o);
  o.straggler_seconds = 1e-3;
  absl::StatusOr<SimResult> slow = Simulate(o);
  ASSERT_TRUE(fast.ok() && slow.ok());
  // Every collective waits 1 ms for the slow peer; the step has many.
  EXPECT_GT(slow->step_time_s, fast->step_time_s + 1e-3);
  // That wait is a "peers" span before each transfer: idle where nothing
  // else runs (peer_wait_s), not communication; the transfers are the same.
  EXPECT_EQ(fast->peer_wait_s, 0);
  EXPECT_GT(slow->peer_wait_s, 1e-3);
  EXPECT_LE(slow->peer_wait_s, slow->idle_s);
  // The same transfers at later times: each span's length is its end minus
  // its start, exact to an ulp of the clock (~1e-16 s below 1 s); a few
  // hundred spans stay far below 1e-9 of the total.
  EXPECT_NEAR(slow->comm_s, fast->comm_s, 1e-9 * fast->comm_s);
  // Jitter: slower than none, and the same draws (seeded) give the same step.
  o.straggler_seconds = 0;
  o.jitter_seconds = 1e-3;
  absl::StatusOr<SimResult> jitter = Simulate(o), again = Simulate(o);
  ASSERT_TRUE(jitter.ok() && again.ok());
  EXPECT_GT(jitter->step_time_s, fast->step_time_s);
  EXPECT_EQ(jitter->step_time_s, again->step_time_s);
}

// HYBRID_SHARD's default (hybrid_shard_size 0) is a shard group per node:
// the profile's 8 GPUs per node at world 16, the same step as the explicit 8.
TEST(Simulator, HybridShardDefaultsToAGroupPerNode) {
  SimulateOptions o = Small(ShardingStrategy::kHybridShard, 16);
  ASSERT_EQ(o.profile.gpus_per_node, 8);
  absl::StatusOr<SimResult> per_node = Simulate(o);
  o.job.sharding.hybrid_shard_size = 8;
  absl::StatusOr<SimResult> eight = Simulate(o);
  ASSERT_TRUE(per_node.ok() && eight.ok()) << per_node.status() << eight.status();
  EXPECT_NE(per_node->config.find("HYBRID_SHARD (groups of 8)"), std::string::npos) << per_node->config;
  EXPECT_EQ(per_node->step_time_s, eight->step_time_s);
  EXPECT_EQ(per_node->comm_bytes_per_step, eight->comm_bytes_per_step);
}

TEST(Simulator, RefusesWhatItCannotRun) {
  SimulateOptions o = Small(ShardingStrategy::kHybridShard, 8);
  o.job.sharding.hybrid_shard_size = 3;  // does not divide 8
  EXPECT_FALSE(Simulate(o).ok());
  o = Small(ShardingStrategy::kFullShard, 8);
  o.job.sharding.offload.params = true;  // without the optimizer: a GPU job fails at its first step
  EXPECT_EQ(Simulate(o).status().code(), absl::StatusCode::kFailedPrecondition);
  TrainOptions job;
  const absl::Status s = ApplyModelPreset("llama-9b", 0, &job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("llama-8b"), std::string::npos) << s;
}

// The virtual communicator's AllToAll under the profile: the cost model's
// all-to-all time on its stream, (n-1)/n of the input on the wire in its
// totals and in bytes_sent() (Note [Bytes sent]), and the base class's
// refusal of an in-place call.
TEST(VirtualCommunicator, AllToAllTakesTheProfilesAllToAllTime) {
  absl::StatusOr<HardwareProfile> profile = LoadProfile("h100_dgx");
  ASSERT_TRUE(profile.ok()) << profile.status();
  ProfileCost cost(*profile);
  auto device = VirtualDevice::Create(901, {.cost = &cost});
  ASSERT_TRUE(device.ok()) << device.status();
  const int n = 64;
  auto comm = VirtualCommunicator::Create(5, n, (*device)->device(),
                                          {.network = &cost, .gpus_per_node = 8});
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int64_t m = 1 << 20;  // int8 elements per block: 64 MiB in all
  auto in = Tensor::Empty({n * m}, DType::kI8, (*device)->allocator());
  auto out = Tensor::Empty({n * m}, DType::kI8, (*device)->allocator());
  ASSERT_TRUE(in.ok() && out.ok());
  ASSERT_TRUE((*comm)->AllToAll(*in, *out).ok());
  const int64_t bytes = n * m;
  const double want_s = CollectiveSeconds(*profile, CollectiveKind::kAllToAll, bytes, {n, 8});
  const VirtualCommTotals& t = (*comm)->totals();
  const int k = static_cast<int>(CollectiveOp::kAllToAll);
  EXPECT_EQ(t.count[k], 1);
  EXPECT_EQ(t.seconds[k], want_s);
  EXPECT_EQ(t.bytes_sent[k], 63.0 * m);  // 63 of the 64 blocks leave the rank
  EXPECT_EQ((*comm)->bytes_sent(), 63 * m);
  // Blocking: the host waited for the collective's end on the comm stream.
  EXPECT_GE((*device)->host_time(), want_s);
  EXPECT_EQ((*device)->stream_time((*comm)->stream()), (*device)->host_time());
  const absl::Status in_place = (*comm)->AllToAll(*in, *in);
  EXPECT_EQ(in_place.code(), absl::StatusCode::kInvalidArgument) << in_place;
  EXPECT_EQ(t.count[k], 1);
}

// Note [Waking on shared cores]: with wake_seconds W, a wait after compute
// ends W after the later of the collective's end and the wait, even when the
// collective ended long before (it did not progress while the rank computed);
// a wait right after another (no compute between) on a collective that has
// ended costs nothing; a blocking one pays W again. The wake is a "wake" span
// on the communicator's stream. Without W the waits end with the collective.
// Tolerance: sums of a few clock values below 1 s, each rounded to an ulp
// (~1e-16 s): 1e-12 s is far above that and far below W.
TEST(VirtualCommunicator, WaitsAfterComputeWakeOnSharedCores) {
  absl::StatusOr<HardwareProfile> profile = LoadProfile("h100_dgx");
  ASSERT_TRUE(profile.ok()) << profile.status();
  ProfileCost cost(*profile);
  constexpr double kW = 1e-3, kCompute = 5e-3, kTol = 1e-12;
  for (double wake : {0.0, kW}) {
    SCOPED_TRACE(wake > 0 ? "wake 1 ms" : "no wake");
    auto device = VirtualDevice::Create(wake > 0 ? 903 : 902, {.cost = &cost});
    ASSERT_TRUE(device.ok()) << device.status();
    VirtualDevice& d = **device;
    auto comm = VirtualCommunicator::Create(0, 4, d.device(),
                                            {.network = &cost, .gpus_per_node = 8, .wake_seconds = wake});
    ASSERT_TRUE(comm.ok()) << comm.status();
    auto shard = Tensor::Empty({1024}, DType::kBF16, d.allocator());
    auto full = Tensor::Empty({4096}, DType::kBF16, d.allocator());
    ASSERT_TRUE(shard.ok() && full.ok());
    const double t_gather = CollectiveSeconds(*profile, CollectiveKind::kAllGather, 8192, {4, 4});
    ASSERT_LT(t_gather, kCompute);
    // Issued, then 5 ms of compute, then waited: it ended long before.
    auto w1 = (*comm)->AllGatherAsync(*shard, *full);
    ASSERT_TRUE(w1.ok()) << w1.status();
    d.HostAdvance(kCompute);
    ASSERT_TRUE((*w1)->Wait().ok());
    EXPECT_NEAR(d.host_time(), kCompute + wake, kTol);
    // Two issued together, waited back to back after compute: the first wait
    // wakes, the second finds its collective ended and costs nothing more.
    auto w2 = (*comm)->AllGatherAsync(*shard, *full);
    auto w3 = (*comm)->AllGatherAsync(*shard, *full);
    ASSERT_TRUE(w2.ok() && w3.ok());
    d.HostAdvance(kCompute);
    const double before = d.host_time();
    ASSERT_TRUE((*w2)->Wait().ok());
    EXPECT_NEAR(d.host_time(), before + wake, kTol);
    const double after_first = d.host_time();
    ASSERT_TRUE((*w3)->Wait().ok());
    EXPECT_NEAR(d.host_time(), after_first, kTol);
    // Issued and waited at once: it blocks for its transfer, then wakes.
    auto w4 = (*comm)->AllGatherAsync(*shard, *full);
    ASSERT_TRUE(w4.ok());
    const double issue = d.host_time();
    ASSERT_TRUE((*w4)->Wait().ok());
    EXPECT_GE(d.host_time(), issue + t_gather + wake - kTol);
    int wakes = 0;
    for (const VirtualSpan& sp : d.spans()) {
      if (sp.name == "wake") {
        ++wakes;
        EXPECT_EQ(sp.category, "comm");
      }
    }
    EXPECT_EQ(wakes, wake > 0 ? 3 : 0);
  }
}

// A group of g ranks wakes in W (g - 1) / (wake_group_size - 1): measured at
// 4 ranks, a split group of 2 takes W / 3 (HYBRID_SHARD's shard groups).
TEST(VirtualCommunicator, SmallerGroupsWakeFaster) {
  absl::StatusOr<HardwareProfile> profile = LoadProfile("h100_dgx");
  ASSERT_TRUE(profile.ok()) << profile.status();
  ProfileCost cost(*profile);
  constexpr double kW = 3e-3, kCompute = 5e-3, kTol = 1e-12;  // as above
  auto device = VirtualDevice::Create(904, {.cost = &cost});
  ASSERT_TRUE(device.ok()) << device.status();
  VirtualDevice& d = **device;
  VirtualCommunicator::Options o{.network = &cost, .gpus_per_node = 8, .wake_seconds = kW, .wake_group_size = 4};
  o.splits = {{.size = 2, .stride = 1}};
  auto world = VirtualCommunicator::Create(0, 4, d.device(), o);
  ASSERT_TRUE(world.ok()) << world.status();
  auto pair = (*world)->Split(/*color=*/0, /*key=*/0);
  ASSERT_TRUE(pair.ok() && *pair != nullptr) << pair.status();
  auto shard = Tensor::Empty({1024}, DType::kBF16, d.allocator());
  auto full = Tensor::Empty({2048}, DType::kBF16, d.allocator());
  ASSERT_TRUE(shard.ok() && full.ok());
  auto w = (*pair)->AllGatherAsync(*shard, *full);
  ASSERT_TRUE(w.ok()) << w.status();
  d.HostAdvance(kCompute);
  const double before = d.host_time();
  ASSERT_TRUE((*w)->Wait().ok());
  EXPECT_NEAR(d.host_time(), before + kW / 3, kTol);
}

// The virtual device's attention and row ops take their own efficiencies
// (Note [Attention efficiency], Note [Per-op memory efficiency]): each span
// lasts exactly what the cost model gives its op's name, FLOPs and bytes at
// head dim 64 and the job's sequence length T 64; the same job on the profile
// without those keys charges attention at the GEMM curve (faster, at D 64) and
// the rest at the copy rate. A third profile gives D 64 two points, T 32 and T
// 128, so that the span says which length the simulator passed: the key length
// T 64 (half-way in log2 T: 0.25 of peak), not the causal rows (T + 1) / 2 = 32
// that ChargeAttention charges as the products' m (0.125).
// Tolerance: a span is [start, start + seconds) on a clock near `end`, so its
// length carries the rounding of that sum and of the subtraction, each at most
// one ulp of `end`: 4 eps end covers both with room.
TEST(Simulator, AttentionAndRowOpsTakeTheirOwnEfficiencies) {
  SimulateOptions o = Small(ShardingStrategy::kFullShard, 1);
  o.job.model.n_head = 1;  // head dimension 64, the profile's first point
  constexpr int64_t kT = 64;  // the small GPT's block_size: the simulated sequence length
  const HardwareProfile fitted = o.profile;
  HardwareProfile plain = fitted;
  ClearOpEfficiencies(plain);
  HardwareProfile by_length = fitted;
  by_length.attention_efficiency = {{.head_dim = 64, .seq_len = 32, .forward = 0.125, .backward = 0.125},
                                    {.head_dim = 64, .seq_len = 128, .forward = 0.375, .backward = 0.375}};
  for (const HardwareProfile* p : std::vector<const HardwareProfile*>{&fitted, &plain, &by_length}) {
    SCOPED_TRACE(p == &fitted ? "fitted" : p == &plain ? "without the per-op keys" : "D 64 by sequence length");
    o.profile = *p;
    absl::StatusOr<SimResult> r = Simulate(o);
    ASSERT_TRUE(r.ok()) << r.status();
    std::map<std::string, int> seen;
    for (const VirtualSpan& sp : r->spans) {
      const std::string name(sp.name.data(), sp.name.size());
      const OpKind kind = OpKindOf(name);
      if (kind == OpKind::kOther) continue;
      ++seen[name];
      const bool attention = kind == OpKind::kAttentionForward || kind == OpKind::kAttentionBackward;
      const bool backward = kind == OpKind::kAttentionBackward;
      const double want = attention ? AttentionSeconds(*p, sp.flops, 64, kT, backward, DType::kBF16, sp.bytes)
                                    : MemoryBoundSeconds(*p, sp.bytes, sp.flops, kind);
      const double tol = 4 * std::numeric_limits<double>::epsilon() * sp.end;
      EXPECT_NEAR(sp.end - sp.start, want, tol) << name;
      if (attention && p == &plain) {
        EXPECT_GT(AttentionSeconds(fitted, sp.flops, 64, kT, backward, DType::kBF16, sp.bytes), want) << name;
      }
      if (attention && p == &by_length) {
        // w = (log2 64 - log2 32) / (log2 128 - log2 32) = 1/2: 0.125 + (0.375 - 0.125) / 2 = 0.25.
        EXPECT_EQ(AttentionEfficiency(*p, 64, kT, backward), 0.25);
        // At the rows' length the figure would be 0.125: a span that long is off by
        // gemm F / (989e12 * 0.25), far above the tolerance.
        const double at_rows = AttentionSeconds(*p, sp.flops, 64, (kT + 1) / 2, backward, DType::kBF16, sp.bytes);
        EXPECT_GT(std::abs((sp.end - sp.start) - at_rows), 1000 * tol) << name;
      }
    }
    // Per step: each of the 4 blocks' attention, their 2 LayerNorms and the
    // final one, one cross-entropy; forward and backward. GELU has no op of its
    // own: it rides in the MLP's GEMMs (ops::GeluMlp, Note [GELU in the GEMM]).
    const std::map<std::string, int> want = {
        {"AttentionForward", 4},    {"AttentionBackward", 4},   {"LayerNormForward", 9},
        {"LayerNormBackward", 9},   {"CrossEntropyForward", 1}, {"CrossEntropyBackward", 1}};
    EXPECT_EQ(seen, want);
  }
}

TEST(Planner, ItsBestPlanIsTheFastestThatFitsAndItsConfigRunsIt) {
  PlanOptions p;
  p.base.train = Small(ShardingStrategy::kFullShard, 8).job;
  absl::StatusOr<HardwareProfile> profile = LoadProfile("h100_dgx");
  ASSERT_TRUE(profile.ok());
  p.profile = *profile;
  p.nodes = 1;
  p.global_batch = 32;
  p.seq_len = 64;
  p.refine = 2;
  absl::StatusOr<PlanResult> r = Plan(p);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->fitting.empty());
  for (size_t i = 1; i < r->fitting.size(); ++i) {
    EXPECT_LE(r->fitting[i - 1].result.step_time_s, r->fitting[i].result.step_time_s);
  }
  // The config of the best plan, read back as a job, simulates to the same step.
  const PlanCandidate& best = r->fitting[0];
  absl::StatusOr<RunConfig> c = ConfigFromText(best.config_json, {});
  ASSERT_TRUE(c.ok()) << c.status();
  SimulateOptions o;
  o.job = c->train;
  o.profile = *profile;
  o.world = c->world_size;
  o.seq_len = 64;
  absl::StatusOr<SimResult> again = Simulate(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step_time_s, best.result.step_time_s);
  EXPECT_EQ(again->peak_bytes_per_rank, best.result.peak_bytes_per_rank);
  // A cap below every plan's peak: nothing fits, and the answer says by how much.
  p.memory_cap_bytes = 1024;
  absl::StatusOr<PlanResult> none = Plan(p);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->fitting.empty());
  EXPECT_GT(none->smallest_peak_bytes, 1024);
}

}  // namespace
}  // namespace zeroshard::sim
