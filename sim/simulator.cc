#include "zeroshard/sim/simulator.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/nvme/swap_space.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/train/config_flags.h"
#include "zeroshard/train/train_step.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::sim {

double UnionLength(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, cur_start = 0, cur_end = -1;
  for (const auto& [s, e] : v) {
    if (e <= s) continue;
    if (s > cur_end) {
      if (cur_end > cur_start) total += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (cur_end > cur_start) total += cur_end - cur_start;
  return total;
}

double UncoveredLength(const std::vector<std::pair<double, double>>& a, const std::vector<std::pair<double, double>>& b) {
  std::vector<std::pair<double, double>> both = a;
  both.insert(both.end(), b.begin(), b.end());
  return UnionLength(both) - UnionLength(b);
}

namespace {

CollectiveKind KindOf(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllGather: return CollectiveKind::kAllGather;
    case CollectiveOp::kReduceScatter: return CollectiveKind::kReduceScatter;
    case CollectiveOp::kAllReduce: return CollectiveKind::kAllReduce;
    case CollectiveOp::kBroadcast: return CollectiveKind::kBroadcast;
    case CollectiveOp::kAllToAll: return CollectiveKind::kAllToAll;
    default: return CollectiveKind::kBarrier;
  }
}

GroupShape ShapeOf(const VirtualGroup& g) { return GroupShape{.size = g.size, .ranks_per_node = g.ranks_per_node}; }

// Every communicator of the model's (world, shard group, replica group): bytes sent so far.
double CommBytes(ShardedModel& model) {
  double bytes = 0;
  for (Communicator* c : {&model.world(), &model.shard_group(), &model.replica_group()}) {
    if (auto* v = dynamic_cast<VirtualCommunicator*>(c)) bytes += v->totals().total_bytes_sent();
  }
  return bytes;
}

std::atomic<int> next_device_index{1000};

// Per-unit figures from the hooks' spans ("forward <unit>", "backward <unit>",
// "wait ... <unit>"; unit names have no spaces).
std::vector<UnitTime> UnitTimes(const TraceRecorder& trace, ShardedModel& model) {
  std::vector<UnitTime> units;
  absl::flat_hash_map<std::string, size_t> index;
  for (ShardedUnit* u : model.units()) {
    index[u->name] = units.size();
    units.push_back(UnitTime{.name = u->name});
  }
  for (const TraceRecorder::Span& s : trace.spans()) {
    const size_t space = s.name.rfind(' ');
    if (space == std::string::npos) continue;
    auto it = index.find(s.name.substr(space + 1));
    if (it == index.end()) continue;
    UnitTime& u = units[it->second];
    const double seconds = 1e-6 * s.dur_us;
    if (s.category == "wait") {
      u.exposed_s += seconds;
    } else if (absl::StartsWith(s.name, "forward ")) {
      u.forward_s += seconds;
    } else if (absl::StartsWith(s.name, "backward ")) {
      u.backward_s += seconds;
    }
  }
  // The root's hooks enclose every other unit's: keep its own share (the
  // other units' waits inside its windows stay in it).
  for (ShardedUnit* u : model.units()) {
    if (!u->is_root) continue;
    UnitTime& root = units[index[u->name]];
    for (const UnitTime& other : units) {
      if (&other == &root) continue;
      root.forward_s -= other.forward_s;
      root.backward_s -= other.backward_s;
    }
    root.forward_s = std::max(0.0, root.forward_s);
    root.backward_s = std::max(0.0, root.backward_s);
  }
  return units;
}

}  // namespace

// ================================================================ ProfileCost

double ProfileCost::OpSeconds(const OpCost& c) const {
  const OpKind kind = OpKindOf(std::string_view(c.op.data(), c.op.size()));
  if (kind == OpKind::kAttentionForward || kind == OpKind::kAttentionBackward) {
    // kernels/attention.cc's ChargeAttention: batch x heads x products of [rows, D] x [D, T],
    // so gemm_k is the head dimension and gemm_n the key length T (gemm_m, the
    // rows, is halved by the causal mask): Note [Attention efficiency].
    return AttentionSeconds(profile_, GemmFlops(c.gemm_batch, c.gemm_m, c.gemm_n, c.gemm_k), c.gemm_k, c.gemm_n,
                            kind == OpKind::kAttentionBackward, c.dtype, c.bytes);
  }
  if (c.gemm_batch > 0) {
    return GemmSeconds(profile_, c.gemm_batch, c.gemm_m, c.gemm_n, c.gemm_k, c.dtype, c.bytes, c.tf32);
  }
  return MemoryBoundSeconds(profile_, c.bytes, c.flops, kind);
}

double ProfileCost::HostCopySeconds(int64_t bytes) const { return sim::HostCopySeconds(profile_, bytes); }

double ProfileCost::HostOpSeconds(const OpCost& c) const { return sim::HostAdamSeconds(profile_, c.bytes); }
double ProfileCost::NvmeSeconds(bool write, int64_t bytes) const { return sim::NvmeSeconds(profile_, write, bytes); }

double ProfileCost::CollectiveSeconds(CollectiveOp op, int64_t bytes, const VirtualGroup& group) const {
  return sim::CollectiveSeconds(profile_, KindOf(op), bytes, ShapeOf(group));
}

double ProfileCost::BytesSent(CollectiveOp op, int64_t bytes, const VirtualGroup& group) const {
  return CollectiveBytesSent(KindOf(op), bytes, group.size);
}

// ================================================================ models

namespace {

// Llama 3.1's config.json: 128256 tokens, rope_theta 500000, rms_norm_eps 1e-5.
void Llama3(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, int64_t kv_heads, TrainOptions* job) {
  job->model_type = "llama";
  job->model.vocab_size = 128256;
  job->model.n_embd = hidden;
  job->model.n_layer = layers;
  job->model.n_head = heads;
  job->model.bias = false;
  job->llama.num_key_value_heads = kv_heads;
  job->llama.intermediate_size = intermediate;
  job->llama.max_position_embeddings = 131072;
  job->llama.rms_norm_eps = 1e-5;
  job->llama.rope_theta = 500000.0;
}

void Gpt2(int64_t layers, int64_t heads, int64_t embd, TrainOptions* job) {
  job->model_type = "gpt";
  const bool checkpointing = job->model.activation_checkpointing;
  job->model = nn::GptConfig{.vocab_size = 50257, .block_size = 1024, .n_layer = layers, .n_head = heads,
                             .n_embd = embd, .activation_checkpointing = checkpointing};
}

}  // namespace

std::vector<std::string> ModelPresetNames() {
  return {"gpt2-124m", "gpt2-1.5b", "llama-8b", "llama-70b", "llama-405b"};
}

absl::Status ApplyModelPreset(const std::string& name, int64_t seq_len, TrainOptions* job) {
  if (name == "gpt2-124m") {  // GPT-2 (Radford et al. 2019): 50257 tokens, 1024 positions
    Gpt2(12, 12, 768, job);
  } else if (name == "gpt2-1.5b") {
    Gpt2(48, 25, 1600, job);
  } else if (name == "llama-8b") {
    Llama3(4096, 14336, 32, 32, 8, job);
  } else if (name == "llama-70b") {
    Llama3(8192, 28672, 80, 64, 8, job);
  } else if (name == "llama-405b") {
    Llama3(16384, 53248, 126, 128, 8, job);
  } else if (absl::EndsWith(name, ".json")) {
    std::ifstream in(name);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("--model: cannot read \"", name, "\" (expected a Hugging Face config.json)"));
    }
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<nn::LlamaConfig> c = nn::LlamaConfig::FromHfJson(text);
    if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat(name, ": ", c.status().message()));
    const bool checkpointing = job->model.activation_checkpointing;
    job->model_type = "llama";
    job->llama = *c;
    job->model.vocab_size = c->vocab_size;
    job->model.n_embd = c->hidden_size;
    job->model.n_layer = c->num_hidden_layers;
    job->model.n_head = c->num_attention_heads;
    job->model.activation_checkpointing = checkpointing;
  } else {
    std::string names;
    for (const std::string& n : ModelPresetNames()) absl::StrAppend(&names, names.empty() ? "" : ", ", n);
    return absl::InvalidArgumentError(
        absl::StrCat("--model: unknown model \"", name, "\"; expected one of ", names, " or a config.json path"));
  }
  if (job->model_type == "llama" && seq_len > 0) job->model.block_size = seq_len;
  // The job's default unit follows the model, as the config reader sets it
  // for model.type (so a config written from this job reads back).
  const std::set<std::string> gpt_layer = {"Block"}, llama_layer = {"LlamaDecoderLayer"};
  if (job->sharding.wrap.kind == WrapPolicy::Kind::kByType &&
      (job->sharding.wrap.types == gpt_layer || job->sharding.wrap.types == llama_layer)) {
    job->sharding.wrap = WrapPolicy::ByType(job->model_type == "llama" ? llama_layer : gpt_layer);
  }
  return absl::OkStatus();
}

