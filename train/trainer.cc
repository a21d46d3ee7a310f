#include "zeroshard/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/hf_folder.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/train/log_sink.h"
#include "zeroshard/train/loop.h"
#include "zeroshard/train/metrics.h"
#include "zeroshard/train/tensorboard.h"
#include "zeroshard/train/progress.h"
#include "zeroshard/train/train_step.h"
#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/cuda/gemm_cublaslt.h"
#include "zeroshard/kernels/deferred_checks.h"
#include "zeroshard/collectives/trace_merge.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/data/tokenizer.h"
#include "zeroshard/runtime/figures.h"
#include "zeroshard/runtime/cuda/async_copy.h"
#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/nvtx.h"
#include "zeroshard/runtime/cuda/pinned_host_allocator.h"
#include "zeroshard/runtime/gpu_timeline.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using autograd::Variable;

std::string TrainOptions::ToString() const {
  std::string model_line = model.ToString();
  if (model_type == "llama") {
    absl::StatusOr<nn::LlamaConfig> c = LlamaConfigFor(*this);
    model_line = c.ok() ? c->ToString() : absl::StrCat("Llama (", c.status().message(), ")");
    if (IsHfFolder(init_from)) absl::StrAppend(&model_line, " from ", init_from, "/config.json");
  }
  return absl::StrCat(
      model_line, "\n  data ", data, tokenizer == "bytes" ? "" : absl::StrCat(", tokenizer ", tokenizer), " (validation: last ", val_fraction * 100, "%)",
      "\n  batch ", batch_size, " rows/rank x ", model.block_size, " tokens, grad_accum_steps ",
      grad_accum_steps, no_sync ? " (no_sync)" : "", ", steps ", steps,
      "\n  optimizer ", optim::OptimizerName(optimizer), " weight_decay ", optimizer.weight_decay,
      ", lr ", lr.ToString(), ", grad_clip ", grad_clip, ", seed ", seed,
      "\n  sharding ", sharding.ToString());
}

bool IsHfFolder(const std::string& path) {
  if (path.empty()) return false;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::stat((path + "/config.json").c_str(), &st) == 0;
}

absl::StatusOr<nn::LlamaConfig> LlamaConfigFor(const TrainOptions& o) {
  nn::LlamaConfig c = o.llama;
  if (IsHfFolder(o.init_from)) {
    ZS_ASSIGN_OR_RETURN(const std::string text, ReadDataFile(o.init_from + "/config.json"));
    absl::StatusOr<nn::LlamaConfig> read = nn::LlamaConfig::FromHfJson(text);
    if (!read.ok()) {
      return absl::Status(read.status().code(), absl::StrCat(o.init_from, "/", read.status().message()));
    }
    c = *read;
  } else {
    c.vocab_size = o.model.vocab_size;
    c.hidden_size = o.model.n_embd;
    c.num_hidden_layers = o.model.n_layer;
    c.num_attention_heads = o.model.n_head;
    if (c.num_key_value_heads == 0) c.num_key_value_heads = o.model.n_head;
    // SwiGLU's three matrices at about the parameters of a 4x GELU MLP (8/3 C),
    // rounded up to a multiple of 64 as Llama rounds (to 256 at scale).
    if (c.intermediate_size == 0) c.intermediate_size = (8 * o.model.n_embd / 3 + 63) / 64 * 64;
    if (c.max_position_embeddings == 0) c.max_position_embeddings = o.model.block_size;
    ZS_RETURN_IF_ERROR(c.Validate());
  }
  c.activation_checkpointing = o.model.activation_checkpointing;
  if (o.model.block_size > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("model.block_size (the sequence length trained on): expected at most "
                                                   "the Llama's max_position_embeddings ",
                                                   c.max_position_embeddings, ", found ", o.model.block_size));
  }
  return c;
}

namespace {

// The run's tokens: a .bin token file as it is (data/token_data.h); a text file
// as bytes, or encoded by the tokenizer (data.tokenizer "gpt2").
absl::StatusOr<TokenData> LoadTokens(const std::string& path, Tokenizer& tokenizer) {
  if (tokenizer.name() == "bytes" || absl::EndsWith(path, ".bin")) return TokenData::Load(path);
  // (An istreambuf_iterator ended at a read error as at the end of the file.)
  ZS_ASSIGN_OR_RETURN(const std::string text, ReadDataFile(path));
  if (tokenizer.vocab_size() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("data.tokenizer \"", tokenizer.name(), "\": expected a vocabulary "
                                                   "of at most 65536 (tokens are uint16), found ", tokenizer.vocab_size()));
  }
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  std::vector<uint16_t> tokens(ids.begin(), ids.end());
  return TokenData::FromTokens(std::move(tokens), tokenizer.vocab_size());
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The global mean of a per-rank value.
absl::StatusOr<double> MeanOverRanks(Communicator& comm, double v) {
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, v, DType::kF32));
  ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kAvg));
  return t.Item();
}

// A batch's ids copied to `device` when it is a GPU (a no-op on the CPU).
absl::Status OnDevice(Batch& b, Allocator* device) {
  if (!device->device().is_cuda()) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(b.inputs, b.inputs.To(device));
  ZS_ASSIGN_OR_RETURN(b.targets, b.targets.To(device));
  return absl::OkStatus();
}

