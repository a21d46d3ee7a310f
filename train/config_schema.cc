#include "train/config_schema.h"

#include <map>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "train/config_custom.h"
#include "train/deepspeed_config.h"

namespace zeroshard {
namespace {

using config_internal::Above;
using config_internal::AtLeast;
using config_internal::IsResNet;
using config_internal::kNoMax;
using config_internal::OptimizerOf;
using config_internal::Range;
using config_internal::ScheduleOf;
using config_internal::Section;
using Json = nlohmann::json;
// What a row's get() returns: key order kept (cpu_offload's object reads params, grads, optimizer).
using OJson = nlohmann::ordered_json;
using Overrides = absl::StatusOr<std::vector<std::string>>;

// ============================================================ value conversions

template <typename T>
OJson ToJ(const T& v) {
  if constexpr (std::is_same_v<T, float>) {
    // The double with the fewest digits that reads back as `v` (0.1f -> 0.1, not 0.10000000149).
    for (int digits = 1; digits < 10; ++digits) {
      const double d = std::strtod(absl::StrFormat("%.*g", digits, v).c_str(), nullptr);
      if (static_cast<float>(d) == v) return d;
    }
    return static_cast<double>(v);
  } else {
    return OJson(v);
  }
}

template <typename T>
void FromJ(const Json& v, T* out) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
    *out = v.get<T>();
  } else if constexpr (std::is_integral_v<T>) {
    *out = static_cast<T>(v.get<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    *out = static_cast<T>(v.get<double>());
  } else {
    *out = v.get<T>();
  }
}

// ============================================================ the row builder

class F {
 public:
  F(std::string path, FieldKind kind) {
    f_.path = std::move(path);
    f_.kind = kind;
  }
  // Binds get/set to the member `ref(config)` names (a generic lambda, so one
  // serves the const getter and the setter).
  template <typename R>
  F&& Ref(R ref) && {
    f_.get = [ref](const RunConfig& c) { return ToJ(ref(c)); };
    f_.set = [ref](RunConfig& c, const Json& v) { FromJ(v, &ref(c)); };
    return std::move(*this);
  }
  F&& Get(std::function<OJson(const RunConfig&)> get) && { f_.get = std::move(get); return std::move(*this); }
  F&& Set(std::function<void(RunConfig&, const Json&)> set) && { f_.set = std::move(set); return std::move(*this); }
  F&& Read(decltype(ConfigField::read) read) && { f_.read = std::move(read); return std::move(*this); }
  F&& Check(decltype(ConfigField::check) check) && { f_.check = std::move(check); return std::move(*this); }
  F&& Gpt() && { f_.models = kGptOnly; return std::move(*this); }
  F&& ResNet() && { f_.models = kResNetOnly; return std::move(*this); }
  F&& Peer(std::string peer) && { f_.peer = std::move(peer); return std::move(*this); }
  F&& Help(std::string help) && { f_.help = std::move(help); return std::move(*this); }
  F&& Example(std::string json) && { f_.example = std::move(json); return std::move(*this); }
  F&& Flag(std::string name, std::string help) && {
    f_.flags.push_back({.name = std::move(name), .help = std::move(help), .is_bool = f_.kind == FieldKind::kBool});
    return std::move(*this);
  }
  F&& Flag(ConfigFlag flag) && { f_.flags.push_back(std::move(flag)); return std::move(*this); }
  F&& NotWritten() && { f_.written = false; return std::move(*this); }
  F&& NotALeaf() && { f_.leaf = false; return std::move(*this); }
  operator ConfigField() && { return std::move(f_); }  // NOLINT: the rows read as a table
  ConfigField& field() { return f_; }

