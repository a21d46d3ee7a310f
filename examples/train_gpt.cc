// The main job: trains a GPT on a text (bytes) or token (.bin) file with
// sharded data parallelism over in-process ranks or MPI processes.
//
//   bazel run -c opt //examples:train_gpt -- --world_size=4 --steps=200
//   mpirun -np 2 bazel-bin/examples/train_gpt --backend=mpi
//
// Prints one line per logged step: "step <n> loss <loss> lr <lr> <ms> ms/step
// <n> tokens/s", validation losses beside the corpus's unigram entropy, a
// generated sample and a summary. Flags (defaults in examples/trainer.h):
// model --n_layer --n_head --n_embd --block_size --vocab_size --dropout;
// data --data --batch_size (per rank) --grad_accum_steps --accumulate;
// optimisation --steps --optimizer --lr --min_lr --warmup_steps --lr_schedule
// --weight_decay --beta1 --beta2 --grad_clip --seed; sharding --world_size
// --backend --sharding_strategy --hybrid_shard_size --auto_wrap
// --forward_prefetch --backward_prefetch --limit_all_gathers
// --activation_checkpointing; I/O --init_from --save --log_every --eval_every
// --eval_iters --sample_tokens --temperature --top_k.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/local_communicator.h"
#include "collectives/mpi_communicator.h"
#include "examples/trainer.h"
#include "runtime/status.h"

