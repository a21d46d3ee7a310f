// Training-step benchmark: step time, tokens/s and per-rank peak memory of a
// GPT (by default n_layer 4, n_head 4, n_embd 256, block 128, batch 8 per
// rank, vocab 256, fp32, AdamW), or with --model=llama a Llama of the same
// sizes (--n_kv_head, --intermediate_size), for each sharding strategy and world size,
// beside the single-rank unsharded step of the same global batch, and the
// fraction of step time a rank spends waiting for communication (exposed,
// not overlapped). Checks that every configuration's first-step loss equals
// the unsharded one (within 1e-5) before timing.
//
// Memory columns, per rank:
//   zero      the ZeRO paper's model-state bytes for fp32 Adam (16 bytes per
//             parameter Psi: 4 param + 4 grad + 8 moments): FULL_SHARD (stage 3)
//             16 Psi/N, SHARD_GRAD_OP (stage 2) 4 Psi + 12 Psi/N, SHARD_OPTIMIZER
//             (stage 1) 8 Psi + 8 Psi/N, NO_SHARD (DDP) 16 Psi;
//             the unsharded row 16 Psi
//   plan      ShardedModel::Plan(): sharded params + grads + optimizer state +
//             the gathered-buffer peak (our layout, padding included)
//   peak      the rank allocator's measured peak (adds activations and temporaries)
// Rows run --repeats times, interleaved (every configuration once, then again);
// ms/step is the median over the repeats. The timed steps run untraced, as
// the unsharded ones do; "exposed" is measured on --traced_steps more steps
// (the trace records every op and collective, which costs time of its own).
//
//   bazel run -c opt //bench:step_bench -- --steps=10 --world_sizes=1,2,4 --repeats=3
//   bazel run -c opt //bench:step_bench -- --model=llama --n_kv_head=2
//
// The peer (the same step in Debian's libtorch) is `make bench-peers`.
//
// --json_out=<file>: the figures as data too (bench/bench_json.h; the table is
// unchanged), per row "step/<model>/<strategy>_world<N>/" (strategy lower case;
// the baseline row "unsharded_world1") followed by
//   ms_per_step       ms, one value per repeat, beside the unsharded row's
//   peak_mib          the rank allocator's peak, MiB (the last repeat)
//   exposed_comm_pct  % of the step waiting on collectives (the last repeat; sharded rows)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/bench/load_average.h"
#include "zeroshard/bench/robust_stats.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/trace.h"

ABSL_FLAG(std::string, model, "gpt", "gpt or llama");
ABSL_FLAG(int64_t, n_kv_head, 0, "llama: key/value heads (0: n_head)");
ABSL_FLAG(int64_t, intermediate_size, 0, "llama: SwiGLU width (0: 8/3 n_embd rounded up to 64)");
ABSL_FLAG(int64_t, n_layer, 4, "");
ABSL_FLAG(int64_t, n_head, 4, "");
ABSL_FLAG(int64_t, n_embd, 256, "");
ABSL_FLAG(int64_t, block_size, 128, "");
ABSL_FLAG(int64_t, vocab_size, 256, "");
ABSL_FLAG(int64_t, batch_size, 8, "global batch rows (split over ranks)");
ABSL_FLAG(int, steps, 6, "timed steps");
ABSL_FLAG(int, warmup, 2, "untimed steps");
ABSL_FLAG(int, traced_steps, 2, "traced steps after the timed ones, for the exposed-communication column (0: none)");
ABSL_FLAG(std::string, world_sizes, "1,2,4", "");
ABSL_FLAG(std::string, strategies, "FULL_SHARD,SHARD_GRAD_OP,SHARD_OPTIMIZER,NO_SHARD", "");
ABSL_FLAG(int, repeats, 1, "interleaved runs of every configuration (median ms/step)");
ABSL_FLAG(std::string, data, "data/tinyshakespeare.txt", "");