 private:
  ConfigField f_;
};

F Sec(std::string path, std::string help) { return std::move(F(std::move(path), FieldKind::kSection).Help(std::move(help))); }
F Bool(std::string path) { return F(std::move(path), FieldKind::kBool); }
F Str(std::string path) { return F(std::move(path), FieldKind::kString); }
F DTypeF(std::string path) { return F(std::move(path), FieldKind::kDType); }
F Strs(std::string path) { return F(std::move(path), FieldKind::kStrings); }
F Int(std::string path, int64_t min, int64_t max = kNoMax) {
  F f(std::move(path), FieldKind::kInt);
  f.field().min = min;
  f.field().max = max;
  return f;
}
F Num(std::string path, Range range) {
  F f(std::move(path), FieldKind::kNumber);
  f.field().range = range;
  return f;
}
F Choice(std::string path, std::vector<std::string> choices) {
  F f(std::move(path), FieldKind::kChoice);
  f.field().choices = std::move(choices);
  return f;
}
// `read` does the reading (config_custom.h); `type` and `allowed` say it in words.
F Custom(std::string path, std::string type, std::string allowed, decltype(ConfigField::read) read) {
  F f(std::move(path), FieldKind::kCustom);
  f.field().type_text = std::move(type);
  f.field().allowed_text = std::move(allowed);
  f.field().read = std::move(read);
  return f;
}

// A flag spelled its own way: `map` turns its value into overrides; `example`
// is a value for the tests.
ConfigFlag Mapped(std::string name, std::string help, bool is_bool, std::string default_text, std::string example,
                  std::function<Overrides(const std::string&)> map) {
  return ConfigFlag{.name = std::move(name), .help = std::move(help), .is_bool = is_bool, .to_overrides = std::move(map),
                    .default_text = std::move(default_text), .example = std::move(example)};
}

bool FlagOn(const std::string& v) { return v == "true" || v == "1"; }
Overrides One(std::string line) { return std::vector<std::string>{std::move(line)}; }

void AppendStrategyFields(std::vector<ConfigField>* t);

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
      std::move(Choice("distributed.backend", {"local", "mpi", "nccl"}).Ref([](auto& c) -> auto& { return c.backend; })
          .Flag("backend", "local (threads), mpi (one rank per process under mpirun) or nccl (one thread per GPU, "
                           "cuda:0 .. cuda:world_size-1)")
          .Help("local: threads; mpi: one rank per process under mpirun; nccl: one thread per GPU")),
      // ---------------------------------------------------------------- model
      Sec("model", "the network: the GPT, or with type \"resnet\" the vision job's ResNet"),
      std::move(Choice("model.type", {"gpt", "resnet"}).Get([](const RunConfig& c) { return OJson(c.model_type); })
          .Set([](RunConfig& c, const Json& v) {
            c.model_type = v.get<std::string>();
            // The vision job (ResNetTrainOptions); train.sharding holds its strategy too.
            if (IsResNet(c)) c.train.sharding.wrap = WrapPolicy::ByType({"BasicBlock"});
          })
          .Help("gpt: RunTraining on a text; resnet: RunResNetTraining on the generated ShapesData set")),
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
  AppendStrategyFields(&t);
  std::vector<ConfigField> rest = {
      // ---------------------------------------------------------------- checkpoint
      Sec("checkpoint", "weights in and out, checkpoints under work_dir/experiment_name"),
      std::move(Str("checkpoint.init_from").Gpt().Ref([](auto& c) -> auto& { return c.train.init_from; })
          .Flag("init_from", "start from these weights (.safetensors, nanoGPT names)")
          .Help("start from these weights (.safetensors, nanoGPT names)")),
      std::move(Str("checkpoint.save_weights")
          .Ref([](auto& c) -> auto& { return IsResNet(c) ? c.resnet.save : c.train.save; })
          .Flag("save", "write the trained weights (.safetensors, nanoGPT names)")
          .Help("write the trained weights at the end (.safetensors; nanoGPT names, or torchvision's with "
                "BatchNorm buffers)")),
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

// strategy: PyTorch FSDP's (and Lightning's FSDPStrategy's) names.
void AppendStrategyFields(std::vector<ConfigField>* t) {
  using config_internal::ReadNvmePath;
  std::vector<ConfigField> rows = {
      Sec("strategy", "how the model is sharded: PyTorch FSDP's names (DeepSpeed's: the deepspeed block)"),
      std::move(Choice("strategy.sharding_strategy",
                       {"FULL_SHARD", "SHARD_GRAD_OP", "SHARD_OPTIMIZER", "NO_SHARD", "HYBRID_SHARD"})
          .Get([](const RunConfig& c) { return OJson(std::string(ShardingStrategyName(c.train.sharding.strategy))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.strategy = *ParseShardingStrategy(v.get<std::string>()); })
          .Peer("FSDP sharding_strategy; DeepSpeed zero_optimization.stage")
          .Flag("sharding_strategy", "FULL_SHARD, SHARD_GRAD_OP, SHARD_OPTIMIZER, NO_SHARD or HYBRID_SHARD")
          .Help("ZeRO-3, ZeRO-2, ZeRO-1 (DeepSpeed's stages 3, 2, 1), DDP, or ZeRO-3 within shard groups")),
      std::move(Custom("strategy.zero_stage", "int or null", "1 | 2 | 3", config_internal::ReadZeroStage)
          .Get([](const RunConfig&) { return OJson(nullptr); })  // sharding_strategy says it
          .Peer("DeepSpeed zero_optimization.stage")
          .Flag("zero_stage", "ZeRO stage: 1 (SHARD_OPTIMIZER), 2 (SHARD_GRAD_OP) or 3 (FULL_SHARD); an error beside "
                              "a different --sharding_strategy")
          .Help("1|2|3: SHARD_OPTIMIZER|SHARD_GRAD_OP|FULL_SHARD; beside sharding_strategy (a _base_ file's "
                "included) they must agree unless only one comes from the command line, which wins")
          .Example("1")),
      std::move(Int("strategy.hybrid_shard_size", 0).Ref([](auto& c) -> auto& { return c.train.sharding.hybrid_shard_size; })
          .Flag("hybrid_shard_size", "ranks per shard group for HYBRID_SHARD")
          .Help("HYBRID_SHARD: ranks per shard group (divides the world)")),
      std::move(Custom("strategy.auto_wrap_policy", "list, object or null",
                       "module types; {\"min_num_params\": n}; null: none", config_internal::ReadAutoWrapPolicy)
          .Get([](const RunConfig& c) {
            const WrapPolicy& w = c.train.sharding.wrap;
            switch (w.kind) {
              case WrapPolicy::Kind::kByType: return OJson(std::vector<std::string>(w.types.begin(), w.types.end()));
              case WrapPolicy::Kind::kBySize: return OJson{{"min_num_params", w.min_num_params}};
              default: return OJson(nullptr);
            }
          })
          .Peer("FSDP auto_wrap_policy (ModuleWrapPolicy, size_based_auto_wrap_policy)")
          .Flag(Mapped("auto_wrap", "block, size:<min_num_params> or none", false, "block", "size:1000",
                       [](const std::string& v) -> Overrides {
                         int64_t min_params = 0;
                         if (v == "block") return One("strategy.auto_wrap_policy=[\"Block\"]");
                         if (v == "none") return One("strategy.auto_wrap_policy=null");
                         if (absl::StartsWith(v, "size:") && absl::SimpleAtoi(v.substr(5), &min_params)) {
                           return One(absl::StrCat("strategy.auto_wrap_policy={\"min_num_params\": ", min_params, "}"));
                         }
                         return absl::InvalidArgumentError(
                             absl::StrCat("--auto_wrap=", v, ": expected block, size:<n> or none"));
                       }))
          .Help("the units: module types (GPT: Block, CausalSelfAttention, Mlp, LayerNorm; ResNet: BasicBlock, "
                "Conv2d, BatchNorm2d, Linear), or by size")
          .Example("{\"min_num_params\": 1000}")),
      std::move(Custom("strategy.backward_prefetch", "enum or null", "\"BACKWARD_PRE\" | \"BACKWARD_POST\" | null",
                       config_internal::ReadBackwardPrefetch)
          .Get([](const RunConfig& c) {
            const BackwardPrefetch p = c.train.sharding.backward_prefetch;
            return p == BackwardPrefetch::kNone ? OJson(nullptr) : OJson(std::string(BackwardPrefetchName(p)));
          })
          .Peer("FSDP backward_prefetch; DeepSpeed zero_optimization.overlap_comm")
          .Flag("backward_prefetch", "pre, post or none")
          .Help("gather the next unit before (PRE) or after (POST) this unit's gradient computation")
          .Example("\"BACKWARD_POST\"")),
      std::move(Bool("strategy.forward_prefetch").Ref([](auto& c) -> auto& { return c.train.sharding.forward_prefetch; })
          .Peer("FSDP forward_prefetch; DeepSpeed zero_optimization.overlap_comm")
          .Flag("forward_prefetch", "prefetch the next unit's all-gather in forward")
          .Help("prefetch the next unit's all-gather in forward")),
      std::move(Custom("strategy.limit_all_gathers", "int or bool", "[0, 1048576]; true: 2, false: 0 (unlimited)",
                       config_internal::ReadLimitAllGathers)
          .Ref([](auto& c) -> auto& { return c.train.sharding.limit_all_gathers; })
          .Peer("FSDP limit_all_gathers").Flag("limit_all_gathers", "gathered units in flight (0: unlimited)")
          .Help("units gathered at once (0: unlimited)").Example("3")),
      std::move(Custom("strategy.cpu_offload", "bool or object", "{\"params\", \"grads\", \"optimizer\"} booleans",
                       config_internal::ReadCpuOffload)
          .Get([](const RunConfig& c) {
            const OffloadPolicy& off = c.train.sharding.offload;
            if (!off.params && !off.grads && !off.optimizer) return OJson(false);
            if (off.params && off.grads && off.optimizer) return OJson(true);
            return OJson{{"params", off.params}, {"grads", off.grads}, {"optimizer", off.optimizer}};
          })
          .Peer("FSDP cpu_offload; DeepSpeed offload_optimizer / offload_param device \"cpu\"")
          .Flag(Mapped("offload", "none; host offload: optimizer (state, master weights, gradients) or "
                                  "params_and_optimizer; NVMe offload (ZeRO-Infinity, files under --nvme_path): "
                                  "nvme_optimizer (optimizer state) or nvme_params_and_optimizer (and the master "
                                  "weight shards)",
                       false, "none", "params_and_optimizer", [](const std::string& v) -> Overrides {
                         // Host offload (FSDP's CPUOffload) or NVMe offload (ZeRO-Infinity), never both.
                         std::vector<std::string> out;
                         bool nvme_optimizer = false, nvme_params = false;
                         if (v == "none") {
                           out.push_back("strategy.cpu_offload=false");
                         } else if (v == "optimizer") {
                           out.push_back("strategy.cpu_offload={\"params\": false, \"grads\": true, \"optimizer\": true}");
                         } else if (v == "params_and_optimizer") {
                           out.push_back("strategy.cpu_offload=true");
                         } else if (v == "nvme_optimizer" || v == "nvme_params_and_optimizer") {
                           out.push_back("strategy.cpu_offload=false");
                           nvme_optimizer = true;
                           nvme_params = v == "nvme_params_and_optimizer";
                         } else {
                           return absl::InvalidArgumentError(
                               absl::StrCat("--offload=", v, ": expected none, optimizer, params_and_optimizer, "
                                                             "nvme_optimizer or nvme_params_and_optimizer"));
                         }
                         out.push_back(absl::StrCat("strategy.nvme_offload.optimizer.enabled=", nvme_optimizer));
                         out.push_back(absl::StrCat("strategy.nvme_offload.params.enabled=", nvme_params));
                         return out;
                       }))
          .Help("true: parameters, gradients and the optimizer step on the host (FSDP's CPUOffload); or which "
                "of them")
          .Example("true")),
      std::move(F("strategy.nvme_offload", FieldKind::kSection).Read(config_internal::OpenNvmeOffload)
          .Help("ZeRO-Infinity: state in swap files on a local NVMe drive (null/false: off)")),
      std::move(Custom("strategy.nvme_offload.nvme_path", "string", "an existing directory", ReadNvmePath)
          .Get([](const RunConfig& c) {
            const OffloadPolicy& off = c.train.sharding.offload;
            return OJson(!off.optimizer_nvme.path.empty() ? off.optimizer_nvme.path : off.param_nvme.path);
          })
          .Peer("DeepSpeed offload_optimizer.nvme_path, offload_param.nvme_path")
          .Flag("nvme_path", "directory for the NVMe swap files (a local NVMe mount) of --offload=nvme_*")
          .Help("the directory of both kinds' swap files").Example("\"/tmp\"")),
  };
  // optimizer {...} and params {...}: one NvmeOffload each.
  for (const bool params : {false, true}) {
    const std::string kind = params ? "params" : "optimizer";
    const std::string p = "strategy.nvme_offload." + kind;
    const std::string ds = absl::StrCat("DeepSpeed offload_", params ? "param" : "optimizer", ".");
    auto n = [params](auto& c) -> auto& {
      return params ? c.train.sharding.offload.param_nvme : c.train.sharding.offload.optimizer_nvme;
    };
    rows.push_back(Sec(p, params ? "the master weight shards on NVMe" : "the optimizer state on NVMe"));
    rows.push_back(std::move(Bool(p + ".enabled").Ref([params](auto& c) -> auto& {
      return params ? c.train.sharding.offload.nvme_params : c.train.sharding.offload.nvme_optimizer;
    }).Peer(ds + "device \"nvme\"").Help("swap this kind to NVMe")));
    rows.push_back(std::move(Custom(p + ".nvme_path", "string or null", "null: nvme_offload.nvme_path", ReadNvmePath)
        .Get([n](const RunConfig& c) {
          const OffloadPolicy& off = c.train.sharding.offload;
          const std::string common = !off.optimizer_nvme.path.empty() ? off.optimizer_nvme.path : off.param_nvme.path;
          return n(c).path == common ? OJson(nullptr) : OJson(n(c).path);
        })
        .Peer(ds + "nvme_path").Help("this kind's own directory").Example("\"/tmp/" + kind + "\"")));
    rows.push_back(std::move(Int(p + ".buffer_count", 1, 1 << 16).Ref([n](auto& c) -> auto& { return n(c).buffer_count; })
        .Peer(ds + "buffer_count").Help("swap buffers of the largest unit's region")));
    rows.push_back(std::move(Bool(p + ".pin_memory").Ref([n](auto& c) -> auto& { return n(c).pin_memory; })
        .Peer(ds + "pin_memory").Help("page-lock the buffers")));
    if (params) {
      rows.push_back(std::move(Int(p + ".max_in_cpu", 0).Ref([n](auto& c) -> auto& { return n(c).max_in_cpu; })
          .Peer(ds + "max_in_cpu").Help("elements of master shards kept in host memory")));
    }
    rows.push_back(std::move(Bool(p + ".read_ahead").Ref([n](auto& c) -> auto& { return n(c).read_ahead; })
        .Peer(params ? "" : ds + "pipeline_read").Help("read the next units ahead")));
    rows.push_back(std::move(Bool(p + ".write_behind").Ref([n](auto& c) -> auto& { return n(c).write_behind; })
        .Peer(params ? "" : ds + "pipeline_write").Help("write back in the background")));
  }
  auto aio = [](auto& c) -> auto& { return c.train.sharding.offload.aio; };
  std::vector<ConfigField> more = {
      std::move(Bool("strategy.nvme_offload.verify_checksums").Ref([](auto& c) -> auto& {
        return c.train.sharding.offload.nvme_verify; }).Help("CRC-32C of every region, checked after each read")),
      Sec("strategy.nvme_offload.aio", "the swap files' I/O (DeepSpeed's aio block, runtime/nvme/aio_options.h)"),
      std::move(Int("strategy.nvme_offload.aio.block_size", kDirectIoAlignment, int64_t{1} << 30)
          .Ref([aio](auto& c) -> auto& { return aio(c).block_size; })
          .Check([](Section& s, const std::string& key, RunConfig* c) {
            const int64_t b = c->train.sharding.offload.aio.block_size;
            if (s.Has(key) && s.ctx().Ok({s.PathOf(key)}) && b % kDirectIoAlignment != 0) {
              s.Add(key, absl::StrCat("expected a multiple of ", kDirectIoAlignment,
                                      " bytes (the O_DIRECT alignment), found ", b));
            }
          })
          .Peer("DeepSpeed aio.block_size").Help("bytes per request (a multiple of 4096)").Example("2097152")),
      std::move(Int("strategy.nvme_offload.aio.queue_depth", 1, 4096).Ref([aio](auto& c) -> auto& {
        return aio(c).queue_depth; }).Peer("DeepSpeed aio.queue_depth").Help("requests in flight per I/O thread")),
      std::move(Int("strategy.nvme_offload.aio.thread_count", 1, 64).Ref([aio](auto& c) -> auto& {
        return aio(c).thread_count; }).Peer("DeepSpeed aio.thread_count").Help("I/O threads")),
      std::move(Bool("strategy.nvme_offload.aio.single_submit").Ref([aio](auto& c) -> auto& {
        return aio(c).single_submit; }).Peer("DeepSpeed aio.single_submit").Help("submit requests one at a time")),
      std::move(Bool("strategy.nvme_offload.aio.overlap_events").Ref([aio](auto& c) -> auto& {
        return aio(c).overlap_events; }).Peer("DeepSpeed aio.overlap_events").Help("overlap submission and completion")),
      std::move(F("strategy.mixed_precision", FieldKind::kSection).Read(config_internal::OpenMixedPrecision)
          .Help("FSDP's MixedPrecision (null: all f32)")),
      std::move(DTypeF("strategy.mixed_precision.param_dtype")
          .Get([](const RunConfig& c) { return OJson(std::string(DTypeName(c.train.sharding.mixed_precision.param_dtype))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.mixed_precision.param_dtype = *ParseDType(v.get<std::string>()); })
          .Peer("FSDP MixedPrecision.param_dtype; DeepSpeed bf16.enabled / fp16.enabled")
          .Flag("param_dtype", "dtype of gathered parameters and compute: f32, bf16 or f16")
          .Help("gathered parameters and compute")),
      std::move(DTypeF("strategy.mixed_precision.reduce_dtype")
          .Get([](const RunConfig& c) { return OJson(std::string(DTypeName(c.train.sharding.mixed_precision.reduce_dtype))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.mixed_precision.reduce_dtype = *ParseDType(v.get<std::string>()); })
          .Peer("FSDP MixedPrecision.reduce_dtype; DeepSpeed communication_data_type")
          .Flag("reduce_dtype", "dtype of gradient reduction: f32, bf16 or f16").Help("gradient reduction")),
      std::move(DTypeF("strategy.mixed_precision.buffer_dtype")
          .Get([](const RunConfig& c) { return OJson(std::string(DTypeName(c.train.sharding.mixed_precision.buffer_dtype))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.mixed_precision.buffer_dtype = *ParseDType(v.get<std::string>()); })
          .Peer("FSDP MixedPrecision.buffer_dtype").Help("buffers (BatchNorm statistics)")),
      std::move(Custom("strategy.mixed_precision.fp32_module_types", "list of strings", "module types",
                       config_internal::ReadFp32ModuleTypes)
          .Get([](const RunConfig& c) {
            const std::set<std::string>& m = c.train.sharding.mixed_precision.fp32_module_types;
            return OJson(std::vector<std::string>(m.begin(), m.end()));
          })
          .Peer("FSDP MixedPrecision._module_classes_to_ignore")
          .Flag(Mapped("keep_layernorm_fp32", "under mixed precision keep every LayerNorm in fp32 (units of their own, "
                                              "gathered and reduced in f32)",
                       true, "false", "true", [](const std::string& v) {
                         // The default list (BatchNorm2d) with or without the GPT's LayerNorm.
                         return One(absl::StrCat("strategy.mixed_precision.fp32_module_types=",
                                                 FlagOn(v) ? "[\"BatchNorm2d\", \"LayerNorm\"]" : "[\"BatchNorm2d\"]"));
                       }))
          .Help("module types kept fp32, in units of their own, when a dtype is not f32 (add \"LayerNorm\" for "
                "the GPT's LayerNorms)")
          .Example("[\"BatchNorm2d\", \"LayerNorm\"]")),
      std::move(Bool("strategy.mixed_precision.keep_low_precision_grads")
          .Ref([](auto& c) -> auto& { return c.train.sharding.mixed_precision.keep_low_precision_grads; })
          .Peer("FSDP MixedPrecision.keep_low_precision_grads")
          .Flag("keep_low_precision_grads", "keep gradient shards in --reduce_dtype (half the bytes) instead of "
                                            "upcasting them to f32")
          .Help("gradient shards kept in reduce_dtype, not f32")),
      std::move(Custom("strategy.activation_checkpointing", "list of strings", "[] | [\"Block\"]",
                       config_internal::ReadActivationCheckpointing).Gpt()
          .Get([](const RunConfig& c) {
            return OJson(c.train.model.activation_checkpointing ? std::vector<std::string>{"Block"}
                                                               : std::vector<std::string>{});
          })
          .Peer("Lightning activation_checkpointing_policy")
          .Flag(Mapped("activation_checkpointing", "recompute each block in backward", true, "false", "true",
                       [](const std::string& v) {
                         return One(absl::StrCat("strategy.activation_checkpointing=", FlagOn(v) ? "[\"Block\"]" : "[]"));
                       }))
          .Help("module types recomputed in backward").Example("[\"Block\"]")),
      std::move(Custom("strategy.state_dict_type", "enum", "\"SHARDED_STATE_DICT\" | \"FULL_STATE_DICT\" (also "
                                                           "\"sharded\" | \"full\")",
                       config_internal::ReadStateDictType).Gpt()
          .Get([](const RunConfig& c) {
            return OJson(c.train.state_dict_type == "full" ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT");
          })
          .Peer("FSDP state_dict_type")
          .Flag("state_dict_type", "checkpoint format: sharded (each rank its own file) or full (PyTorch-loadable)")
          .Help("checkpoints: each rank's shard, or one PyTorch-loadable file").Example("\"FULL_STATE_DICT\"")),
      std::move(Bool("strategy.sync_module_states").Ref([](auto& c) -> auto& {
        return c.train.sharding.sync_module_states; }).Peer("FSDP sync_module_states")
          .Help("broadcast rank 0's initial values")),
      std::move(Bool("strategy.skip_init_weights").Gpt().Ref([](auto& c) -> auto& { return c.skip_init_weights; })
          .Peer("MMEngine skip_init_weights")
          .Help("the weights come from checkpoint.init_from or checkpoint.resume (validated only)")),
      std::move(Strs("strategy.ignored_modules").Ref([](auto& c) -> auto& { return c.train.sharding.ignored_modules; })
          .Peer("FSDP ignored_modules").Help("modules left out of sharding (replicated)")),
  };
  for (ConfigField& f : rows) t->push_back(std::move(f));
  for (ConfigField& f : more) t->push_back(std::move(f));
}

}  // namespace

const std::vector<ConfigField>& ConfigFields() {
  static const auto* fields = [] {
    auto* t = new std::vector<ConfigField>(MakeFields());
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