absl::StatusOr<SimCommandLine> ReadSimCommandLine(int argc, char** argv,
                                                  const std::function<std::string()>& config_path,
                                                  const std::function<int64_t()>& seq_len_flag) {
  const std::vector<std::string> models = TakeFlagValues(&argc, argv, "model");
  SimCommandLine c;
  ZS_ASSIGN_OR_RETURN(c.config, ConfigFromCommandLine(argc, argv, config_path, {"distributed.backend=mpi"}));
  TrainOptions& job = c.config.train;
  c.seq_len = seq_len_flag();
  if (models.empty()) {
    c.model_name = absl::StrCat(job.model_type, " (", c.config.source, ")");
    if (c.seq_len == 0) c.seq_len = job.model.block_size;
    return c;
  }
  ZS_RETURN_IF_ERROR(ApplyModelPreset(models.back(), c.seq_len, &job));
  if (c.seq_len == 0) {  // a GPT-2's context, or 2048 for a Llama
    c.seq_len = job.model_type == "gpt" ? job.model.block_size : 2048;
    if (job.model_type == "llama") job.model.block_size = c.seq_len;
  }
  c.model_name = models.back();
  return c;
}

// ================================================================ Simulate

namespace {

// What the simulator runs of OffloadPolicy (Note [Virtual host]; NVMe
// offload: Note [Virtual NVMe] in runtime/nvme/virtual_swap_store.h, the
// swap spaces on the virtual host's simulated drives).
absl::Status CheckOffload(const OffloadPolicy& off) {
  if ((off.params || off.grads) && !off.optimizer_on_host()) {
    // The optimizer steps a unit's master shard, gradient shard and state in
    // one memory: AdamWStep refuses a host shard beside device state (or the
    // reverse), so a GPU job with this policy fails at its first step.
    return absl::FailedPreconditionError(absl::StrCat(
        "CPU offload of ",
        off.params && off.grads ? "the master shards and gradients"
        : off.params            ? "the master shards"
                                : "the gradients",
        " without the optimizer: on a GPU the optimizer step needs the master shard, the gradient shard and "
        "Adam's state in one memory (AdamWStep refuses a host buffer beside device ones), so the job would fail "
        "at its first step; expected strategy.cpu_offload true or with \"optimizer\": true (--offload=optimizer "
        "or params_and_optimizer), or off, found ",
        off.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const SimulateOptions& o) {
  ProfileCost cost(o.profile);
  const int gpus_per_node = o.gpus_per_node > 0 ? o.gpus_per_node : o.profile.gpus_per_node;
  if (o.world < 1) return absl::InvalidArgumentError(absl::StrCat("world: expected >= 1, found ", o.world));
  const int64_t seq_len = o.seq_len > 0 ? o.seq_len : o.job.model.block_size;
  const int64_t micro = o.job.batch_size;
  if (micro < 1 || seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro-batch ", micro, " x sequence ", seq_len, ": expected both >= 1"));
  }

  VirtualDevice::Options dev_options{.cost = &cost, .record_spans = true,  // the breakdown needs them
                                     .synchronous = o.profile.synchronous};
  dev_options.allocator = AllocatorOptions(o.profile);
  const int index = next_device_index.fetch_add(2);
  dev_options.host_index = index + 1;  // CPU offload's host memory (Note [Virtual host])
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<VirtualDevice> device, VirtualDevice::Create(index, dev_options));
  Allocator* memory = device->allocator();
  Allocator* host_memory = device->host_allocator();

  ZS_ASSIGN_OR_RETURN(std::shared_ptr<nn::CausalLm> model, MakeJobModel(o.job, /*rank=*/0));
  ShardingOptions sharding = JobShardingOptions(o.job, *model);
  if (sharding.strategy == ShardingStrategy::kHybridShard && sharding.hybrid_shard_size == 0) {
    // A shard group per node (Note [Hybrid shard groups]): the virtual peers
    // cannot be asked their node, so the profile's GPUs per node say it.
    sharding.hybrid_shard_size = std::min(gpus_per_node, o.world);
  }
  ZS_RETURN_IF_ERROR(CheckOffload(sharding.offload));
  ZS_RETURN_IF_ERROR(sharding.Validate(o.world));
  const int s = sharding.ShardGroupSize(o.world);

  VirtualCommunicator::Options comm_options{.network = &cost,
                                            .gpus_per_node = gpus_per_node,
                                            .straggler_seconds = o.straggler_seconds,
                                            .jitter_seconds = o.jitter_seconds,
                                            .wake_seconds = o.wake_seconds,
                                            .wake_group_size = o.wake_group_size};
  comm_options.common.timeout = absl::InfiniteDuration();
  comm_options.splits = {{.size = s, .stride = 1}, {.size = o.world / s, .stride = s}};
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<VirtualCommunicator> world,
                      VirtualCommunicator::Create(0, o.world, device->device(), comm_options));
  // The step's host-side numbers (the mean loss) go through a host group, as on GPUs.
  ZS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Communicator>> host, LocalCommunicator::CreateGroup(1));

  SimResult r;
  r.world = o.world;
  r.gpus_per_node = gpus_per_node;
  r.profile = o.profile.name;
  r.model = o.model_name.empty() ? o.job.model_type : o.model_name;
  r.parameters = model->NumParameters();
  {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> sharded,
                        ShardedModel::Create(model, *world, sharding, memory, host_memory));
    r.config = sharding.ToString();
    ZS_ASSIGN_OR_RETURN(TrainStep step, TrainStep::Create(*sharded, JobStepOptions(o.job), host[0].get()));

    ZS_ASSIGN_OR_RETURN(Tensor host_ids, Tensor::Zeros({micro, seq_len}, DType::kI64));
    const TrainStep::Forward forward = [&](int64_t) -> absl::StatusOr<autograd::Variable> {
      // The batch goes to the device each micro-step, as the job's does.
      ZS_ASSIGN_OR_RETURN(Tensor ids, host_ids.To(memory));
      ZS_ASSIGN_OR_RETURN(Tensor targets, host_ids.To(memory));
      ZS_ASSIGN_OR_RETURN(nn::LmOutput out, model->Forward(ids, targets));
      return out.loss;
    };
    ZS_RETURN_IF_ERROR(step.Run(forward).status());  // warm-up (Note [What one simulated step is])
    const int64_t state = memory->stats().bytes_in_use;
    const int64_t host_state = host_memory->stats().bytes_in_use;
    int64_t shard_elements = 0;
    for (ShardedUnit* u : sharded->units()) shard_elements += u->flat.shard_numel();
    const OffloadPolicy& off = sharding.offload;
    // Master shards and Adam's moments are f32 shards; the gradient shards and
    // buffers are what else the rank holds between steps, on the device or
    // (offloaded) on the host.
    r.memory.optimizer_state = off.optimizer_on_host() ? 0 : 2 * 4 * shard_elements;
    r.memory.parameters = off.params_on_host() ? 0 : 4 * shard_elements;
    r.memory.gradients = std::max<int64_t>(0, state - r.memory.parameters - r.memory.optimizer_state);
    // NVMe offload: what the swap files hold stays out of host memory, which
    // holds the swap buffers instead.
    int64_t swapped_param_elements = 0;
    for (ShardedUnit* u : sharded->units()) {
      if (u->swap_region >= 0) swapped_param_elements += u->flat.shard_numel();
    }
    for (SwapSpace* space : {sharded->param_swap(), step.optim().optimizer().swap()}) {
      if (space == nullptr) continue;
      r.nvme_bytes_per_rank += space->file().file_bytes();
      r.host_memory.swap_buffers += space->host_bytes();
    }
    r.host_memory.optimizer_state = off.optimizer ? 2 * 4 * shard_elements : 0;
    r.host_memory.parameters = off.params_on_host() ? 4 * (shard_elements - swapped_param_elements) : 0;
    r.host_memory.gradients =
        std::max<int64_t>(0, host_state - r.host_memory.parameters - r.host_memory.optimizer_state -
                                 r.host_memory.swap_buffers);

    device->Settle();
    device->ResetPeakMemory();
    const double t0 = device->Now();
    const double bytes0 = CommBytes(*sharded);
    TraceRecorder unit_spans;
    unit_spans.set_clock([&device] { return 1e6 * device->stream_time(VirtualDevice::kCompute); });
    sharded->set_trace(&unit_spans);
    ZS_RETURN_IF_ERROR(step.Run(forward).status());
    sharded->set_trace(nullptr);
    r.step_time_s = device->Now() - t0;
    r.units = UnitTimes(unit_spans, *sharded);
    r.comm_bytes_per_step = CommBytes(*sharded) - bytes0;

    const CachingAllocatorStats mem = device->memory();
    r.memory.peak_allocated = memory->stats().peak_bytes_in_use;
    r.memory.peak_reserved = o.profile.alloc_caching ? mem.peak_reserved_bytes : r.memory.peak_allocated;
    r.memory.activations = std::max<int64_t>(0, r.memory.peak_allocated - state);
    r.memory.fragmentation = std::max<int64_t>(0, r.memory.peak_reserved - r.memory.peak_allocated);
    r.peak_bytes_per_rank = r.memory.peak_reserved;
    r.memory_capacity_bytes = o.profile.memory_bytes;
    r.fits = r.peak_bytes_per_rank <= r.memory_capacity_bytes;
    r.host_memory.peak = host_memory->stats().peak_bytes_in_use;
    r.host_memory.staging = std::max<int64_t>(0, r.host_memory.peak - host_state);
    r.host_bytes_per_rank = r.host_memory.peak;

    r.tokens_per_step = micro * seq_len * o.job.grad_accum_steps;
    r.model_flops_per_step = model->TrainFlopsPerToken(seq_len) * static_cast<double>(r.tokens_per_step);
  }