namespace zeroshard {
namespace {

using autograd::Variable;

using bench::LoadAverage;
using bench::Median;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Figures {
  double ms_per_step = 0;
  double first_loss = 0;
  int64_t peak_bytes = 0;
  int64_t plan_bytes = 0;   // ShardedModel::Plan().total() (sharded rows)
  int64_t num_params = 0;   // Psi
  double exposed_comm = 0;  // fraction of step time waiting on collectives
  // Rank 0's ms per timed step in forward, backward and the optimizer step
  // (with ZeroGrad on sharded rows): where a row's difference to the unsharded one is.
  double phase_ms[3] = {0, 0, 0};
};

// Accumulates the time since the previous mark into one of Figures::phase_ms.
struct PhaseClock {
  double* sums;
  bool on = false;
  double last = 0;
  void Start(bool timed, double now) { on = timed; last = now; }
  void Mark(int phase, double now) {
    if (on) sums[phase] += (now - last) * 1000;
    last = now;
  }
};

// The ZeRO paper's model-state bytes per rank for fp32 Adam (K = 8): 16 Psi in all.
int64_t ZeroFormulaBytes(int64_t psi, int world, const ShardingStrategy* strategy) {
  if (strategy == nullptr || *strategy == ShardingStrategy::kNoShard) return 16 * psi;
  if (*strategy == ShardingStrategy::kShardGradOp) return 4 * psi + 12 * psi / world;
  if (*strategy == ShardingStrategy::kShardOptimizer) return 8 * psi + 8 * psi / world;
  return 16 * psi / world;
}

nn::GptConfig Config() {
  return nn::GptConfig{.vocab_size = absl::GetFlag(FLAGS_vocab_size), .block_size = absl::GetFlag(FLAGS_block_size),
                       .n_layer = absl::GetFlag(FLAGS_n_layer), .n_head = absl::GetFlag(FLAGS_n_head),
                       .n_embd = absl::GetFlag(FLAGS_n_embd)};
}

nn::LlamaConfig LlamaConfigOf(const nn::GptConfig& g) {
  const int64_t kv = absl::GetFlag(FLAGS_n_kv_head), f = absl::GetFlag(FLAGS_intermediate_size);
  return nn::LlamaConfig{.vocab_size = g.vocab_size, .hidden_size = g.n_embd,
                         .intermediate_size = f > 0 ? f : (8 * g.n_embd / 3 + 63) / 64 * 64,
                         .num_hidden_layers = g.n_layer, .num_attention_heads = g.n_head,
                         .num_key_value_heads = kv > 0 ? kv : g.n_head, .max_position_embeddings = g.block_size,
                         .rms_norm_eps = 1e-5};
}

bool IsLlama() { return absl::GetFlag(FLAGS_model) == "llama"; }

// The benchmarked model, shapes only.
std::shared_ptr<nn::CausalLm> MakeModel() {
  if (IsLlama()) return std::make_shared<nn::Llama>(LlamaConfigOf(Config()));
  return std::make_shared<nn::Gpt>(Config());
}

// The baseline: one rank, the plain module, one AdamW state per parameter.
absl::StatusOr<Figures> Unsharded(const TokenData& data) {
  CpuAllocator device(CpuAllocator::Options{.name = "unsharded"});
  std::shared_ptr<nn::CausalLm> gpt = MakeModel();
  ZS_RETURN_IF_ERROR(gpt->Materialize(1, &device));
  auto params = gpt->NamedParameters();
  std::vector<optim::AdamWState> states;
  for (auto& [n, v] : params) {
    ZS_ASSIGN_OR_RETURN(optim::AdamWState s, optim::AdamWState::Create(v.numel(), &device));
    states.push_back(std::move(s));
  }
  Figures f;
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  double t0 = 0;
  PhaseClock clock{f.phase_ms};
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) t0 = Now();
    for (auto& [n, v] : params) v.reset_grad();
    ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .batch_size = absl::GetFlag(FLAGS_batch_size),
                                                .block_size = Config().block_size}, &device));
    clock.Start(step >= warmup, Now());
    ZS_ASSIGN_OR_RETURN(nn::LmOutput out, gpt->Forward(b.inputs, b.targets));
    if (step == 0) f.first_loss = out.loss.value().Item().value();
    clock.Mark(0, Now());
    ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
    clock.Mark(1, Now());
    for (size_t i = 0; i < params.size(); ++i) {
      const Variable& v = params[i].second;
      ZS_RETURN_IF_ERROR(optim::AdamWStep({.beta2 = 0.95}, {optim::ParamGroup::Whole(v.numel(), 6e-4, v.dim() >= 2 ? 0.1 : 0.0)},
                                          v.value(), v.grad(), states[i]));
    }
    clock.Mark(2, Now());
  }
  f.ms_per_step = (Now() - t0) * 1000 / steps;
  for (double& p : f.phase_ms) p /= steps;
  f.peak_bytes = device.stats().peak_bytes_in_use;
  for (auto& [n, v] : params) f.num_params += v.numel();
  return f;
}