// Note [Training batches without a host synchronisation]
// A batch's inputs and targets come from host memory. A plain copy (OnDevice)
// is a synchronous cudaMemcpy from pageable memory: the host waits for the
// device to drain, every micro-step. Here each batch is first copied (memcpy)
// into one of two pinned host slots, then copied up asynchronously on a copy
// stream of its own into device tensors from the rank's caching allocator
// (which serves the ops' stream, the legacy default one). Events order it
// both ways on the device: the copy stream waits for what the ops' stream had
// enqueued (the memory it writes may have been freed by that work), and the
// ops' stream waits for the copy before the forward reads it. The same "copied"
// event marks when the slot may be written again: a slot is reused two
// batches later, by when the device has normally long passed that copy (it
// precedes the previous batch's whole forward and backward), so
// cudaEventQuery says so and nothing waits; only a host running two batches
// ahead of the device blocks there (cudaEventSynchronize, counted as a host
// synchronisation: flow control, not a read). The pinned slots are allocated
// on first use and again when the batch's shape changes.
class DeviceBatches {
 public:
  explicit DeviceBatches(Allocator* device) : device_(device) {}

  absl::Status Stage(Batch& b) {
    if (!device_->device().is_cuda()) return absl::OkStatus();
    if (!copy_.has_value()) {
      ZS_ASSIGN_OR_RETURN(Stream s, Stream::Create(device_->device()));
      copy_.emplace(std::move(s));
    }
    Slot& slot = slots_[next_++ % kSlots];
    if (slot.copied.has_value()) {
      ZS_ASSIGN_OR_RETURN(const bool done, slot.copied->Query());
      if (!done) ZS_RETURN_IF_ERROR(slot.copied->Synchronize());
    } else {
      ZS_ASSIGN_OR_RETURN(Event copied, Event::Create(device_->device()));
      ZS_ASSIGN_OR_RETURN(Event ready, Event::Create(device_->device()));
      slot.copied.emplace(std::move(copied));
      slot.ready.emplace(std::move(ready));
    }
    const Stream ops = Stream::Default(device_->device());
    ZS_RETURN_IF_ERROR(slot.ready->Record(ops));
    ZS_RETURN_IF_ERROR(slot.ready->Block(*copy_));
    ZS_RETURN_IF_ERROR(Enqueue(b.inputs, slot.inputs));
    ZS_RETURN_IF_ERROR(Enqueue(b.targets, slot.targets));
    ZS_RETURN_IF_ERROR(slot.copied->Record(*copy_));
    return slot.copied->Block(ops);
  }

 private:
  static constexpr int kSlots = 2;
  struct Slot {
    Tensor inputs, targets;  // pinned host staging
    std::optional<Event> ready, copied;
  };

  // t (host) -> pinned staging -> a new device tensor, on the copy stream; t becomes it.
  absl::Status Enqueue(Tensor& t, Tensor& staging) {
    if (!staging.defined() || staging.shape() != t.shape() || staging.dtype() != t.dtype()) {
      ZS_ASSIGN_OR_RETURN(staging, Tensor::Empty(t.shape(), t.dtype(), &pinned_));
    }
    ZS_RETURN_IF_ERROR(staging.CopyFrom(t));  // host to host
    ZS_ASSIGN_OR_RETURN(Tensor d, Tensor::Empty(t.shape(), t.dtype(), device_));
    ZS_RETURN_IF_ERROR(CopyAsync(d, staging, *copy_));
    t = std::move(d);
    return absl::OkStatus();
  }

  Allocator* device_;
  PinnedHostAllocator pinned_;
  std::optional<Stream> copy_;
  Slot slots_[kSlots];
  int64_t next_ = 0;
};

absl::StatusOr<double> EvalLoss(nn::CausalLm& gpt, const TokenData& val, const TrainOptions& o,
                                Communicator& comm, Communicator& host, Allocator* device) {
  autograd::NoGradGuard no_grad;
  gpt.Eval();
  double sum = 0;
  for (int64_t i = 0; i < o.eval_iters; ++i) {
    ZS_ASSIGN_OR_RETURN(Batch b, val.GetBatch({.step = i, .rank = comm.rank(), .world_size = comm.size(),
                                               .batch_size = o.batch_size,
                                               .block_size = o.model.block_size}));
    ZS_RETURN_IF_ERROR(OnDevice(b, device));
    ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt.Forward(b.inputs, b.targets));
    ZS_ASSIGN_OR_RETURN(double l, out.loss.value().Item());
    sum += l;
  }
  gpt.Train();
  return MeanOverRanks(host, sum / std::max<int64_t>(o.eval_iters, 1));
}

// Samples `n` tokens after `prompt` (every rank runs the same forwards; the
// random draws are the same everywhere).
absl::StatusOr<std::vector<int64_t>> Generate(nn::CausalLm& gpt, std::vector<int64_t> tokens, int64_t n,
                                              double temperature, int64_t top_k, uint64_t seed,
                                              Allocator* device) {
  autograd::NoGradGuard no_grad;
  gpt.Eval();
  std::mt19937_64 rng(seed);
  const int64_t block = gpt.max_positions();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - block);
    std::vector<int64_t> ctx(tokens.begin() + start, tokens.end());
    ZS_ASSIGN_OR_RETURN(Tensor ids, Tensor::FromVector(ctx, {1, static_cast<int64_t>(ctx.size())}));
    if (device->device().is_cuda()) {
      ZS_ASSIGN_OR_RETURN(ids, ids.To(device));
    }
    ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt.Forward(ids));
    ZS_ASSIGN_OR_RETURN(Tensor last, out.logits.value().Select(1, -1));
    if (!last.device().is_cpu()) {
      ZS_ASSIGN_OR_RETURN(last, last.To(DefaultCpuAllocator()));
    }
    ZS_ASSIGN_OR_RETURN(std::vector<float> logits, last.ToVector<float>());
    std::vector<double> p(logits.size());
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[std::min<size_t>(std::max<int64_t>(top_k, 1), sorted.size()) - 1];
    double m = -INFINITY, z = 0;
    for (float l : logits) m = std::max<double>(m, l);
    for (size_t v = 0; v < logits.size(); ++v) {
      p[v] = logits[v] < kth ? 0.0 : std::exp((logits[v] - m) / temperature);
      z += p[v];
    }
    double u = std::uniform_real_distribution<double>(0.0, z)(rng);
    int64_t pick = static_cast<int64_t>(p.size()) - 1;
    for (size_t v = 0; v < p.size(); ++v) {
      if (u < p[v]) {
        pick = static_cast<int64_t>(v);
        break;
      }
      u -= p[v];
    }
    tokens.push_back(pick);
  }
  gpt.Train();
  return tokens;
}

}  // namespace