  // The timeline of the measured step.
  const std::vector<VirtualSpan> spans = device->spans();
  std::vector<std::pair<double, double>> compute, copy, comm, host_work, nvme, peers;
  for (const VirtualSpan& sp : spans) {
    if (sp.category == "peers") {
      peers.emplace_back(sp.start, sp.end);
    } else if (sp.category == "nvme") {
      nvme.emplace_back(sp.start, sp.end);
      (sp.name == "NvmeWrite" ? r.nvme_write_bytes : r.nvme_read_bytes) += sp.bytes;
    } else if (sp.category == "comm") {
      comm.emplace_back(sp.start, sp.end);
    } else if (sp.category == "copy") {
      copy.emplace_back(sp.start, sp.end);
      r.host_copy_s += sp.end - sp.start;
      r.host_copy_bytes += sp.bytes;
    } else if (sp.category == "host") {
      host_work.emplace_back(sp.start, sp.end);
      if (sp.name == "AdamWStep") r.host_optimizer_s += sp.end - sp.start;
    } else {
      compute.emplace_back(sp.start, sp.end);
    }
  }
  std::vector<std::pair<double, double>> busy = compute;
  busy.insert(busy.end(), copy.begin(), copy.end());
  r.compute_s = UnionLength(compute);
  r.copy_s = UncoveredLength(copy, compute);
  r.comm_s = UnionLength(comm);
  // A host kernel (CPU offload) the device neither computes nor copies under;
  // a collective that runs beside one is hidden behind it, as behind compute.
  r.host_s = UncoveredLength(host_work, busy);
  std::vector<std::pair<double, double>> busy_or_host = busy;
  busy_or_host.insert(busy_or_host.end(), host_work.begin(), host_work.end());
  r.exposed_comm_s = UncoveredLength(comm, busy_or_host);
  // NVMe transfers (Note [Virtual NVMe]) with nothing else running: the host
  // waiting for a read, or the step's last writes.
  r.nvme_s = UnionLength(nvme);
  busy_or_host.insert(busy_or_host.end(), comm.begin(), comm.end());
  r.exposed_nvme_s = UncoveredLength(nvme, busy_or_host);
  // A collective waiting for late peers (--straggler_ms, --jitter_ms) with
  // nothing else running: idle, as tools/trace_summary counts a traced job's.
  busy_or_host.insert(busy_or_host.end(), nvme.begin(), nvme.end());
  r.peer_wait_s = UncoveredLength(peers, busy_or_host);
  r.idle_s = std::max(0.0, r.step_time_s - UnionLength(busy) - r.host_s - r.exposed_comm_s - r.exposed_nvme_s);
  r.exposed_comm_fraction = r.step_time_s > 0 ? r.exposed_comm_s / r.step_time_s : 0;
  r.tokens_per_s_per_device = r.step_time_s > 0 ? static_cast<double>(r.tokens_per_step) / r.step_time_s : 0;
  const double peak = PeakFlops(o.profile, sharding.mixed_precision.param_dtype);
  r.mfu = r.step_time_s > 0 && peak > 0 ? r.model_flops_per_step / (r.step_time_s * peak) : 0;
  if (o.record_spans) r.spans = spans;
  for (int i = 0; i < device->num_streams(); ++i) r.streams.push_back(device->stream_name(i));
  return r;
}