absl::StatusOr<Figures> Sharded(const TokenData& data, int world, ShardingStrategy strategy) {
  Figures f;
  std::mutex mu;
  const int64_t per_rank = absl::GetFlag(FLAGS_batch_size) / world;
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
    std::shared_ptr<nn::CausalLm> gpt = MakeModel();
    ShardingOptions o;
    o.strategy = strategy;
    o.wrap = WrapPolicy::ByType({gpt->layer_type()});
    o.init_seed = 1;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o, &device));
    optim::OptimizerOptions oo{.lr = 6e-4, .weight_decay = 0.1};
    oo.adamw.beta2 = 0.95;
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, oo));
    // The timed steps run untraced, as a user's would (tracing records every
    // op); exposed communication comes from `traced` more steps after them.
    TraceRecorder trace;
    const int traced = absl::GetFlag(FLAGS_traced_steps);
    double t0 = 0, elapsed = 0, traced_start = 0;
    double phase_ms[3] = {0, 0, 0};
    PhaseClock clock{phase_ms};
    for (int step = 0; step < warmup + steps + traced; ++step) {
      if (step == warmup) t0 = Now();
      if (step == warmup + steps) {
        ZS_RETURN_IF_ERROR(comm.Barrier());
        elapsed = Now() - t0;
        traced_start = Now();
        sharded->set_trace(&trace);
      }
      ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = world,
                                                  .batch_size = per_rank, .block_size = Config().block_size},
                                                 &device));
      clock.Start(step >= warmup && step < warmup + steps && comm.rank() == 0, Now());
      ZS_ASSIGN_OR_RETURN(nn::LmOutput out, gpt->Forward(b.inputs, b.targets));
      if (step == 0) {
        ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, out.loss.value().Item().value(), DType::kF32));
        ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
        if (comm.rank() == 0) f.first_loss = l.Item().value();
      }
      clock.Mark(0, Now());
      ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
      clock.Mark(1, Now());
      ZS_RETURN_IF_ERROR(opt.Step(6e-4));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      clock.Mark(2, Now());
    }
    ZS_RETURN_IF_ERROR(comm.Barrier());
    if (traced == 0) elapsed = Now() - t0;
    const double traced_seconds = Now() - traced_start;
    sharded->set_trace(nullptr);
    std::lock_guard<std::mutex> lock(mu);
    f.ms_per_step = std::max(f.ms_per_step, elapsed * 1000 / steps);
    if (comm.rank() == 0) {
      for (int p = 0; p < 3; ++p) f.phase_ms[p] = phase_ms[p] / steps;
    }
    f.peak_bytes = std::max(f.peak_bytes, device.stats().peak_bytes_in_use);
    f.plan_bytes = std::max(f.plan_bytes, sharded->Plan().total());
    if (traced > 0) f.exposed_comm = std::max(f.exposed_comm, trace.TotalUs("wait") / 1e6 / traced_seconds);
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) ZS_RETURN_IF_ERROR(s);
  return f;
}

