#include "zeroshard/train/config_schema.h"

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/train/config_custom.h"
#include "zeroshard/train/config_schema_builder.h"
#include "zeroshard/train/deepspeed_config.h"

namespace zeroshard {
namespace config_schema_internal {
namespace {

// The field table in its order (the order of docs/config.md and of the
// resolved JSON); the strategy rows are in config_schema_strategy.cc.
std::vector<ConfigField> MakeFields() {
  const Range unit_open{.min = 0, .max = 1, .max_open = true};
  std::vector<ConfigField> t = {
      // ---------------------------------------------------------------- top level
      std::move(Str("description").Set([](RunConfig& c, const Json& v) {
        if (!v.get<std::string>().empty()) c.notes.insert(c.notes.begin(), v.get<std::string>());
      }).Get([](const RunConfig&) { return OJson(""); }).NotWritten().Example("\"a run\"")
          .Help("printed at the start (the first note)")),
      std::move(Str("experiment_name").Ref([](auto& c) -> auto& { return c.experiment_name; })
          .Check([](Section& s, const std::string& key, RunConfig* c) {
            if (c->experiment_name.empty() || absl::StrContains(c->experiment_name, "/")) {
              s.Add(key, absl::StrCat("expected a non-empty name without '/', found \"", c->experiment_name, "\""));
            }
          })
          .Help("the run's name (default: the config file's stem); runs go to work_dir/experiment_name/")),
      std::move(Str("work_dir").Ref([](auto& c) -> auto& { return c.work_dir; }).Peer("MMEngine work_dir")
          .Flag("work_dir", "runs go to work_dir/experiment_name/<YYYYmmdd_HHMMSS>/, checkpoints to "
                            "work_dir/experiment_name/step-<n>/ (\"\": nowhere)")
          .Help("runs go to work_dir/experiment_name/<YYYYmmdd_HHMMSS>/, checkpoints beside them in "
                "work_dir/experiment_name/step-<n>/ (\"\": no run folder)")),
      // ---------------------------------------------------------------- distributed
      Sec("distributed", "the ranks"),
      std::move(Int("distributed.world_size", 1, 4096).Ref([](auto& c) -> auto& { return c.world_size; })
          .Flag("world_size", "in-process ranks (--backend=local)")
          .Help("ranks (in-process; mpirun decides under mpi)").Example("2")),
      // Any backend registered by name (collectives/backend_registry.h), checked
      // when the config is validated, so a backend linked in from outside counts.
      std::move(Str("distributed.backend").Get([](const RunConfig& c) { return OJson(c.backend); })
          .Set([](RunConfig& c, const Json& v) { c.backend = absl::AsciiStrToLower(v.get<std::string>()); })
          .Check([](Section& s, const std::string& key, RunConfig* c) {
            if (absl::StatusOr<BackendInfo> b = BackendRegistry::Global().Find(c->backend); !b.ok()) {
              s.Add(key, absl::StrCat("expected a registered backend (", BackendRegistry::Global().NamesText(),
                                      "), found \"", c->backend, "\""));
            }
          })
          .Allowed("a registered backend: \"local\" | \"mpi\" | \"nccl\" built in, or one registered by "
                   "code linked into the program")
          .Example("\"mpi\"")
          .Flag("backend", "a registered backend: local (threads), mpi (one rank per process under mpirun), nccl "
                           "(one thread per GPU, cuda:0 .. cuda:world_size-1; or one process per GPU under mpirun, "
                           "srun or a torchrun-style launch, docs/launch.md), or one linked into the program")
          .Help("local: threads; mpi: one rank per process under mpirun; nccl: one thread per GPU, or one process "
                "per GPU under mpirun, srun or a torchrun-style launch (docs/launch.md); or any "
                "backend registered by name (collectives/backend_registry.h)")),
      std::move(Num("distributed.timeout_s", Above(0)).Ref([](auto& c) -> auto& { return c.timeout_s; })
          .Peer("torch.distributed.init_process_group timeout")
          .Flag("timeout_s", "seconds a rank waits for its peers in one collective before it fails (DeadlineExceeded)")
          .Help("seconds a rank waits for its peers in one collective before it fails with DeadlineExceeded "
                "naming the ranks that did not arrive; the timeout of every communicator the job creates "
                "(in-process, MPI, NCCL), printed at the start")
          .Example("60")),
      // ---------------------------------------------------------------- model
      Sec("model", "the network: the GPT, with type \"llama\" a Llama, or with type \"resnet\" the vision job's ResNet"),
      std::move(Choice("model.type", {"gpt", "llama", "resnet"}).Get([](const RunConfig& c) { return OJson(c.model_type); })
          .Set([](RunConfig& c, const Json& v) {
            c.model_type = v.get<std::string>();
            // gpt and llama are the language-model job (RunTraining); the keys it reads are the same.
            c.train.model_type = c.model_type == "llama" ? "llama" : "gpt";
            // The vision job (ResNetTrainOptions); train.sharding holds its strategy too.
            if (IsResNet(c)) c.train.sharding.wrap = WrapPolicy::ByType({"BasicBlock"});
            if (c.model_type == "llama") c.train.sharding.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
          })
          .Flag("model", "gpt, llama (sizes from --init_from=HF_DIR/config.json when given) or resnet")
          .Help("gpt: RunTraining on a text (nanoGPT's GPT-2); llama: the same job with a Llama (Hugging Face "
                "names; sizes from checkpoint.init_from's config.json when it is a model folder); resnet: "
                "RunResNetTraining on the generated ShapesData set")),
      std::move(Int("model.vocab_size", 1).Ref([](auto& c) -> auto& { return c.train.model.vocab_size; }).Gpt()
          .Flag("vocab_size", "vocabulary (256 for byte-level text)").Help("vocabulary (256 for byte-level text)")),
      std::move(Int("model.block_size", 1).Ref([](auto& c) -> auto& { return c.train.model.block_size; }).Gpt()
          .Flag("block_size", "context length T").Help("context length T")),
      std::move(Int("model.n_layer", 1).Ref([](auto& c) -> auto& { return c.train.model.n_layer; }).Gpt()
          .Flag("n_layer", "transformer blocks").Help("transformer blocks")),
      std::move(Int("model.n_head", 1).Ref([](auto& c) -> auto& { return c.train.model.n_head; }).Gpt()
          .Flag("n_head", "attention heads").Help("attention heads (n_embd is a multiple of it)").Example("8")),
      std::move(Int("model.n_embd", 1).Ref([](auto& c) -> auto& { return c.train.model.n_embd; }).Gpt()
          .Flag("n_embd", "model width").Help("model width").Example("256")),
      std::move(Num("model.dropout", unit_open).Ref([](auto& c) -> auto& { return c.train.model.dropout; }).Gpt()
          .Flag("dropout", "embedding and residual dropout").Help("embedding and residual dropout")),
      std::move(Bool("model.bias").Ref([](auto& c) -> auto& { return c.train.model.bias; }).Gpt()
          .Help("biases in the linear layers and LayerNorms")),
      // Llama only (model.type "llama"; a Hugging Face folder's config.json overrides them all).
      std::move(Int("model.n_kv_head", 0).Ref([](auto& c) -> auto& { return c.train.llama.num_key_value_heads; }).Gpt()
          .Peer("LlamaConfig.num_key_value_heads")
          .Flag("n_kv_head", "llama: key/value heads, dividing n_head (1: multi-query; 0: n_head)")
          .Help("llama: key/value heads of grouped-query attention, a divisor of n_head (1: multi-query; 0: n_head)")
          .Example("2")),
      std::move(Int("model.intermediate_size", 0).Ref([](auto& c) -> auto& { return c.train.llama.intermediate_size; })
          .Gpt().Peer("LlamaConfig.intermediate_size")
          .Flag("intermediate_size", "llama: SwiGLU width (0: 8/3 n_embd rounded up to a multiple of 64)")
          .Help("llama: the SwiGLU MLP's width (0: 8/3 n_embd rounded up to a multiple of 64)").Example("352")),
      std::move(Int("model.max_position_embeddings", 0)
          .Ref([](auto& c) -> auto& { return c.train.llama.max_position_embeddings; }).Gpt()
          .Peer("LlamaConfig.max_position_embeddings")
          .Help("llama: the longest sequence the model is for (0: block_size)")),
      std::move(Num("model.rope_theta", Above(1)).Ref([](auto& c) -> auto& { return c.train.llama.rope_theta; }).Gpt()
          .Peer("LlamaConfig.rope_theta").Flag("rope_theta", "llama: rotary base")
          .Help("llama: the rotary embeddings' base").Example("500000")),
      std::move(Num("model.rms_norm_eps", Above(0)).Ref([](auto& c) -> auto& { return c.train.llama.rms_norm_eps; })
          .Gpt().Peer("LlamaConfig.rms_norm_eps").Help("llama: RMSNorm's epsilon")),
      std::move(Bool("model.tie_word_embeddings").Ref([](auto& c) -> auto& { return c.train.llama.tie_word_embeddings; })
          .Gpt().Peer("LlamaConfig.tie_word_embeddings")
          .Help("llama: lm_head.weight is model.embed_tokens.weight (the GPT always ties)")),
      std::move(Custom("model.widths", "list of int", "non-empty, each >= 1", config_internal::ReadIntList)
          .Ref([](auto& c) -> auto& { return c.resnet.model.widths; }).ResNet()
          .Help("channels of each stage").Example("[8, 16, 32, 64]")),
      std::move(Custom("model.depths", "list of int", "as many as widths, each >= 1", config_internal::ReadIntList)
          .Ref([](auto& c) -> auto& { return c.resnet.model.depths; }).ResNet()
          .Help("BasicBlocks of each stage").Example("[2, 1, 1, 1]")),
      std::move(Int("model.num_classes", ShapesData::kNumClasses).Ref([](auto& c) -> auto& {
        return c.resnet.model.num_classes; }).ResNet().Help("classifier outputs")),
      std::move(Choice("model.stem", {"cifar", "imagenet"}).ResNet()
          .Get([](const RunConfig& c) { return OJson(c.resnet.model.stem == nn::ResNetStem::kCifar ? "cifar" : "imagenet"); })
          .Set([](RunConfig& c, const Json& v) {
            c.resnet.model.stem = v == "cifar" ? nn::ResNetStem::kCifar : nn::ResNetStem::kImageNet;
          })
          .Help("cifar: one 3x3 convolution; imagenet: 7x7 stride 2 and a max pool")),
      std::move(Bool("model.zero_init_residual").Ref([](auto& c) -> auto& { return c.resnet.model.zero_init_residual; })
          .ResNet().Help("each block's last BatchNorm starts at zero")),
      // ---------------------------------------------------------------- data
      Sec("data", "the GPT's token file, or the vision job's generated ShapesData set"),
      std::move(Str("data.path").Ref([](auto& c) -> auto& { return c.train.data; }).Gpt()
          .Flag("data", "text file (bytes) or .bin of uint16 tokens").Help("text file (bytes) or .bin of uint16 tokens")),
      std::move(Choice("data.tokenizer", {"bytes", "gpt2"}).Ref([](auto& c) -> auto& { return c.train.tokenizer; }).Gpt()
          .Peer("nanoGPT prepare.py / llm.c tokenizer")
          .Flag("tokenizer", "how text becomes tokens and the sample becomes text: bytes or gpt2 (GPT-2 BPE, vocabulary 50257)")
          .Help("how a text file becomes tokens and the final sample becomes text: bytes (vocabulary 256) or gpt2 "
                "(GPT-2's byte-level BPE, vocabulary 50257: set model.vocab_size >= 50257); a .bin file is tokens either way")),
      std::move(Num("data.val_fraction", Range{.min = 0, .max = 1, .min_open = true, .max_open = true})
          .Ref([](auto& c) -> auto& { return c.train.val_fraction; }).Gpt().Help("the last part of the tokens kept for validation")),
      std::move(Int("data.image_size", 8).Ref([](auto& c) -> auto& { return c.resnet.data.image_size; }).ResNet()
          .Help("image side in pixels")),
      std::move(Int("data.train_size", 1).Ref([](auto& c) -> auto& { return c.resnet.data.train_size; }).ResNet()
          .Help("training images")),
      std::move(Int("data.val_size", 0).Ref([](auto& c) -> auto& { return c.resnet.data.val_size; }).ResNet()
          .Help("validation images")),
      std::move(Int("data.seed", 0).Ref([](auto& c) -> auto& { return c.resnet.data.seed; }).ResNet()
          .Help("the data set's seed")),
      std::move(Num("data.noise", unit_open).Ref([](auto& c) -> auto& { return c.resnet.data.noise; }).ResNet()
          .Help("uniform pixel noise amplitude")),
      // ---------------------------------------------------------------- train
      Sec("train", "the loop"),
      std::move(Int("train.steps", 1).Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.steps : c.train.steps; })
          .Flag("steps", "optimizer steps").Help("optimizer steps")),
      std::move(Int("train.batch_size", 1)
          .Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.batch_size : c.train.batch_size; })
          .Peer("DeepSpeed train_micro_batch_size_per_gpu").Flag("batch_size", "rows per rank per micro-step")
          .Help("rows (images) per rank per micro-step")),
      std::move(Int("train.grad_accum_steps", 1).Ref([](auto& c) -> auto& { return c.train.grad_accum_steps; }).Gpt()
          .Peer("DeepSpeed gradient_accumulation_steps").Flag("grad_accum_steps", "micro-steps per optimizer step")
          .Help("micro-steps per optimizer step")),
      std::move(Choice("train.accumulate", {"sharded", "no_sync"}).Gpt()
          .Get([](const RunConfig& c) { return OJson(c.train.no_sync ? "no_sync" : "sharded"); })
          .Set([](RunConfig& c, const Json& v) { c.train.no_sync = v == "no_sync"; }).Peer("FSDP no_sync()")
          .Flag("accumulate", "gradient accumulation: sharded (reduce-scatter every micro-step) or no_sync")
          .Help("sharded: reduce-scatter every micro-step; no_sync: accumulate unsharded gradients")),
      std::move(Num("train.grad_clip", AtLeast(0)).Ref([](auto& c) -> auto& { return c.train.grad_clip; }).Gpt()
          .Peer("DeepSpeed gradient_clipping").Flag("grad_clip", "max global gradient norm (0: off)")
          .Help("max global gradient norm (0: off)")),
      std::move(Int("train.seed", 0).Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.seed : c.train.seed; })
          .Flag("seed", "initialisation, dropout and sampling seed").Help("initialisation, dropout and sampling seed")),
      std::move(Int("train.log_every", 1)
          .Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.log_every : c.train.log_every; })
          .Peer("DeepSpeed steps_per_print")
          .Flag(Mapped("log_every", "print every n steps (below 1: 1)", false, "", "0", [](const std::string& v) {
            int64_t n = 1;
            return One(absl::StrCat("train.log_every=", absl::SimpleAtoi(v, &n) ? absl::StrCat(std::max<int64_t>(n, 1)) : v));
          }))
          .Help("print every n steps")),
      std::move(Int("train.eval_every", 0)
          .Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.eval_every : c.train.eval_every; })
          .Flag("eval_every", "validation loss every n steps (0: only at the end)")
          .Help("validation every n steps (0: only at the end)")),
      std::move(Int("train.eval_iters", 1).Ref([](auto& c) -> auto& { return c.train.eval_iters; }).Gpt()
          .Flag("eval_iters", "validation batches per evaluation").Help("validation batches per evaluation")),
      std::move(Int("train.device_memory_limit", 0).Ref([](auto& c) -> auto& { return c.train.device_memory_limit; })
          .Gpt().Flag("device_memory_limit", "bytes per rank (0: unlimited)")
          .Help("bytes per rank of the device allocator (0: unlimited)")),
      std::move(Int("train.eval_batch", 1).Ref([](auto& c) -> auto& { return c.resnet.eval_batch; }).ResNet()
          .Help("validation images per rank per forward")),
      std::move(Bool("train.average_bn_stats").Ref([](auto& c) -> auto& { return c.resnet.average_bn_stats; }).ResNet()
          .Help("average BatchNorm statistics over the ranks before evaluating and saving")),
      std::move(Int("train.threads_per_rank", 0, 1024).Ref([](auto& c) -> auto& { return c.resnet.threads_per_rank; })
          .ResNet().Help("OpenMP threads per rank (0: hardware threads / in-process ranks)")),
      std::move(Bool("train.allow_tf32").Ref([](auto& c) -> auto& { return c.allow_tf32; })
          .Peer("torch.backends.cuda.matmul.allow_tf32")
          .Flag("allow_tf32", "f32 GEMMs on CUDA on TF32 tensor cores (inputs rounded to 10-bit mantissas)")
          .Help("f32 matrix products on CUDA devices run on TF32 tensor cores (cuBLASLt's FAST_TF32: each input "
                "rounded to a 10-bit mantissa, fp32 accumulation; several times the f32 rate); no effect on "
                "bf16/f16 compute or on CPU ranks")),
      std::move(Bool("train.tensorboard")
          .Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.tensorboard : c.train.tensorboard; })
          .Flag("tensorboard", "TensorBoard event file in the run folder's tensorboard/ (--notensorboard: none)")
          .Help("a TensorBoard event file in the run folder's tensorboard/, beside metrics.csv")),
      // ---------------------------------------------------------------- optimizer
      Sec("optimizer", "the optimizer (DeepSpeed's block: deepspeed.optimizer {type, params})"),
      std::move(Choice("optimizer.type", {"adamw", "adam", "sgd"})
          .Get([](const RunConfig& c) { return OJson(std::string(optim::OptimizerKindName(OptimizerOf(c).kind))); })
          .Set([](RunConfig& c, const Json& v) { OptimizerOf(c).kind = *optim::ParseOptimizerKind(v.get<std::string>()); })
          .Peer("DeepSpeed optimizer.type").Flag("optimizer", "adamw, adam or sgd").Help("adamw, adam or sgd")),
      std::move(Num("optimizer.lr", AtLeast(0)).Ref([](auto& c) -> auto& { return OptimizerOf(c).lr; })
          .Peer("DeepSpeed optimizer.params.lr").Flag("lr", "peak learning rate").Help("peak learning rate")),
      std::move(Num("optimizer.weight_decay", AtLeast(0)).Ref([](auto& c) -> auto& { return OptimizerOf(c).weight_decay; })
          .Peer("DeepSpeed optimizer.params.weight_decay").Flag("weight_decay", "decoupled weight decay on 2-D weights")
          .Help("weight decay on 2-D weights (decoupled for adamw)")),
      std::move(Custom("optimizer.betas", "[number, number]", "each in [0, 1)", config_internal::ReadBetas)
          .Get([](const RunConfig& c) { return OJson({OptimizerOf(c).adamw.beta1, OptimizerOf(c).adamw.beta2}); })
          .Peer("DeepSpeed optimizer.params.betas")
          .Flag(Mapped("beta1", "Adam beta1 (SGD momentum)", false, "0.9", "0.8", [](const std::string& v) {
            // Adam's beta1 and SGD's momentum, as before the config.
            return Overrides(std::vector<std::string>{absl::StrCat("optimizer.betas.0=", v),
                                                      absl::StrCat("optimizer.momentum=", v)});
          }))
          .Flag(Mapped("beta2", "Adam beta2", false, "0.95", "0.99",
                       [](const std::string& v) { return One(absl::StrCat("optimizer.betas.1=", v)); }))
          .Help("Adam's [beta1, beta2]").Example("[0.8, 0.99]")),
      std::move(Num("optimizer.eps", AtLeast(0)).Ref([](auto& c) -> auto& { return OptimizerOf(c).adamw.eps; })
          .Peer("DeepSpeed optimizer.params.eps").Help("Adam's epsilon")),
      std::move(Num("optimizer.momentum", AtLeast(0)).Ref([](auto& c) -> auto& { return OptimizerOf(c).sgd.momentum; })
          .Peer("DeepSpeed optimizer.params.momentum").Help("SGD's momentum (--beta1 sets it too)")),
      std::move(Num("optimizer.dampening", AtLeast(0)).Ref([](auto& c) -> auto& { return OptimizerOf(c).sgd.dampening; })
          .Peer("DeepSpeed optimizer.params.dampening").Help("SGD's dampening")),
      std::move(Bool("optimizer.nesterov").Ref([](auto& c) -> auto& { return OptimizerOf(c).sgd.nesterov; })
          .Peer("DeepSpeed optimizer.params.nesterov").Help("SGD's Nesterov momentum (momentum > 0, dampening 0)")),
      // ---------------------------------------------------------------- lr_schedule
      Sec("lr_schedule", "linear warmup, then cosine or linear decay to min_lr (optim/lr_schedule.h)"),
      std::move(Choice("lr_schedule.type", {"cosine", "linear", "constant"})
          .Get([](const RunConfig& c) { return OJson(std::string(optim::LrScheduleKindName(ScheduleOf(c).kind))); })
          .Set([](RunConfig& c, const Json& v) { ScheduleOf(c).kind = *optim::ParseLrScheduleKind(v.get<std::string>()); })
          .Peer("DeepSpeed scheduler.type").Flag("lr_schedule", "constant, cosine or linear")
          .Help("the decay after warmup (constant: none)")),
      std::move(Num("lr_schedule.min_lr", AtLeast(0)).Ref([](auto& c) -> auto& { return ScheduleOf(c).min_lr; })
          .Peer("DeepSpeed scheduler.params.warmup_min_lr, cos_min_ratio")
          .Flag("min_lr", "learning rate at the end of decay").Help("learning rate at the end of decay")),
      std::move(Int("lr_schedule.warmup_steps", 0).Ref([](auto& c) -> auto& { return ScheduleOf(c).warmup_steps; })
          .Peer("DeepSpeed scheduler.params.warmup_num_steps").Flag("warmup_steps", "linear warmup steps")
          .Help("linear warmup steps")),
      std::move(Custom("lr_schedule.decay_steps", "int or null", ">= warmup_steps; null: max(train.steps, warmup_steps)",
                       config_internal::ReadDecaySteps)
          .Get([](const RunConfig& c) { return OJson(ScheduleOf(c).decay_steps); })
          .Peer("DeepSpeed scheduler.params.total_num_steps").Help("the step at which decay reaches min_lr")
          .Example("300")),
      // ---------------------------------------------------------------- loss_scaler
      Sec("loss_scaler", "fp16 dynamic loss scaling (DeepSpeed's fp16 block)"),
      std::move(Choice("loss_scaler.mode", {"auto", "dynamic", "none"}).Gpt()
          .Ref([](auto& c) -> auto& { return c.loss_scale_mode; }).Peer("DeepSpeed fp16.enabled")
          .Flag("loss_scale", "fp16 loss scaling: dynamic, none, or auto (dynamic when param_dtype is f16)")
          .Help("auto: dynamic when param_dtype is f16")),
      std::move(Int("loss_scaler.initial_scale_power", 0, 126).Gpt()
          .Ref([](auto& c) -> auto& { return c.train.loss_scaler.initial_scale_power; })
          .Peer("DeepSpeed fp16.initial_scale_power").Flag("initial_scale_power", "initial loss scale 2^n")
          .Help("initial loss scale 2^n")),
      std::move(Int("loss_scaler.loss_scale_window", 1).Gpt()
          .Ref([](auto& c) -> auto& { return c.train.loss_scaler.scale_window; })
          .Peer("DeepSpeed fp16.loss_scale_window").Flag("loss_scale_window", "clean steps before the scale grows")
          .Help("clean steps before the scale grows")),
      std::move(Int("loss_scaler.hysteresis", 1).Gpt().Ref([](auto& c) -> auto& { return c.train.loss_scaler.hysteresis; })
          .Peer("DeepSpeed fp16.hysteresis").Flag("hysteresis", "overflows tolerated before the scale drops")
          .Help("overflows tolerated before the scale drops")),
      std::move(Bool("loss_scaler.consecutive_hysteresis").Gpt()
          .Ref([](auto& c) -> auto& { return c.train.loss_scaler.consecutive_hysteresis; })
          .Peer("DeepSpeed fp16.consecutive_hysteresis").Help("refill the hysteresis after every clean step")),
      std::move(Num("loss_scaler.min_loss_scale", Above(0)).Gpt()
          .Ref([](auto& c) -> auto& { return c.train.loss_scaler.min_scale; })
          .Peer("DeepSpeed fp16.min_loss_scale").Flag("min_loss_scale", "the scale never drops below this")
          .Help("the scale never drops below this")),
      std::move(Num("loss_scaler.scale_factor", Above(1)).Gpt()
          .Ref([](auto& c) -> auto& { return c.train.loss_scaler.scale_factor; })
          .Help("the factor the scale grows and drops by").Example("4.0")),
  };
  AppendStrategyFields(&t);  // strategy.*: config_schema_strategy.cc
  std::vector<ConfigField> rest = {
      // ---------------------------------------------------------------- checkpoint
      Sec("checkpoint", "weights in and out, checkpoints under work_dir/experiment_name"),
      std::move(Str("checkpoint.init_from").Gpt().Ref([](auto& c) -> auto& { return c.train.init_from; })
          .Flag("init_from", "start from these weights (.safetensors with the model's names; for a llama also a "
                             "Hugging Face folder, whose config.json gives the sizes)")
          .Help("start from these weights: a .safetensors with the model's names (nanoGPT's for the GPT), or for "
                "model.type \"llama\" a Hugging Face folder (config.json and model.safetensors or its sharded "
                "index; its config gives the sizes; each rank reads only its shards' bytes)")),
      std::move(Str("checkpoint.save_weights")
          .Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.save : c.train.save; })
          .Flag("save", "write the trained weights (.safetensors, nanoGPT names; llama: a Hugging Face folder)")
          .Help("write the trained weights at the end (.safetensors; nanoGPT names, or torchvision's with "
                "BatchNorm buffers; model.type \"llama\": a Hugging Face folder that transformers loads)")),
      std::move(Int("checkpoint.save_shard_bytes", 1).Gpt().Ref([](auto& c) -> auto& { return c.train.save_shard_bytes; })
          .Peer("save_pretrained max_shard_size")
          .Help("llama: the largest safetensors file checkpoint.save_weights writes (a larger tensor gets its own)")
          .Example("2000000000")),
      std::move(Int("checkpoint.save_every", 0).Gpt().Ref([](auto& c) -> auto& { return c.train.save_every; })
          .Flag("save_every", "save a checkpoint every n steps (0: never)").Help("a checkpoint every n steps (0: never)")),
      std::move(Str("checkpoint.resume").Gpt().Ref([](auto& c) -> auto& { return c.train.resume; })
          .Flag("resume", "auto (newest complete checkpoint under --work_dir) or a checkpoint directory")
          .Help("\"auto\": the experiment's newest complete checkpoint; or a checkpoint folder")),
      std::move(Bool("checkpoint.async_save").Gpt().Ref([](auto& c) -> auto& { return c.train.async_save; })
          .Flag("async_save", "write checkpoints in the background (training blocks only for a snapshot)")
          .Help("write checkpoints in the background")),
      std::move(Int("checkpoint.keep_last", 0, 1 << 20).Gpt().Ref([](auto& c) -> auto& { return c.train.keep_last; })
          .Flag("keep_last", "keep only the newest n checkpoints (0: all)").Help("keep the newest n checkpoints (0: all)")),
      std::move(Bool("checkpoint.write_tied_once").Gpt().Ref([](auto& c) -> auto& { return c.train.write_tied_once; })
          .Flag("write_tied_once", "full checkpoints and --save: the tied wte/lm_head matrix once, as "
                                   "transformer.wte.weight (Hugging Face's layout)")
          .Help("full checkpoints and save_weights hold the tied wte/lm_head matrix once")),
      // ---------------------------------------------------------------- sample, trace
      Sec("sample", "text generated at the end (byte vocabularies)"),
      std::move(Int("sample.tokens", 0).Gpt().Ref([](auto& c) -> auto& { return c.train.sample_tokens; })
          .Flag("sample_tokens", "tokens to generate at the end").Help("tokens to generate (0: none)")),
      std::move(Num("sample.temperature", Above(0)).Gpt().Ref([](auto& c) -> auto& { return c.train.temperature; })
          .Flag("temperature", "sampling temperature").Help("sampling temperature")),
      std::move(Int("sample.top_k", 1).Gpt().Ref([](auto& c) -> auto& { return c.train.top_k; })
          .Flag("top_k", "sample among the k most likely tokens").Help("sample among the k most likely tokens")),
      Sec("trace", "a Chrome trace (Perfetto) of a few steps"),
      std::move(Str("trace.path").Gpt().Ref([](auto& c) -> auto& { return c.train.trace; })
          .Flag("trace", "write a Chrome trace (Perfetto) of a few steps to this file").Help("the trace file (\"\": none)")),
      std::move(Int("trace.from_step", 0).Gpt().Ref([](auto& c) -> auto& { return c.train.trace_from; })
          .Flag("trace_from", "first traced step").Help("first traced step")),
      std::move(Int("trace.steps", 1).Gpt().Ref([](auto& c) -> auto& { return c.train.trace_steps; })
          .Flag("trace_steps", "traced steps").Help("traced steps")),
      // ---------------------------------------------------------------- DeepSpeed
      std::move(Custom("deepspeed", "object", "a DeepSpeed config (docs/config.md, \"DeepSpeed configs\")",
                       [](Section& s, const std::string& key, RunConfig* c) {
                         Section ds = s.Child(key);
                         if (ds.present()) ReadDeepSpeed(ds, c);
                         return true;
                       })
          .Get([](const RunConfig&) { return OJson(nullptr); }).Gpt().NotWritten().NotALeaf()
          .Help("DeepSpeed's config keys, an alternative to the strategy keys (Note [DeepSpeed mapping])")),
  };
  for (ConfigField& f : rest) t.push_back(std::move(f));
  return t;
}

}  // namespace
}  // namespace config_schema_internal