// ================================================================ output

std::string SimResult::ToJson() const {
  std::string j = "{";
  absl::StrAppendFormat(&j, "\"model\": \"%s\", \"profile\": \"%s\", \"world\": %d, \"gpus_per_node\": %d, ", model,
                        profile, world, gpus_per_node);
  absl::StrAppendFormat(&j, "\"parameters\": %d, \"tokens_per_step_per_device\": %d, ", parameters, tokens_per_step);
  absl::StrAppendFormat(&j,
                        "\"step_time_s\": %.9g, \"tokens_per_s_per_device\": %.9g, \"mfu\": %.6g, "
                        "\"exposed_comm_fraction\": %.6g, \"peak_bytes_per_rank\": %d, \"comm_bytes_per_step\": %.9g, "
                        "\"memory_capacity_bytes\": %d, \"fits\": %s, ",
                        step_time_s, tokens_per_s_per_device, mfu, exposed_comm_fraction, peak_bytes_per_rank,
                        comm_bytes_per_step, memory_capacity_bytes, fits ? "true" : "false");
  absl::StrAppendFormat(&j,
                        "\"breakdown\": {\"compute_s\": %.9g, \"copy_s\": %.9g, \"comm_s\": %.9g, "
                        "\"exposed_comm_s\": %.9g, \"host_s\": %.9g, \"idle_s\": %.9g, \"host_copy_s\": %.9g, "
                        "\"host_copy_bytes\": %.9g, \"host_optimizer_s\": %.9g, \"nvme_s\": %.9g, "
                        "\"exposed_nvme_s\": %.9g, \"nvme_read_bytes\": %.9g, \"nvme_write_bytes\": %.9g, "
                        "\"peer_wait_s\": %.9g}, ",
                        compute_s, copy_s, comm_s, exposed_comm_s, host_s, idle_s, host_copy_s, host_copy_bytes,
                        host_optimizer_s, nvme_s, exposed_nvme_s, nvme_read_bytes, nvme_write_bytes, peer_wait_s);
  absl::StrAppendFormat(&j,
                        "\"memory\": {\"parameters\": %d, \"gradients\": %d, \"optimizer_state\": %d, "
                        "\"activations_and_gathered\": %d, \"fragmentation\": %d, \"peak_allocated\": %d, "
                        "\"peak_reserved\": %d}, ",
                        memory.parameters, memory.gradients, memory.optimizer_state, memory.activations,
                        memory.fragmentation, memory.peak_allocated, memory.peak_reserved);
  absl::StrAppendFormat(&j,
                        "\"host_bytes_per_rank\": %d, \"host_memory\": {\"parameters\": %d, \"gradients\": %d, "
                        "\"optimizer_state\": %d, \"swap_buffers\": %d, \"staging\": %d, \"peak\": %d}, "
                        "\"nvme_bytes_per_rank\": %d, ",
                        host_bytes_per_rank, host_memory.parameters, host_memory.gradients,
                        host_memory.optimizer_state, host_memory.swap_buffers, host_memory.staging, host_memory.peak,
                        nvme_bytes_per_rank);
  std::string config_escaped;
  for (char c : config) {
    if (c == '"' || c == '\\') config_escaped += '\\';
    config_escaped += c;
  }
  absl::StrAppendFormat(&j, "\"model_flops_per_step_per_device\": %.9g, \"sharding\": \"%s\", \"units\": [",
                        model_flops_per_step, config_escaped);
  for (size_t i = 0; i < units.size(); ++i) {
    absl::StrAppendFormat(&j, "%s{\"name\": \"%s\", \"forward_s\": %.9g, \"backward_s\": %.9g, \"exposed_comm_s\": %.9g}",
                          i ? ", " : "", units[i].name, units[i].forward_s, units[i].backward_s, units[i].exposed_s);
  }
  absl::StrAppend(&j, "]}");
  return j;
}