ABSL_FLAG(int64_t, n_layer, 4, "transformer blocks");
ABSL_FLAG(int64_t, n_head, 4, "attention heads");
ABSL_FLAG(int64_t, n_embd, 128, "model width");
ABSL_FLAG(int64_t, block_size, 64, "context length T");
ABSL_FLAG(int64_t, vocab_size, 256, "vocabulary (256 for byte-level text)");
ABSL_FLAG(double, dropout, 0.0, "embedding and residual dropout");
ABSL_FLAG(std::string, data, "data/tinyshakespeare.txt", "text file (bytes) or .bin of uint16 tokens");
ABSL_FLAG(int64_t, batch_size, 8, "rows per rank per micro-step");
ABSL_FLAG(int64_t, grad_accum_steps, 1, "micro-steps per optimizer step");
ABSL_FLAG(std::string, accumulate, "sharded", "gradient accumulation: sharded (reduce-scatter every micro-step) or no_sync");
ABSL_FLAG(int64_t, steps, 200, "optimizer steps");
ABSL_FLAG(std::string, optimizer, "adamw", "adamw, adam or sgd");
ABSL_FLAG(double, lr, 1e-3, "peak learning rate");
ABSL_FLAG(double, min_lr, 1e-4, "learning rate at the end of decay");
ABSL_FLAG(int64_t, warmup_steps, 20, "linear warmup steps");
ABSL_FLAG(std::string, lr_schedule, "cosine", "constant, cosine or linear");
ABSL_FLAG(double, weight_decay, 0.1, "decoupled weight decay on 2-D weights");
ABSL_FLAG(double, beta1, 0.9, "Adam beta1 (SGD momentum)");
ABSL_FLAG(double, beta2, 0.95, "Adam beta2");
ABSL_FLAG(double, grad_clip, 1.0, "max global gradient norm (0: off)");
ABSL_FLAG(uint64_t, seed, 1337, "initialisation, dropout and sampling seed");
ABSL_FLAG(int, world_size, 4, "in-process ranks (--backend=local)");
ABSL_FLAG(std::string, backend, "local", "local (threads) or mpi (one rank per process under mpirun)");
ABSL_FLAG(std::string, sharding_strategy, "FULL_SHARD", "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
ABSL_FLAG(int, hybrid_shard_size, 0, "ranks per shard group for HYBRID_SHARD");
ABSL_FLAG(std::string, auto_wrap, "block", "block, size:<min_num_params> or none");
ABSL_FLAG(bool, forward_prefetch, false, "prefetch the next unit's all-gather in forward");
ABSL_FLAG(std::string, backward_prefetch, "pre", "pre, post or none");
ABSL_FLAG(int, limit_all_gathers, 2, "gathered units in flight (0: unlimited)");
ABSL_FLAG(bool, activation_checkpointing, false, "recompute each block in backward");
ABSL_FLAG(std::string, init_from, "", "start from these weights (.safetensors, nanoGPT names)");
ABSL_FLAG(std::string, save, "", "write the trained weights (.safetensors, nanoGPT names)");
ABSL_FLAG(int64_t, log_every, 10, "print every n steps");
ABSL_FLAG(int64_t, eval_every, 100, "validation loss every n steps (0: only at the end)");
ABSL_FLAG(int64_t, eval_iters, 10, "validation batches per evaluation");
ABSL_FLAG(int64_t, sample_tokens, 200, "tokens to generate at the end");
ABSL_FLAG(double, temperature, 0.8, "sampling temperature");
ABSL_FLAG(int64_t, top_k, 40, "sample among the k most likely tokens");
ABSL_FLAG(int64_t, device_memory_limit, 0, "bytes per rank (0: unlimited)");
ABSL_FLAG(std::string, offload, "none", "CPU offload: none, optimizer (state, master weights, gradients) or params_and_optimizer");
ABSL_FLAG(std::string, param_dtype, "f32", "dtype of gathered parameters and compute: f32, bf16 or f16");
ABSL_FLAG(std::string, reduce_dtype, "f32", "dtype of gradient reduction: f32, bf16 or f16");
ABSL_FLAG(std::string, loss_scale, "auto", "fp16 loss scaling: dynamic, none, or auto (dynamic when param_dtype is f16)");
ABSL_FLAG(int, initial_scale_power, 16, "initial loss scale 2^n");
ABSL_FLAG(int64_t, loss_scale_window, 1000, "clean steps before the scale grows");
ABSL_FLAG(int, hysteresis, 2, "overflows tolerated before the scale drops");
ABSL_FLAG(double, min_loss_scale, 1.0, "the scale never drops below this");
ABSL_FLAG(std::string, work_dir, "", "where checkpoints go (work_dir/step-<n>)");
ABSL_FLAG(int64_t, save_every, 0, "save a checkpoint every n steps (0: never)");
ABSL_FLAG(std::string, state_dict_type, "sharded", "checkpoint format: sharded (each rank its own file) or full (PyTorch-loadable)");
ABSL_FLAG(bool, async_save, false, "write checkpoints in the background (training blocks only for a snapshot)");
ABSL_FLAG(int, keep_last, 0, "keep only the newest n checkpoints (0: all)");
ABSL_FLAG(std::string, resume, "", "auto (newest complete checkpoint under --work_dir) or a checkpoint directory");
ABSL_FLAG(std::string, trace, "", "write a Chrome trace (Perfetto) of a few steps to this file");
ABSL_FLAG(int64_t, trace_from, 2, "first traced step");
ABSL_FLAG(int64_t, trace_steps, 2, "traced steps");

namespace zeroshard {
namespace {

absl::StatusOr<TrainOptions> OptionsFromFlags() {
  TrainOptions o;
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.n_embd = absl::GetFlag(FLAGS_n_embd);
  o.model.block_size = absl::GetFlag(FLAGS_block_size);
  o.model.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.model.dropout = absl::GetFlag(FLAGS_dropout);
  o.model.activation_checkpointing = absl::GetFlag(FLAGS_activation_checkpointing);
  if (o.model.n_embd % o.model.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--n_embd ", o.model.n_embd,
                                                   " must be a multiple of --n_head ", o.model.n_head));
  }
  o.data = absl::GetFlag(FLAGS_data);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.grad_accum_steps = absl::GetFlag(FLAGS_grad_accum_steps);
  const std::string acc = absl::GetFlag(FLAGS_accumulate);
  if (acc != "sharded" && acc != "no_sync") {
    return absl::InvalidArgumentError(absl::StrCat("--accumulate=", acc, ": expected sharded or no_sync"));
  }
  o.no_sync = acc == "no_sync";
  o.steps = absl::GetFlag(FLAGS_steps);
  ZS_ASSIGN_OR_RETURN(o.optimizer.kind, optim::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer)));
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.adamw.beta1 = absl::GetFlag(FLAGS_beta1);
  o.optimizer.adamw.beta2 = absl::GetFlag(FLAGS_beta2);
  o.optimizer.sgd.momentum = absl::GetFlag(FLAGS_beta1);
  ZS_ASSIGN_OR_RETURN(o.lr.kind, optim::ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule)));
  o.lr.lr = absl::GetFlag(FLAGS_lr);
  o.lr.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.lr.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.lr.decay_steps = std::max(o.steps, o.lr.warmup_steps);
  o.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.save = absl::GetFlag(FLAGS_save);
  o.log_every = std::max<int64_t>(1, absl::GetFlag(FLAGS_log_every));
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_iters = absl::GetFlag(FLAGS_eval_iters);
  o.sample_tokens = absl::GetFlag(FLAGS_sample_tokens);
  o.temperature = absl::GetFlag(FLAGS_temperature);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.device_memory_limit = absl::GetFlag(FLAGS_device_memory_limit);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.save_every = absl::GetFlag(FLAGS_save_every);
  o.state_dict_type = absl::GetFlag(FLAGS_state_dict_type);
  o.async_save = absl::GetFlag(FLAGS_async_save);
  o.keep_last = absl::GetFlag(FLAGS_keep_last);
  o.resume = absl::GetFlag(FLAGS_resume);
  if ((o.save_every > 0 || o.resume == "auto") && o.work_dir.empty()) {
    return absl::InvalidArgumentError("--save_every and --resume=auto need --work_dir");
  }
  o.trace = absl::GetFlag(FLAGS_trace);
  o.trace_from = absl::GetFlag(FLAGS_trace_from);
  o.trace_steps = absl::GetFlag(FLAGS_trace_steps);
  ShardingOptions& s = o.sharding;
  const std::string offload = absl::GetFlag(FLAGS_offload);
  if (offload == "optimizer") {
    s.offload = OffloadPolicy{.grads = true, .optimizer = true};
  } else if (offload == "params_and_optimizer") {
    s.offload = OffloadPolicy{.params = true, .grads = true, .optimizer = true};
  } else if (offload != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--offload=", offload,
                                                   ": expected none, optimizer or params_and_optimizer"));
  }
  ZS_ASSIGN_OR_RETURN(s.mixed_precision.param_dtype, ParseDType(absl::GetFlag(FLAGS_param_dtype)));
  ZS_ASSIGN_OR_RETURN(s.mixed_precision.reduce_dtype, ParseDType(absl::GetFlag(FLAGS_reduce_dtype)));
  const std::string ls = absl::GetFlag(FLAGS_loss_scale);
  if (ls != "auto" && ls != "dynamic" && ls != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--loss_scale=", ls, ": expected auto, dynamic or none"));
  }
  o.loss_scaling = ls == "dynamic";
  if (ls == "none" && s.mixed_precision.param_dtype == DType::kF16) {
    return absl::InvalidArgumentError("--loss_scale=none with --param_dtype=f16: fp16 training needs loss scaling");
  }
  o.loss_scaler.initial_scale_power = absl::GetFlag(FLAGS_initial_scale_power);
  o.loss_scaler.scale_window = absl::GetFlag(FLAGS_loss_scale_window);
  o.loss_scaler.hysteresis = absl::GetFlag(FLAGS_hysteresis);
  o.loss_scaler.min_scale = absl::GetFlag(FLAGS_min_loss_scale);
  ZS_ASSIGN_OR_RETURN(s.strategy, ParseShardingStrategy(absl::GetFlag(FLAGS_sharding_strategy)));
  s.hybrid_shard_size = absl::GetFlag(FLAGS_hybrid_shard_size);
  const std::string wrap = absl::GetFlag(FLAGS_auto_wrap);
  int64_t min_params = 0;
  if (wrap == "block") {
    s.wrap = WrapPolicy::ByType({"Block"});
  } else if (wrap == "none") {
    s.wrap = WrapPolicy::None();
  } else if (absl::StartsWith(wrap, "size:") && absl::SimpleAtoi(wrap.substr(5), &min_params)) {
    s.wrap = WrapPolicy::BySize(min_params);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--auto_wrap=", wrap, ": expected block, size:<n> or none"));
  }
  s.forward_prefetch = absl::GetFlag(FLAGS_forward_prefetch);
  ZS_ASSIGN_OR_RETURN(s.backward_prefetch, ParseBackwardPrefetch(absl::GetFlag(FLAGS_backward_prefetch)));
  s.limit_all_gathers = absl::GetFlag(FLAGS_limit_all_gathers);
  return o;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "train_gpt: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  using namespace zeroshard;
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<TrainOptions> options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend == "mpi") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    absl::Status status;
    {
      absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(MPI_COMM_WORLD);
      status = comm.ok() ? options->sharding.Validate((*comm)->size()) : comm.status();
      if (status.ok()) status = RunTraining(*options, **comm);
    }
    MPI_Finalize();
    return status.ok() ? 0 : Fail(status);
  }
  if (backend != "local") return Fail(absl::InvalidArgumentError(absl::StrCat("--backend=", backend, ": expected local or mpi")));
  const int world = absl::GetFlag(FLAGS_world_size);
  if (absl::Status s = options->sharding.Validate(world); !s.ok()) return Fail(s);
  TraceRecorder trace;  // one recorder for every in-process rank
  if (!options->trace.empty()) options->shared_trace = &trace;
  std::vector<absl::Status> statuses =
      RunRanks(world, [&](Communicator& comm) { return RunTraining(*options, comm); });
  int rc = 0;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      std::fprintf(stderr, "rank %zu: %s\n", r, statuses[r].ToString().c_str());
      rc = 1;
    }
  }
  return rc;
}