absl::StatusOr<std::shared_ptr<nn::CausalLm>> MakeJobModel(const TrainOptions& o, int rank) {
  if (o.model_type == "llama") {
    ZS_ASSIGN_OR_RETURN(const nn::LlamaConfig config, LlamaConfigFor(o));
    return std::shared_ptr<nn::CausalLm>(std::make_shared<nn::Llama>(config));
  }
  return std::shared_ptr<nn::CausalLm>(std::make_shared<nn::Gpt>(o.model, o.seed + 1000003ull * rank));
}

ShardingOptions JobShardingOptions(const TrainOptions& o, const nn::CausalLm& model) {
  ShardingOptions sharding = o.sharding;
  sharding.init_seed = o.seed;
  // The job's default unit is a GPT Block; a Llama's is its decoder layer.
  if (sharding.wrap.kind == WrapPolicy::Kind::kByType && sharding.wrap.types == std::set<std::string>{"Block"}) {
    sharding.wrap = WrapPolicy::ByType({model.layer_type()});
  }
  return sharding;
}

optim::OptimWrapperOptions JobStepOptions(const TrainOptions& o) {
  const bool scaling = o.loss_scaling || o.sharding.mixed_precision.param_dtype == DType::kF16;
  return {.optimizer = o.optimizer,
          .lr = o.lr,
          .accumulative_counts = static_cast<int>(o.grad_accum_steps),
          .no_sync = o.no_sync,
          .clip_grad_max_norm = o.grad_clip,
          .loss_scaling = scaling,
          .loss_scaler = o.loss_scaler,
          // GPUs: the loss and the clipping norm stay on the device inside a
          // step (read on log steps); nothing changes on CPU ranks.
          .device_scalars = true,
          .inject_inf_at_step = o.inject_inf_at_step};
}