std::string SimResult::ToText() const {
  std::string t;
  absl::StrAppendFormat(&t, "model %s (%d parameters) on %d ranks (%d per node), profile %s\n", model, parameters, world,
                        gpus_per_node, profile);
  absl::StrAppendFormat(&t, "  %s\n", config);
  absl::StrAppendFormat(&t, "step time      %.3f ms\n", 1e3 * step_time_s);
  absl::StrAppendFormat(&t, "tokens/s/device %.0f (%d tokens per step per device)\n", tokens_per_s_per_device,
                        tokens_per_step);
  absl::StrAppendFormat(&t, "MFU            %.1f%%\n", 100 * mfu);
  absl::StrAppendFormat(&t, "compute        %.3f ms\n", 1e3 * compute_s);
  absl::StrAppendFormat(&t, "copies         %.3f ms (not under compute)\n", 1e3 * copy_s);
  if (host_bytes_per_rank > 0 || host_s > 0) {
    absl::StrAppendFormat(&t, "host kernels   %.3f ms (the device neither computing nor copying; the optimizer step "
                          "%.3f ms in all)\n",
                          1e3 * host_s, 1e3 * host_optimizer_s);
  }
  absl::StrAppendFormat(&t, "communication  %.3f ms, exposed %.3f ms (%.1f%% of the step)\n", 1e3 * comm_s,
                        1e3 * exposed_comm_s, 100 * exposed_comm_fraction);
  if (nvme_bytes_per_rank > 0) {
    absl::StrAppendFormat(&t, "NVMe           %.3f ms, exposed %.3f ms (nothing else running); read %s, written %s\n",
                          1e3 * nvme_s, 1e3 * exposed_nvme_s, FormatBytes(static_cast<int64_t>(nvme_read_bytes)),
                          FormatBytes(static_cast<int64_t>(nvme_write_bytes)));
  }
  absl::StrAppendFormat(&t, "idle           %.3f ms", 1e3 * idle_s);
  if (peer_wait_s > 0) {
    absl::StrAppendFormat(&t, ", of which waiting for late peers %.3f ms (%.1f%% of the step)", 1e3 * peer_wait_s,
                          100 * peer_wait_s / step_time_s);
  }
  absl::StrAppend(&t, "\n");
  if (host_bytes_per_rank > 0) {
    absl::StrAppendFormat(&t, "host copies    %.3f ms, %s (every H2D and D2H transfer, overlapped or not)\n",
                          1e3 * host_copy_s, FormatBytes(static_cast<int64_t>(host_copy_bytes)));
  }
  absl::StrAppendFormat(&t, "sent per step  %s\n", FormatBytes(static_cast<int64_t>(comm_bytes_per_step)));
  absl::StrAppendFormat(&t, "peak memory    %s per rank: parameters %s, gradients %s, optimizer %s, activations and "
                        "gathered %s, fragmentation %s\n",
                        FormatBytes(peak_bytes_per_rank), FormatBytes(memory.parameters), FormatBytes(memory.gradients),
                        FormatBytes(memory.optimizer_state), FormatBytes(memory.activations),
                        FormatBytes(memory.fragmentation));
  if (host_bytes_per_rank > 0) {
    absl::StrAppendFormat(&t, "host memory    %s per rank (CPU offload): parameters %s, gradients %s, optimizer %s, "
                          "NVMe swap buffers %s, staging %s\n",
                          FormatBytes(host_bytes_per_rank), FormatBytes(host_memory.parameters),
                          FormatBytes(host_memory.gradients), FormatBytes(host_memory.optimizer_state),
                          FormatBytes(host_memory.swap_buffers), FormatBytes(host_memory.staging));
  }
  if (nvme_bytes_per_rank > 0) {
    absl::StrAppendFormat(&t, "NVMe swap      %s per rank (the swap files' size)\n", FormatBytes(nvme_bytes_per_rank));
  }
  if (!fits) {
    absl::StrAppendFormat(&t, "DOES NOT FIT: the peak is above the device's %s\n", FormatBytes(memory_capacity_bytes));
  }
  absl::StrAppendFormat(&t, "per unit (compute stream, ms): %-24s %10s %10s %10s\n", "unit", "forward", "backward",
                        "exposed");
  for (const UnitTime& u : units) {
    absl::StrAppendFormat(&t, "                               %-24s %10.3f %10.3f %10.3f\n", u.name, 1e3 * u.forward_s,
                          1e3 * u.backward_s, 1e3 * u.exposed_s);
  }
  return t;
}