int Main(const std::string& json_out) {
  absl::StatusOr<TokenData> data = TokenData::Load(absl::GetFlag(FLAGS_data));
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_model) != "gpt" && !IsLlama()) {
    std::fprintf(stderr, "--model: expected gpt or llama, found \"%s\"\n", absl::GetFlag(FLAGS_model).c_str());
    return 1;
  }
  const nn::GptConfig c = Config();
  if (IsLlama()) {
    if (absl::Status v = LlamaConfigOf(c).Validate(); !v.ok()) {
      std::fprintf(stderr, "%s\n", v.ToString().c_str());
      return 1;
    }
  }
  const int64_t tokens = absl::GetFlag(FLAGS_batch_size) * c.block_size;
  std::printf("step_bench: %s, global batch %d x %d tokens, %d timed steps after %d warmup\n",
              (IsLlama() ? LlamaConfigOf(c).ToString() : c.ToString()).c_str(), absl::GetFlag(FLAGS_batch_size), c.block_size, absl::GetFlag(FLAGS_steps),
              absl::GetFlag(FLAGS_warmup));
  struct Row {
    std::string name;
    int world = 1;
    std::optional<ShardingStrategy> strategy;  // none: the unsharded baseline
    std::vector<double> ms;
    std::vector<double> phase_ms[3];  // per repeat
    Figures last;
  };
  std::vector<Row> rows = {{.name = "unsharded"}};
  for (absl::string_view sname : absl::StrSplit(absl::GetFlag(FLAGS_strategies), ',')) {
    absl::StatusOr<ShardingStrategy> strategy = ParseShardingStrategy(sname);
    if (!strategy.ok()) {
      std::fprintf(stderr, "%s\n", strategy.status().ToString().c_str());
      return 1;
    }
    for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_world_sizes), ',')) {
      int world = 1;
      if (!absl::SimpleAtoi(w, &world) || world < 1) {
        std::fprintf(stderr, "--world_sizes: expected positive integers, found \"%s\"\n", std::string(w).c_str());
        return 1;
      }
      rows.push_back({.name = std::string(sname), .world = world, .strategy = *strategy});
    }
  }
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  for (int r = 0; r < repeats; ++r) {
    for (Row& row : rows) {
      absl::StatusOr<Figures> f = row.strategy ? Sharded(*data, row.world, *row.strategy) : Unsharded(*data);
      if (!f.ok()) {
        std::fprintf(stderr, "%s world %d: %s\n", row.name.c_str(), row.world, f.status().ToString().c_str());
        return 1;
      }
      row.ms.push_back(f->ms_per_step);
      row.last = *f;
      for (int p = 0; p < 3; ++p) row.phase_ms[p].push_back(f->phase_ms[p]);
    }
  }
  const Figures& base = rows[0].last;
  const double base_ms = Median(rows[0].ms);
  std::printf("%-16s %5s %10s %10s %9s %11s %11s %11s %8s %17s  %s\n", "strategy", "world", "ms/step", "tokens/s",
              "vs base", "zero", "plan", "peak", "exposed", "fwd/bwd/opt ms", "first loss");
  int bad = 0;
  for (const Row& row : rows) {
    const Figures& f = row.last;
    const double ms = Median(row.ms);
    const bool ok = std::fabs(f.first_loss - base.first_loss) <= 1e-5 * std::fabs(base.first_loss);
    bad += !ok;
    const ShardingStrategy* st = row.strategy ? &*row.strategy : nullptr;
    const std::string phases = absl::StrFormat("%.1f/%.1f/%.1f", Median(row.phase_ms[0]), Median(row.phase_ms[1]),
                                               Median(row.phase_ms[2]));
    std::printf("%-16s %5d %10.1f %10.0f %8.2fx %11s %11s %11s %8s %17s  %.7f%s\n", row.name.c_str(), row.world, ms,
                tokens / (ms / 1000), base_ms / ms,
                FormatBytes(ZeroFormulaBytes(base.num_params, row.world, st)).c_str(),
                row.strategy ? FormatBytes(f.plan_bytes).c_str() : "-", FormatBytes(f.peak_bytes).c_str(),
                row.strategy ? absl::StrFormat("%.1f%%", 100 * f.exposed_comm).c_str() : "-", phases.c_str(),
                f.first_loss,
                ok ? "" : "  MISMATCH");
  }
  std::printf("parameters Psi = %lld; ms/step is the median of %d interleaved run(s); load average %s\n",
              static_cast<long long>(base.num_params), repeats, LoadAverage().c_str());
  if (!json_out.empty()) {
    bench::JsonReport report("step_bench");
    const std::string model = IsLlama() ? "llama" : "gpt";
    const std::string base_name = absl::StrCat("step/", model, "/unsharded_world1/ms_per_step");
    for (const Row& row : rows) {
      const std::string prefix =
          absl::StrCat("step/", model, "/", absl::AsciiStrToLower(row.name), "_world", row.world, "/");
      report.Add(prefix + "ms_per_step", "ms", /*higher_is_better=*/false, row.ms,
                 row.strategy ? base_name : "");
      report.Add(prefix + "peak_mib", "MiB", false, {row.last.peak_bytes / 1048576.0});
      if (row.strategy) report.Add(prefix + "exposed_comm_pct", "%", false, {100 * row.last.exposed_comm});
    }
    if (absl::Status st = report.Write(json_out); !st.ok()) {
      std::fprintf(stderr, "step_bench: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  const std::string json_out = zeroshard::bench::TakeJsonOutFlag(&argc, argv);  // before flag parsing
  absl::ParseCommandLine(argc, argv);
  return zeroshard::Main(json_out);
}