using Json = nlohmann::json;

const std::vector<ConfigField>& ConfigFields() {
  static const auto* fields = [] {
    auto* t = new std::vector<ConfigField>(config_schema_internal::MakeFields());
    // A section is read by a model type when a row below it is.
    for (ConfigField& s : *t) {
      if (s.kind != FieldKind::kSection) continue;
      int models = 0;
      for (const ConfigField& f : *t) {
        if (f.kind != FieldKind::kSection && absl::StartsWith(f.path, s.path + ".")) models |= f.models;
      }
      s.models = models;
    }
    return t;
  }();
  return *fields;
}

const ConfigField* FindConfigField(const std::string& path) {
  for (const ConfigField& f : ConfigFields()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

std::pair<const ConfigField*, const ConfigFlag*> FindConfigFlag(const std::string& name) {
  for (const ConfigField& f : ConfigFields()) {
    for (const ConfigFlag& flag : f.flags) {
      if (flag.name == name) return {&f, &flag};
    }
  }
  return {nullptr, nullptr};
}

Json FieldExample(const ConfigField& f) {
  if (!f.example.empty()) return Json::parse(f.example);
  RunConfig defaults = DefaultRunConfig();
  if (f.models == kResNetOnly) defaults.model_type = "resnet";
  const Json d = f.get(defaults);
  switch (f.kind) {
    case FieldKind::kBool: return !d.get<bool>();
    case FieldKind::kInt: return d.get<int64_t>() + 1 <= f.max ? d.get<int64_t>() + 1 : f.min;
    case FieldKind::kNumber: return d.get<double>() == 0 ? 0.5 : d.get<double>() / 2;
    case FieldKind::kString: return "x";
    case FieldKind::kDType: return "bf16";
    case FieldKind::kStrings: return Json::array({"lm_head"});
    case FieldKind::kChoice:
      for (const std::string& c : f.choices) {
        if (!absl::EqualsIgnoreCase(c, d.get<std::string>())) return c;
      }
      return d;
    default: return d;
  }
}

std::string FlagText(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace zeroshard