absl::Status WriteTrace(const SimResult& r, const std::string& path) {
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("--trace: cannot write \"", path, "\""));
  out << "{\"traceEvents\": [\n";
  bool first = true;
  for (size_t i = 0; i < r.streams.size(); ++i) {
    out << (first ? "" : ",\n") << absl::StrFormat(
        R"({"name": "thread_name", "ph": "M", "pid": 0, "tid": %d, "args": {"name": "%s"}})", i, r.streams[i]);
    first = false;
  }
  for (const VirtualSpan& s : r.spans) {
    // A device op is category "op", as the job's traced ops are, so
    // tools/trace_summary --ops gives the predicted step's per-op breakdown
    // (Note [Per-op breakdown]); its FLOPs and bytes ride in args.
    const std::string category = s.category == "compute" ? "op" : std::string(s.category);
    out << (first ? "" : ",\n")
        << absl::StrFormat(R"({"name": "%s", "cat": "%s", "ph": "X", "pid": 0, "tid": %d, "ts": %.3f, "dur": %.3f, )"
                           R"("args": {"flops": %.9g, "bytes": %.9g}})",
                           std::string(s.name), category, s.stream, 1e6 * s.start, 1e6 * (s.end - s.start), s.flops,
                           s.bytes);
    first = false;
  }
  out << "\n]}\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("--trace: writing \"", path, "\" failed"));
  return absl::OkStatus();
}

}  // namespace zeroshard::sim