absl::Status RunTraining(const TrainOptions& o, Communicator& comm, TrainSummary* summary,
                         Communicator* host_comm) {
  const bool lead = comm.rank() == 0;
  const bool on_gpu = comm.device().is_cuda();
  // Host-side numbers go through a communicator of host tensors.
  if (on_gpu && host_comm == nullptr) {
    return absl::InvalidArgumentError(
        "RunTraining on GPUs: expected a host communicator for the run's numbers, found none");
  }
  Communicator& host = host_comm != nullptr ? *host_comm : comm;
  // On GPUs every option runs as on CPU ranks; values cross between host and
  // device by copies: init_from is read on the host (before Create copies each
  // rank's slice into its device shard; a Hugging Face folder range by range),
  // save and checkpoints gather or read device shards and write host copies,
  // offload (CPU or NVMe) copies each shard to the device before its gather and
  // steps the optimizer on the host. The ranks agree on statuses through `host`.
  ZS_ASSIGN_OR_RETURN(const LogSink log,
                      LogSink::Open({.lead = lead, .log_file = o.log_file, .progress_bar = o.progress_bar,
                                     .writer = o.output}));
  ZS_RETURN_IF_ERROR(o.lr.Validate());
  if (o.model_type != "gpt" && o.model_type != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat("model.type: expected \"gpt\" or \"llama\", found \"", o.model_type, "\""));
  }
  const bool llama = o.model_type == "llama";
  std::optional<nn::LlamaConfig> llama_config;
  if (llama) {
    ZS_ASSIGN_OR_RETURN(llama_config, LlamaConfigFor(o));
  }
  const int64_t vocab_size = llama ? llama_config->vocab_size : o.model.vocab_size;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, MakeTokenizer(o.tokenizer));
  // Text is encoded by the tokenizer, so its ids must fit the model; a token
  // file's ids are checked below (the tokenizer then only decodes the sample).
  if (!absl::EndsWith(o.data, ".bin") && tokenizer->vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("data.tokenizer \"", o.tokenizer, "\" has ", tokenizer->vocab_size(),
                                                   " tokens: expected model.vocab_size >= ", tokenizer->vocab_size(),
                                                   ", found ", vocab_size));
  }
  ZS_ASSIGN_OR_RETURN(TokenData all, LoadTokens(o.data, *tokenizer));
  if (all.vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the data holds token ids up to ", all.vocab_size() - 1,
                                                   " but the model's vocab_size is ", vocab_size));
  }
  ZS_ASSIGN_OR_RETURN(TokenData train, all.Split(0.0, 1.0 - o.val_fraction));
  ZS_ASSIGN_OR_RETURN(TokenData val, all.Split(1.0 - o.val_fraction, 1.0));
  const double unigram = train.UnigramEntropy();
  log.Line(absl::StrFormat(
      "zeroshard train: %d ranks (%s, collective timeout %s)\n  %s\n  data: %d train / %d val tokens, unigram "
      "entropy %.4f nats\n",
      comm.size(), comm.backend(), absl::FormatDuration(comm.options().timeout), o.ToString(), train.size(),
      val.size(), unigram));

  // On a GPU, a caching allocator (as PyTorch's): a warm step takes no cudaMalloc.
  // Declared before the tensors that use it, so it outlives them.
  std::unique_ptr<CudaBacking> backing;
  std::unique_ptr<CachingAllocator> cache;
  std::unique_ptr<Allocator> device_allocator;
  if (on_gpu) {
    backing = std::make_unique<CudaBacking>(comm.device().index);
    cache = std::make_unique<CachingAllocator>(
        backing.get(), CachingAllocatorOptions{.name = absl::StrCat("rank", comm.rank()),
                                               .device = comm.device(),
                                               .capacity_bytes = o.device_memory_limit});
    device_allocator = std::make_unique<CachingStreamAllocator>(cache.get(), /*stream=*/nullptr, "compute");
  } else {
    device_allocator = std::make_unique<CpuAllocator>(CpuAllocator::Options{
        .name = absl::StrCat("rank", comm.rank()), .capacity_bytes = o.device_memory_limit});
  }
  Allocator& device = *device_allocator;
  // The model, shapes only: ShardedModel::Create initialises each rank's shard
  // alone (deferred init), so no rank ever holds the whole model.
  ZS_ASSIGN_OR_RETURN(std::shared_ptr<nn::CausalLm> gpt, MakeJobModel(o, comm.rank()));
  const bool hf_init = IsHfFolder(o.init_from);
  if (!o.init_from.empty() && !hf_init) {
    ZS_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(o.init_from));
    nn::NamedTensors state;
    for (const auto& [name, slot] : gpt->NamedParameterSlots()) {
      if (!file.Contains(name)) continue;
      ZS_ASSIGN_OR_RETURN(Tensor t, file.Read(name));
      state.emplace_back(name, t);
    }
    ZS_ASSIGN_OR_RETURN(nn::LoadStateDictResult r, gpt->LoadStateDict(state, /*strict=*/false));
    if (!r.missing_keys.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--init_from ", o.init_from, " lacks ",
                                                     r.missing_keys.size(), " parameters, e.g. ",
                                                     r.missing_keys[0]));
    }
  }
  const ShardingOptions sharding = JobShardingOptions(o, *gpt);
  ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, sharding, &device));
  if (hf_init) {
    // A Hugging Face folder: every rank reads the byte ranges of its own shards.
    ZS_ASSIGN_OR_RETURN(const HfLoadResult r, LoadHfWeights(o.init_from, *sharded, {.host = &host}));
    log.Line(absl::StrFormat("  init_from %s: rank 0 read %s of tensor data\n", o.init_from, FormatBytes(r.bytes_read)));
  }
  log.Line(absl::StrFormat("  parameters: %d (%s per rank sharded)\n", gpt->NumParameters(),
                           sharded->Plan().ToString()));
  // HYBRID_SHARD's groups, with their nodes when they follow them (Note [Hybrid shard groups]).
  if (sharding.strategy == ShardingStrategy::kHybridShard) log.Line(absl::StrCat("  ", sharded->GroupMapping(), "\n"));
  // Where each tied parameter lives under the wrap policy (Note [Tied parameters]).
  for (const TiedPlacement& t : sharded->ties()) log.Line(absl::StrCat("  ", t.ToString(), "\n"));
  const bool scaling = o.loss_scaling || sharding.mixed_precision.param_dtype == DType::kF16;
  ZS_ASSIGN_OR_RETURN(TrainStep train_step,
                      TrainStep::Create(*sharded, JobStepOptions(o), &host));
  optim::ShardedOptimizer& opt = train_step.optim().optimizer();
  optim::LrScheduler& scheduler = train_step.optim().scheduler();
  optim::DynamicLossScaler& scaler = train_step.optim().loss_scaler();
  if (sharding.offload.nvme()) {
    log.Line(absl::StrCat("  rank 0's swap files (NVMe offload):\n    ",
                          absl::StrReplaceAll(absl::StripSuffix(opt.NvmeSummary(), "\n"), {{"\n", "\n    "}}), "\n"));
  }
  if (scaling) log.Line(absl::StrCat("  fp16 dynamic loss scaling: ", o.loss_scaler.ToString(), "\n"));

  TrainSummary s;
  s.unigram_entropy = unigram;
  // A save killed midway (kill -9) leaves a step-<n>.tmp directory or files of a
  // dead process; the lead removes them before this run saves or resumes there.
  // (RemoveOrphans, ResumeTraining and LoopCheckpointer are RunLoop's pieces, train/loop.h.)
  ZS_RETURN_IF_ERROR(RemoveOrphans(lead && (o.save_every > 0 || !o.resume.empty()), o.work_dir, log));
  // Resume: model shards, optimizer state, schedule, loss scale, dropout stream.
  int64_t start_step = 0;
  ZS_ASSIGN_OR_RETURN(const std::optional<LoadResult> resumed,
                      ResumeTraining(o.resume, o.work_dir, *sharded, train_step, log, LoadOptions{.host = &host}));
  if (resumed) {
    start_step = resumed->state.step;
    if (static_cast<int>(resumed->state.rng_offsets.size()) == comm.size()) {
      gpt->dropout_generator().offset = resumed->state.rng_offsets[comm.rank()];
    }
  }
  s.start_step = start_step;
  ZS_ASSIGN_OR_RETURN(const StateDictType sd_type, ParseStateDictType(o.state_dict_type));
  LoopCheckpointer saver(o.work_dir, {.type = sd_type, .write_tied_once = o.write_tied_once, .host = &host}, o.async_save,
                         o.keep_last, lead, log);
  auto save = [&](int64_t steps_done) -> absl::Status {
    TrainingState state;
    state.step = steps_done;
    state.lr_scheduler = scheduler.StateDict();
    if (scaling) state.loss_scaler = scaler.StateDict();
    ZS_ASSIGN_OR_RETURN(Tensor mine, Tensor::FromVector(
        std::vector<int64_t>{static_cast<int64_t>(gpt->dropout_generator().offset)}, {1}));
    ZS_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({comm.size()}, DType::kI64));
    ZS_RETURN_IF_ERROR(host.AllGather(mine, all));
    ZS_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, all.ToVector<int64_t>());
    state.rng_offsets.assign(offsets.begin(), offsets.end());
    // The run as it ran: HYBRID_SHARD's group size as resolved (0: the nodes').
    TrainOptions ran = o;
    ran.sharding.hybrid_shard_size = sharded->options().hybrid_shard_size;
    state.config = ran.ToString();
    return saver.Save(*sharded, &opt, state);
  };
  const int64_t tokens_per_step = o.batch_size * o.model.block_size * comm.size() * o.grad_accum_steps;
  const double flops_per_token = gpt->TrainFlopsPerToken(o.model.block_size);
  const double start = Now();
  double window_start = start;
  // Tracing, one file with a process per rank (Note [Merged traces] in
  // collectives/trace_merge.h): in-process ranks record into the caller's
  // shared recorder, on one clock; a rank of its own process records into its
  // own, its clock's offset to rank 0's measured here, and rank 0 merges them.
  std::unique_ptr<TraceRecorder> own_trace;
  TraceRecorder* trace = o.shared_trace;
  ClockOffset clock_offset;
  if (!o.trace.empty() && trace == nullptr) {
    own_trace = std::make_unique<TraceRecorder>();
    trace = own_trace.get();
    if (host.size() > 1) {
      ZS_ASSIGN_OR_RETURN(clock_offset, MeasureClockOffset(host, *own_trace));
    }
  }
  // On a GPU, GPU spans and NVTX ranges in the traced steps (Note [GPU spans]
  // in runtime/gpu_timeline.h); ZEROSHARD_NVTX=1 without --trace: NVTX ranges
  // in every step, through a recorder that keeps no spans.
  std::unique_ptr<TraceRecorder> nvtx_only;
  if (on_gpu && trace == nullptr && nvtx::Requested()) {
    nvtx_only = std::make_unique<TraceRecorder>(TraceRecorder::DiscardSpans{});
  }
  std::unique_ptr<GpuTimeline> gpu_trace;
  if (on_gpu && (trace != nullptr || nvtx_only != nullptr)) {
    gpu_trace = std::make_unique<GpuTimeline>(comm.device(), trace != nullptr ? trace : nvtx_only.get(), comm.rank(),
                                              GpuTimelineOptions{.events = trace != nullptr});
  }
  // metrics.csv (per-step time and every rank's per-step peak memory) and
  // TensorBoard (a step's row as scalars: train/*, val/loss when evaluated,
  // memory/peak_bytes_rank<r>, flushed at once).
  ZS_ASSIGN_OR_RETURN(StepRecorder recorder, StepRecorder::Open(lead, o.metrics_csv, o.tensorboard_dir, comm.size()));
  auto write_row = [&](const StepMetrics& r) { return recorder.Write(r); };
  const bool writes_rows = recorder.active();
  int64_t run_peak = 0;
  StepMetrics row;
  std::vector<double> step_ms;  // wall time of each step (the loss read back ends it)
  // cudaMalloc and host synchronisations of the steps after the first two.
  const int64_t first_counted = start_step + 2;
  cuda::CudaCallCounts counts_before;
  int64_t quiet_syncs = 0, quiet_steps = 0, quiet_limiter_waits = 0;
  // On GPUs the ids of Embedding and CrossEntropy are checked on the device
  // (kernels/deferred_checks.h) and each step's loss stays there: both are
  // read when something needs the loss (a log line, a metrics row, the
  // progress bar, validation, a save), with no host synchronisation between.
  std::unique_ptr<DeferredIdChecks> id_checks;
  if (on_gpu) {
    ZS_ASSIGN_OR_RETURN(id_checks, DeferredIdChecks::Install(&device));
  }
  std::vector<std::pair<size_t, Tensor>> unread_losses;  // (index in s.losses, the device loss)
  auto read_losses = [&]() -> absl::Status {
    if (id_checks != nullptr) ZS_RETURN_IF_ERROR(id_checks->Resolve());
    for (const auto& [index, t] : unread_losses) {
      ZS_ASSIGN_OR_RETURN(const double l, t.Item());
      s.losses[index] = l;
    }
    unread_losses.clear();
    return absl::OkStatus();
  };
  const bool row_every_step = !o.metrics_csv.empty() || !o.tensorboard_dir.empty() || o.progress_bar;
  // A metrics row (metrics.csv, TensorBoard) waits for its loss: rows of
  // steps that read nothing back are held and written, in order, at the next
  // read (a log line, validation, a save, the run's end), so a run folder's
  // rows cost no host synchronisation per step. The progress bar shows every
  // step's loss and reads it each step.
  std::vector<std::pair<size_t, StepMetrics>> held_rows;  // (index in s.losses, the row)
  auto write_held_rows = [&]() -> absl::Status {
    for (auto& [index, held] : held_rows) {
      held.loss = s.losses[index];
      ZS_RETURN_IF_ERROR(write_row(held));
    }
    held_rows.clear();
    return absl::OkStatus();
  };
  // What this rank sends in the training steps (BytesSent, train/loop.h).
  int64_t step_bytes = 0;
  DeviceBatches staged_batches(&device);
  const cuda::BiasGradEpilogueCounts bias_grads_before = cuda::BiasGradEpilogueCountsNow();
  const cuda::EpilogueCounts gelus_before = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
  const AttentionKernelCounts attention_before = AttentionKernelCountsNow();
  for (int64_t step = start_step; step < o.steps; ++step) {
    if (step == first_counted) counts_before = cuda::ThreadCudaCallCounts();
    const cuda::CudaCallCounts step_before = cuda::ThreadCudaCallCounts();
    const int64_t limiter_waits_before = sharded->schedule().frees().waits();
    const bool log_step = (step + 1) % o.log_every == 0 || step == 0 || step + 1 == o.steps;
    const bool save_step = o.save_every > 0 && !o.work_dir.empty() && (step + 1) % o.save_every == 0;
    const bool eval_step = o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 < o.steps;
    const double step_start = Now();
    const bool tracing = trace != nullptr && step >= o.trace_from && step < o.trace_from + o.trace_steps;
    sharded->set_trace(tracing ? trace : nvtx_only.get(), gpu_trace.get());
    ScopedSpan step_span(tracing ? trace : nullptr, absl::StrCat("step ", step), "step",
                         {comm.rank(), TraceRow::kCompute});
    GpuMark step_range;  // NVTX only
    if (gpu_trace != nullptr && (tracing || nvtx_only)) {
      step_range = gpu_trace->Begin(nullptr, absl::StrCat("step ", step), /*event=*/false);
    }
    const int64_t bytes_before = BytesSent(comm, host);
    ZS_ASSIGN_OR_RETURN(const StepResult r, train_step.Run([&](int64_t m) -> absl::StatusOr<Variable> {
      ZS_ASSIGN_OR_RETURN(Batch b, train.GetBatch({.step = step, .micro_step = m,
                                                   .accum_steps = o.grad_accum_steps, .rank = comm.rank(),
                                                   .world_size = comm.size(), .batch_size = o.batch_size,
                                                   .block_size = o.model.block_size}));
      ZS_RETURN_IF_ERROR(staged_batches.Stage(b));  // Note [Training batches without a host synchronisation]
      ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
      return out.loss;
    }));
    step_bytes += BytesSent(comm, host) - bytes_before;
    if (gpu_trace != nullptr) {
      gpu_trace->Drop(step_range);
      // The one host synchronisation tracing adds, at the traced step's end.
      if (tracing) ZS_RETURN_IF_ERROR(gpu_trace->Resolve());
    }
    const double lr = r.lr;
    if (r.skipped) {
      log.Line(absl::StrFormat("step %d skipped: gradients overflowed (%s)\n", step, scaler.ToString()));
    }
    s.losses.push_back(r.loss);
    if (r.loss_on_device.defined()) unread_losses.emplace_back(s.losses.size() - 1, r.loss_on_device);
    const bool read_step = log_step || save_step || eval_step || o.progress_bar;
    if (read_step) ZS_RETURN_IF_ERROR(read_losses());
    const double loss = s.losses.back();  // NaN until read (a quiet step on GPUs)
    step_ms.push_back((Now() - step_start) * 1000.0);
    if (row_every_step) {
      const double ms = (Now() - step_start) * 1000.0;
      const int64_t step_peak = device.stats().peak_bytes_in_use;
      run_peak = std::max(run_peak, step_peak);
      device.ResetPeak();
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> peaks, GatherPerRank(host, step_peak));
      row = StepMetrics{.step = step, .loss = loss, .lr = lr, .tokens_per_s = tokens_per_step / (ms / 1000.0),
                        .ms_per_step = ms, .peak_bytes = std::move(peaks)};
    }
    if (log_step) {
      const double now = Now();
      const int64_t steps_in_window = step == 0 ? 1 : ((step + 1) % o.log_every == 0 ? o.log_every : (step + 1) % o.log_every);
      const double ms = (now - window_start) * 1000.0 / steps_in_window;
      window_start = now;
      log.Line(StepLine(step, loss, lr, ms, tokens_per_step));
    }
    if (save_step) {
      ZS_RETURN_IF_ERROR(save(step + 1));
    }
    if (eval_step) {
      ZS_ASSIGN_OR_RETURN(double vl, EvalLoss(*gpt, val, o, comm, host, &device));
      ZS_RETURN_IF_ERROR(read_losses());  // the checks of validation's forwards
      log.Line(absl::StrFormat("step %d val loss %.6f (unigram entropy %.4f)\n", step, vl, unigram));
      row.val_loss = vl;
      window_start = Now();
    }
    if (lead && o.progress_bar) {
      const double flops = flops_per_token * row.tokens_per_s;
      log.Bar(ProgressLine({.step = step, .steps = o.steps, .loss = loss, .lr = lr,
                            .tokens_per_s = row.tokens_per_s, .ms_per_step = row.ms_per_step,
                            .mfu = o.peak_flops > 0 ? flops / o.peak_flops : -1.0,
                            .peak_bytes = row.peak_bytes}));
    }
    if (writes_rows && step + 1 < o.steps) {  // the last row waits for the final validation loss
      held_rows.emplace_back(s.losses.size() - 1, row);
      // On CPU ranks every loss is known at once: rows go out every step.
      if (read_step || unread_losses.empty()) ZS_RETURN_IF_ERROR(write_held_rows());
    }
    if (step >= first_counted && !read_step) {
      quiet_syncs += cuda::ThreadCudaCallCounts().host_syncs - step_before.host_syncs;
      quiet_limiter_waits += sharded->schedule().frees().waits() - limiter_waits_before;
      ++quiet_steps;
    }
  }
  ZS_RETURN_IF_ERROR(read_losses());
  ZS_RETURN_IF_ERROR(write_held_rows());
  if (on_gpu && o.steps > first_counted) {
    const cuda::CudaCallCounts after = cuda::ThreadCudaCallCounts();
    const double n = static_cast<double>(o.steps - first_counted);
    s.cuda_mallocs_per_step = static_cast<double>(after.mallocs - counts_before.mallocs) / n;
    s.quiet_steps_counted = quiet_steps;
    s.host_syncs_per_step = quiet_steps > 0 ? static_cast<double>(quiet_syncs) / quiet_steps : -1.0;
    s.rate_limiter_waits_per_step =
        quiet_steps > 0 ? static_cast<double>(quiet_limiter_waits) / quiet_steps : -1.0;
    log.Line(absl::StrFormat("GPU: steps %d-%d made %.1f cudaMalloc per step; %d of them neither logged, "
                             "evaluated nor saved and made %.1f host synchronisations each, %.1f of them "
                             "limit_all_gathers' waits for the GPU (caching allocator: %s)\n",
                             first_counted, o.steps - 1, s.cuda_mallocs_per_step, quiet_steps,
                             s.host_syncs_per_step, s.rate_limiter_waits_per_step, cache->stats().ToString()));
  }
  if (on_gpu) {
    const cuda::BiasGradEpilogueCounts b = cuda::BiasGradEpilogueCountsNow();
    s.bias_grads_fused = b.fused - bias_grads_before.fused;
    s.bias_grad_fallbacks = b.fallback - bias_grads_before.fallback;
    log.Line(absl::StrFormat("GPU: %d bias gradients in the weight-gradient GEMM's epilogue, %d fell back to our "
                             "reduction (Note [Bias gradient in the GEMM]; every rank of this process)\n",
                             s.bias_grads_fused, s.bias_grad_fallbacks));
    const cuda::EpilogueCounts g = cuda::EpilogueCountsNow(cuda::FusedEpilogue::kGelu);
    s.gelu_epilogues_fused = g.fused - gelus_before.fused;
    s.gelu_epilogue_fallbacks = g.fallback - gelus_before.fallback;
    log.Line(absl::StrFormat("GPU: %d GEMMs with GELU or its gradient in the epilogue, %d fell back to our GELU "
                             "kernels (Note [GELU in the GEMM])\n",
                             s.gelu_epilogues_fused, s.gelu_epilogue_fallbacks));
    const AttentionKernelCounts a = AttentionKernelCountsNow();
    s.attention_cudnn = a.cudnn - attention_before.cudnn;
    s.attention_tensor_core = a.tensor_core - attention_before.tensor_core;
    s.attention_scalar = a.scalar - attention_before.scalar;
    log.Line(absl::StrFormat("GPU: attention ran %d times in cuDNN's fused kernel, %d in our tensor-core kernel, %d "
                             "in our scalar kernel (Note [Tensor-core attention])\n",
                             s.attention_cudnn, s.attention_tensor_core, s.attention_scalar));
  }
  sharded->set_trace(nullptr);
  if (gpu_trace != nullptr && trace != nullptr) {
    ZS_RETURN_IF_ERROR(gpu_trace->Flush());  // spans whose events completed after their step's Resolve
    const GpuTimeline::Stats g = gpu_trace->stats();
    log.Line(absl::StrFormat("trace: %d GPU spans from %d CUDA events, clock error at most %.1f us\n", g.spans,
                             g.events_created, g.max_clock_error_us));
  }
  if (!o.trace.empty()) {
    if (o.shared_trace != nullptr) {
      ZS_RETURN_IF_ERROR(host.Barrier());  // every rank's spans are in before rank 0 writes
      if (lead) {
        o.shared_trace->SetOtherData("clock_alignment", "{\"method\": \"one clock (in-process ranks)\"}");
        ZS_RETURN_IF_ERROR(o.shared_trace->WriteJson(o.trace));
      }
      log.Line(absl::StrCat("trace: ", o.trace, " (", o.shared_trace->size(), " spans, ", comm.size(),
                            " in-process ranks on one clock)\n"));
    } else {
      if (host.size() > 1) ZS_RETURN_IF_ERROR(GatherTrace(host, *own_trace, clock_offset));
      if (lead) {
        ZS_RETURN_IF_ERROR(own_trace->WriteJson(o.trace));
        log.Line(absl::StrCat("trace: ", o.trace, " (", own_trace->size(), " spans of ", host.size(),
                              " ranks, merged by rank 0)\n"));
      } else {
        log.Line(absl::StrFormat("trace: spans sent to rank 0 (clock offset %.1f us, within %.1f us)\n",
                                 clock_offset.offset_us, clock_offset.bound_us));
      }
    }
  }
  ZS_RETURN_IF_ERROR(saver.Finish());
  s.last_checkpoint = saver.last_checkpoint();
  s.save_blocked_seconds = saver.blocked_seconds();
  s.skipped_steps = scaler.skipped_steps();
  s.final_loss_scale = scaling ? scaler.scale() : 0;
  if (scaling) log.Line(absl::StrCat("loss scaling: ", scaler.ToString(), "\n"));
  s.seconds = Now() - start;
  s.tokens = tokens_per_step * (o.steps - start_step);
  s.comm_bytes_per_step = o.steps > start_step ? step_bytes / (o.steps - start_step) : 0;
  ZS_ASSIGN_OR_RETURN(s.final_val_loss, EvalLoss(*gpt, val, o, comm, host, &device));
  s.peak_bytes = std::max(run_peak, device.stats().peak_bytes_in_use);
  if (writes_rows && o.steps > start_step) {
    row.val_loss = s.final_val_loss;
    ZS_RETURN_IF_ERROR(write_row(row));
  }
  log.Line(absl::StrFormat("final val loss %.6f vs unigram entropy %.4f nats\n", s.final_val_loss, unigram));
  // The sample, decoded by the run's tokenizer: bytes after a newline, or GPT-2
  // tokens after <|endoftext|> (as GPT-2 samples unconditionally).
  if (o.sample_tokens > 0 && all.vocab_size() <= tokenizer->vocab_size()) {
    const int64_t start_token = tokenizer->eot_token() >= 0 ? tokenizer->eot_token() : '\n';
    std::vector<int64_t> prompt = {start_token};
    ZS_ASSIGN_OR_RETURN(std::vector<int64_t> text,
                        Generate(*gpt, prompt, o.sample_tokens, o.temperature, o.top_k, o.seed, &device));
    std::vector<int32_t> ids;
    for (size_t i = 1; i < text.size(); ++i) {
      // A model wider than the vocabulary (padded, as nanoGPT's 50304) may sample an id past it.
      if (text[i] < tokenizer->vocab_size()) ids.push_back(static_cast<int32_t>(text[i]));
    }
    ZS_ASSIGN_OR_RETURN(const std::string str, tokenizer->Decode(ids));
    log.Line(absl::StrCat("sample (temperature ", o.temperature, ", top-k ", o.top_k, "):\n", str, "\n"));
  }
  if (!o.save.empty() && llama) {
    // Hugging Face's layout: config.json, shards and their index, f32.
    ZS_RETURN_IF_ERROR(SaveHfWeights(o.save, *sharded,
                                     {.max_shard_bytes = o.save_shard_bytes,
                                      .dtype = DType::kF32,
                                      .config_json = llama_config->ToHfJson("float32"),
                                      .host = &host}));
    log.Line(absl::StrCat("saved ", o.save, " (Hugging Face layout)\n"));
  } else if (!o.save.empty()) {
    ZS_RETURN_IF_ERROR(sharded->SummonFullParams([&]() -> absl::Status {
      if (!lead) return absl::OkStatus();
      const std::map<std::string, std::string> tied = TiedAliases(*gpt);  // Note [Tied parameters in files]
      return WriteSafetensors(o.save, ModelFileTensors(gpt->StateDict(), tied, o.write_tied_once),
                              ModelFileMetadata(tied));
    }, /*writeback=*/false, /*rank0_only=*/true));
    log.Line(absl::StrCat("saved ", o.save, "\n"));
  }
  for (SwapSpace* space : {sharded->param_swap(), opt.swap()}) {
    if (space != nullptr) log.Line(absl::StrCat("NVMe ", space->ToString(), ": ", space->stats().ToString(), "\n"));
  }
  ZS_ASSIGN_OR_RETURN(Tensor peak, Tensor::Full({1}, static_cast<double>(s.peak_bytes), DType::kF32));
  ZS_RETURN_IF_ERROR(host.AllReduce(peak, ReduceOp::kMax));
  log.Line(absl::StrFormat("done: %d steps, %d tokens in %.1f s (%.0f tokens/s), final train loss %.6f, "
                           "peak memory per rank %s (max over ranks %s), comm_bytes_per_step %d\n",
                           o.steps - start_step, s.tokens, s.seconds, s.tokens / s.seconds,
                           s.losses.empty() ? 0.0 : s.losses.back(),
                           FormatBytes(s.peak_bytes), FormatBytes(static_cast<int64_t>(peak.Item().value())),
                           s.comm_bytes_per_step));
  if (lead && FiguresWanted() && !step_ms.empty()) {
    // Steady state: the median step after the first two (allocator and plan warm-up).
    std::vector<double> steady(step_ms.begin() + std::min<size_t>(2, step_ms.size() - 1), step_ms.end());
    std::nth_element(steady.begin(), steady.begin() + steady.size() / 2, steady.end());
    const double ms = steady[steady.size() / 2];
    const double tokens_per_s = tokens_per_step / (ms / 1000.0);
    const int64_t layers = llama ? llama_config->num_hidden_layers : o.model.n_layer;
    const int64_t width = llama ? llama_config->hidden_size : o.model.n_embd;
    EmitFigure("train_gpt", absl::StrCat("tokens/s ", llama ? "llama " : "", layers, "x", width, " T",
                                         o.model.block_size, " batch ", o.batch_size, " x", comm.size(), " ",
                                         comm.size() > 1 ? "ranks" : "rank"),
               tokens_per_s, "tokens/s",
               {{"ms_per_step", ms}, {"first_step_ms", step_ms.front()},
                {"flops_per_token", flops_per_token}, {"model_tflops", flops_per_token * tokens_per_s / 1e12},
                {"params", static_cast<double>(gpt->NumParameters())}, {"steps", static_cast<double>(step_ms.size())},
                {"first_loss", s.losses.front()}, {"final_loss", s.losses.back()},
                {"final_val_loss", s.final_val_loss}, {"peak_bytes", static_cast<double>(s.peak_bytes)},
                {"cuda_mallocs_per_step", s.cuda_mallocs_per_step},
                {"host_syncs_per_step", s.host_syncs_per_step},
                {"rate_limiter_waits_per_step", s.rate_limiter_waits_per_step},
                {"bias_grad_fallbacks", static_cast<double>(s.bias_grad_fallbacks)},
                {"gelu_epilogue_fallbacks", static_cast<double>(s.gelu_epilogue_fallbacks)},
                {"attention_cudnn", static_cast<double>(s.attention_cudnn)},
                {"attention_tensor_core", static_cast<double>(s.attention_tensor_core)},
                {"attention_scalar", static_cast<double>(s.attention_scalar)},
                {"head_dim", static_cast<double>(o.model.n_embd / o.model.n_head)}},
               "tokens/s and ms/step: the median step after the first two, per rank");
  }
  if (summary != nullptr && lead) *summary = s;
  return absl::OkStatus();
}

}  // namespace zeroshard
